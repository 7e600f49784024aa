package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestConfigLoadsEveryKeyOfTheSample(t *testing.T) {
	cfg, err := loadConfig("testdata/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	switch {
	case cfg.Resource.HWClass != "gen5", cfg.Paths.ProcFS != "/host/proc", cfg.Collect.IRQInterval != 10*time.Second,
		cfg.Paths.CgroupFS != "/host/sys/fs/cgroup", cfg.Collect.CgroupTop != 50, cfg.Collect.CgroupScanLimit != 2000,
		cfg.Intake.SampleEvery != 20, cfg.Intake.SampledPerSecond != 200, cfg.Intake.ServiceSlowThresholds["billy"] != 100*time.Millisecond,
		cfg.Intake.MaxSpansPerRequest != 8192, cfg.Intake.DecodeBudgetBytes != 128<<20, cfg.Intake.MaxSpanAge != 30*time.Minute,
		cfg.Intake.OTLPIdleTimeout != time.Minute, cfg.Intake.OTLPMaxConnections != 256,
		cfg.Intake.Auth.TokenFile != "/etc/spikehunt-agent/intake-token/token", cfg.Intake.Auth.AllowUnauthenticated,
		cfg.Export.MaxSpans != 1000, len(cfg.Kafka.Brokers) != 2, cfg.Kafka.Compression != "zstd",
		cfg.Kafka.Security.SASL.Mechanism != "SCRAM-SHA-512", cfg.Kafka.Security.TLS.CAFile != "/etc/spikehunt/kafka-ca/ca.crt",
		cfg.Spool.MaxBytes != 128<<20, cfg.Spool.FsyncInterval != 500*time.Millisecond, cfg.Listen != "0.0.0.0:9464",
		cfg.Runtime.GoMaxProcs != 2, cfg.Runtime.TimerSlack != 2*time.Millisecond, cfg.Runtime.MemoryLimitRatio != 0.8,
		cfg.Capture.Kube.Enabled == nil || !*cfg.Capture.Kube.Enabled,
		cfg.Collect.PodNames.Enabled == nil || !*cfg.Collect.PodNames.Enabled, cfg.Collect.PodNames.MaxPods != 500,
		len(cfg.Intake.Trigger.UIDs) != 1 || cfg.Intake.Trigger.CIDRs[0] != "10.244.0.0/16", cfg.Capture.FireEvery != time.Minute, cfg.Capture.FireBurst != 1:
		t.Fatalf("loaded %+v", cfg)
	}
	// Keys the sample leaves out keep their defaults.
	if def := defaultConfig(); def.Runtime.GoMaxProcs != 1 || def.Runtime.TimerSlack != time.Millisecond || def.Runtime.MemoryLimitRatio != 0.9 {
		t.Errorf("default gomaxprocs %d, timer slack %v; want 1 and 1ms", def.Runtime.GoMaxProcs, def.Runtime.TimerSlack)
	}
	if cfg.Intake.MaxServices != 64 || cfg.Spool.SegmentBytes != 8<<20 {
		t.Fatalf("defaults lost: max_services %d segment_bytes %d", cfg.Intake.MaxServices, cfg.Spool.SegmentBytes)
	}
}

func TestConfigMistakesAreClearErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"sink: carrier-pigeon\n", `sink "carrier-pigeon"`},
		{"colect:\n  interval: 1s\n", "field colect not found"},
		{"collect:\n  interval: 10ms\n", "collect.interval must be 100ms–1m"},
		{"sink: otlp\n", "sink otlp needs otlp.endpoint"},
		{"intake:\n  sample_every: -3\n", "sample_every"},
		{"intake:\n  decode_budget_bytes: 1048576\n", "decode_budget_bytes = 1048576, want at least 2 × max_request_bytes"},
		{"intake:\n  max_span_age: 72h\n", "max_span_age = 72h0m0s"},
		{"runtime:\n  gomaxprocs: -1\n", "runtime.gomaxprocs"},
		{"runtime:\n  timer_slack: 1s\n", "runtime.timer_slack"},
		{"runtime:\n  memory_limit_ratio: 1.5\n", "runtime.memory_limit_ratio must be 0 (off) to 1"},
		{"capture:\n  kube:\n    kubeconfig: /no/such/kubeconfig\n", "capture.kube.kubeconfig"},
		{"intake:\n  trigger:\n    cidrs: [pods]\n", `trigger.cidrs: "pods"`},
		{"intake:\n  otlp_http: 0.0.0.0:4318\n", "otlp_http 0.0.0.0:4318 faces the network and auth.token_file is not set"},
		{"intake:\n  line_udp: 10.1.2.3:7171\n  auth:\n    token_file: /t\n", "line_udp 10.1.2.3:7171 faces the network"},
		{"capture:\n  fire_burst: 100\n", "capture.fire_burst"},
		{"capture:\n  fire_every: 10ms\n", "capture.fire_every"},
		{"kafka:\n  sasl:\n    mechanism: GSSAPI\n    username: a\n    password_file: /p\n", `unknown SASL mechanism "GSSAPI"`},
		{"kafka:\n  sasl:\n    mechanism: PLAIN\n    username: a\n", "needs kafka.sasl.password-file"},
		{"kafka:\n  sasl:\n    password: hunter2\n", "field password not found"},
	} {
		p := filepath.Join(t.TempDir(), "c.yaml")
		os.WriteFile(p, []byte(tc.yaml), 0o644)
		cfg, err := loadConfig(p)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want it to contain %q", tc.yaml, err, tc.want)
		}
	}
}

func TestCommandLineMistakesExitWithUsage(t *testing.T) {
	for _, args := range [][]string{{"--no-such-flag"}, {"extra"}} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		if err != errUsage {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	// The mistake in one line with its flag as -h writes it, and where
	// the help is; -h writes --flags as spikehunt's commands do.
	var stderr strings.Builder
	if err := run(context.Background(), []string{"--kafka.broker", "k:9092"}, io.Discard, &stderr); err != errUsage ||
		stderr.String() != "unknown flag --kafka.broker; did you mean --kafka.brokers?\nrun 'spikehunt-agent -h' for help\n" {
		t.Errorf("--kafka.broker: %v, stderr %q", err, stderr.String())
	}
	stderr.Reset()
	if err := run(context.Background(), []string{"-h"}, io.Discard, &stderr); !errors.Is(err, flag.ErrHelp) ||
		!strings.Contains(stderr.String(), "\n  --kafka.brokers string\n") || strings.Contains(stderr.String(), "\n  -kafka.brokers") {
		t.Errorf("-h: %v, want --kafka.brokers in the double-dash form:\n%s", err, stderr.String())
	}
	if err := run(context.Background(), []string{"--intake.trigger.uids", "0,alice"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), `"alice" is not a uid`) {
		t.Errorf("--intake.trigger.uids with a name: %v", err)
	}
	err := run(context.Background(), []string{"--sink", "otlp"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "otlp.endpoint") {
		t.Errorf("--sink otlp without an endpoint: %v", err)
	}
}

// The hardware class comes from the node's label through a real API server.
func TestHardwareClassFromTheNodeLabel(t *testing.T) {
	cfg, cl := testenv.SharedAPIServer(t)
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-7", Labels: map[string]string{"spikehunt.io/hw-class": "gen5"}}}
	if err := cl.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	got, err := nodeLabel(ctx, cfg, "node-7", "spikehunt.io/hw-class")
	if err != nil || got != "gen5" {
		t.Fatalf("label %q, %v", got, err)
	}
	if _, err := nodeLabel(ctx, cfg, "no-such-node", "x"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("missing node: %v", err)
	}
}

// Validate judges the agent's config and changes nothing in it, not even
// its components' sections: their defaults are withDefaults' job.
func TestValidateLeavesTheAgentConfigAsItWas(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
	}{
		{"limits left zero", "intake:\n  max_request_bytes: 0\n  queue_size: 0\nexport:\n  max_spans: 0\nspool:\n  segment_bytes: 0\n"},
		{"invalid: a negative sample_every", "intake:\n  sample_every: -3\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(p, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			load := func() Config {
				cfg, err := loadConfig(p)
				if err != nil {
					t.Fatal(err)
				}
				return cfg
			}
			cfg := load()
			_ = cfg.Validate()
			if !reflect.DeepEqual(load(), cfg) {
				t.Errorf("Validate changed the config: %+v", cfg)
			}
		})
	}
	cfg, err := loadConfig("testdata/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Intake.QueueSize, cfg.Export.MaxSpans, cfg.Spool.SegmentBytes = 0, 0, 0
	if d := cfg.withDefaults(); d.Intake.QueueSize == 0 || d.Export.MaxSpans == 0 || d.Spool.SegmentBytes == 0 || cfg.Intake.QueueSize != 0 {
		t.Errorf("withDefaults: queue %d, max spans %d, segment bytes %d; the receiver's queue %d",
			d.Intake.QueueSize, d.Export.MaxSpans, d.Spool.SegmentBytes, cfg.Intake.QueueSize)
	}
}

// --version names the build and starts nothing, whatever else is given.
func TestVersionPrintsTheBuildAndStartsNothing(t *testing.T) {
	var out, errs strings.Builder
	if err := run(t.Context(), []string{"--version", "--kafka.brokers", "nowhere:1"}, &out, &errs); err != nil {
		t.Fatalf("--version: %v\n%s", err, errs.String())
	}
	if !strings.HasPrefix(out.String(), "spikehunt-agent dev") {
		t.Errorf("--version printed %q, want spikehunt-agent and the build", out.String())
	}
}
