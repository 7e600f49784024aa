package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

func TestParseFlags(t *testing.T) {
	type settings struct {
		Metrics, Probes, LeaseNamespace string
		LeaderElect                     bool
	}
	tests := []struct {
		name    string
		args    []string
		want    settings
		wantErr bool
	}{
		{"no flags serve metrics on 8080 and probes on 8081 without leader election", nil,
			settings{Metrics: ":8080", Probes: ":8081"}, false},
		{"--leader-elect turns leader election on", []string{"--leader-elect", "--leader-election-namespace=ops"},
			settings{Metrics: ":8080", Probes: ":8081", LeaseNamespace: "ops", LeaderElect: true}, false},
		{"metrics can be turned off", []string{"--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:9440"},
			settings{Metrics: "0", Probes: "127.0.0.1:9440"}, false},
		{"a stray argument is an error", []string{"run"}, settings{}, true},
		{"an unknown flag is an error", []string{"--leader-elect-please"}, settings{}, true},
		{"a memory limit ratio over 1 is an error", []string{"--runtime.memory-limit-ratio=1.5"}, settings{}, true},
		{"a memory limit ratio of 0 turns it off", []string{"--runtime.memory-limit-ratio=0"},
			settings{Metrics: ":8080", Probes: ":8081"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want error %v", err, tt.wantErr)
			}
			got := settings{o.metricsAddr, o.probeAddr, o.leaderElectionNamespace, o.leaderElect}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOneOfTwoReplicasLeadsAndTheOtherTakesOver runs two managers as the
// Deployment does, against a real API server: one holds the Lease, both
// answer their probes, and when the leader stops the other takes over.
func TestOneOfTwoReplicasLeadsAndTheOtherTakesOver(t *testing.T) {
	cfg, admin := testenv.SharedAPIServer(t)
	// The leader's controllers watch the operator's own kinds.
	testenv.InstallCRDs(t, cfg, filepath.Join("..", "config", "crd", "bases"))
	type replica struct {
		name   string
		probes string
		cancel context.CancelFunc
		done   chan error
		leads  <-chan struct{}
	}
	start := func(name string) *replica {
		o, err := parseFlags([]string{"--leader-elect", "--leader-election-namespace=default",
			"--metrics-bind-address=0", "--health-probe-bind-address=" + freeAddr(t)})
		if err != nil {
			t.Fatal(err)
		}
		o.skipNameValidation = true // two replicas in one process
		mgr, err := newManager(cfg, o)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{name: name, probes: o.probeAddr, cancel: cancel, done: make(chan error, 1), leads: mgr.Elected()}
		go func() { r.done <- mgr.Start(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-r.done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
		return r
	}
	a, b := start("a"), start("b")

	for _, r := range []*replica{a, b} {
		for _, path := range []string{"/healthz", "/readyz"} {
			if err := eventuallyOK("http://" + r.probes + path); err != nil {
				t.Errorf("replica %s: %v", r.name, err)
			}
		}
	}

	var leader, standby *replica
	select {
	case <-a.leads:
		leader, standby = a, b
	case <-b.leads:
		leader, standby = b, a
	case <-time.After(30 * time.Second):
		t.Fatal("no replica became the leader in 30 s")
	}
	select {
	case <-standby.leads:
		t.Fatalf("both replicas lead")
	case <-time.After(3 * time.Second):
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lease coordinationv1.Lease
	if err := admin.Get(ctx, client.ObjectKey{Namespace: "default", Name: leaderElectionID}, &lease); err != nil {
		t.Fatalf("the Lease %s: %v", leaderElectionID, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("the Lease has no holder: %+v", lease.Spec)
	}

	leader.cancel()
	select {
	case <-standby.leads:
	case <-time.After(20 * time.Second):
		t.Fatalf("replica %s did not take over within 20 s of the leader stopping", standby.name)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// eventuallyOK polls url until it answers 200, for up to 20 s.
func eventuallyOK(url string) error {
	deadline := time.Now().Add(20 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return errors.Join(fmt.Errorf("GET %s never answered 200", url), last)
}

func TestParseFlagsOfIndexingAndAlertIntake(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	type settings struct {
		DSN, Brokers, Topic, Group, Webhook string
		QPS                                 float64
		Burst                               int
	}
	got := settings{o.dsn, o.kafkaBrokers, o.alertsTopic, o.alertsGroup, o.webhookAddr, o.kubeQPS, o.kubeBurst}
	want := settings{Topic: "spikehunt.alerts", Group: "spikehunt-operator-alerts", Webhook: ":8443", QPS: 500, Burst: 1000}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults: indexing and intake off, the client rate raised (-want +got):\n%s", diff)
	}
	o, err = parseFlags([]string{"--dsn=chdb:///var/lib/spikehunt?database=prod", "--alerts.kafka.brokers=k1:9092,k2:9092", "--alerts.keys-dir=/etc/spikehunt/alert-keys",
		"--webhook.alertmanager-token-file=/secrets/token", "--webhook.tls-cert-file=/tls/tls.crt", "--webhook.tls-key-file=/tls/tls.key"})
	if err != nil {
		t.Fatal(err)
	}
	if o.dsn != "chdb:///var/lib/spikehunt?database=prod" || o.kafkaBrokers != "k1:9092,k2:9092" || o.alertmanagerTokenFile != "/secrets/token" {
		t.Errorf("parsed dsn %q, brokers %q, token file %q", o.dsn, o.kafkaBrokers, o.alertmanagerTokenFile)
	}
}

// The Kafka alert intake acts on what the topic holds, so without the
// detector's signing keys the operator does not start unless told in so
// many words to accept unsigned alerts.
func TestTheOperatorRefusesAnUnsignedAlertIntakeUnlessAllowedExplicitly(t *testing.T) {
	_, err := parseFlags([]string{"--alerts.kafka.brokers=k1:9092"})
	if err == nil || !strings.Contains(err.Error(), "--alerts.keys-dir") || !strings.Contains(err.Error(), "--alerts.allow-unsigned") {
		t.Errorf("brokers without keys: %v, want an error naming --alerts.keys-dir and --alerts.allow-unsigned", err)
	}
	o, err := parseFlags([]string{"--alerts.kafka.brokers=k1:9092", "--alerts.allow-unsigned"})
	if err != nil || !o.kafkaIntakeConfig().AllowUnsigned {
		t.Errorf("--alerts.allow-unsigned: %v, allow_unsigned %v", err, o.kafkaIntakeConfig().AllowUnsigned)
	}
	if _, err := parseFlags([]string{"--alerts.kafka.brokers=k1:9092", "--alerts.keys-dir=/k", "--alerts.max-signature-age=10s"}); err == nil {
		t.Error("--alerts.max-signature-age=10s was accepted, want 1m–168h")
	}
}

// The alert intake's Kafka security comes from --alerts.kafka.tls.* and
// --alerts.kafka.sasl.*, checked with the other flags; there is no
// password flag.
func TestParseFlagsOfTheAlertIntakesKafkaSecurity(t *testing.T) {
	o, err := parseFlags([]string{"--alerts.kafka.brokers=k1:9093", "--alerts.allow-unsigned", "--alerts.kafka.tls.enabled",
		"--alerts.kafka.tls.ca-file=/etc/spikehunt/kafka/ca/ca.crt", "--alerts.kafka.sasl.mechanism=SCRAM-SHA-512",
		"--alerts.kafka.sasl.username=spikehunt", "--alerts.kafka.sasl.password-file=/etc/spikehunt/kafka/sasl/password"})
	if err != nil {
		t.Fatal(err)
	}
	sec := o.kafkaIntakeConfig().Security
	if !sec.TLS.Enabled || sec.TLS.CAFile != "/etc/spikehunt/kafka/ca/ca.crt" || sec.SASL.Mechanism != "SCRAM-SHA-512" ||
		sec.SASL.Username != "spikehunt" || sec.SASL.PasswordFile != "/etc/spikehunt/kafka/sasl/password" {
		t.Errorf("security %+v", sec)
	}
	_, err = parseFlags([]string{"--alerts.kafka.brokers=k1:9093", "--alerts.allow-unsigned", "--alerts.kafka.sasl.mechanism=SCRAM-SHA-512", "--alerts.kafka.sasl.username=u"})
	if err == nil || !strings.Contains(err.Error(), "password-file") {
		t.Errorf("SCRAM without a password file: %v, want an error naming the password file", err)
	}
	if _, err := parseFlags([]string{"--alerts.kafka.sasl.password=hunter2"}); err == nil {
		t.Error("--alerts.kafka.sasl.password was accepted: a password must never be a flag")
	}
}

// The report server is off unless --report.address is given, and then it
// does not start without users or without the store it reads.
func TestTheReportServerIsOffByDefaultAndChecksItsFlags(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil || o.report.Address != "" || o.report.Mode != "proxy" {
		t.Fatalf("defaults: %v, address %q, mode %q: want off, proxy", err, o.report.Address, o.report.Mode)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--report.address=:8090", "--artifacts.config=/etc/a.yaml"}, "--report.users-file"},
		{[]string{"--report.address=:8090", "--report.users-file=/u.yaml"}, "--artifacts.config"},
		{[]string{"--report.address=:8090", "--report.users-file=/u.yaml", "--artifacts.config=/a.yaml", "--report.mode=presign"}, "--report.mode"},
		{[]string{"--report.address=:8090", "--report.users-file=/u.yaml", "--artifacts.config=/a.yaml", "--report.presign-ttl=48h"}, "--report.presign-ttl"},
		{[]string{"--report.address=:8090", "--report.users-file=/u.yaml", "--artifacts.config=/a.yaml", "--report.tls-cert-file=/c"}, "--report.tls-key-file"},
	} {
		if _, err := parseFlags(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
	o, err = parseFlags([]string{"--report.address=:8090", "--report.users-file=/etc/spikehunt/report-users/users.yaml", "--artifacts.config=/etc/spikehunt/artifacts/store.yaml",
		"--report.mode=redirect", "--report.presign-ttl=2m"})
	if err != nil || o.report.Mode != "redirect" || o.report.PresignTTL != 2*time.Minute {
		t.Errorf("redirect: %v, %+v", err, o.report)
	}
}

// -h writes the flags as spikehunt's commands do (--dsn, not Go's -dsn),
// and a mistake is one line that names the nearest flag.
func TestTheOperatorsHelpAndMistakesAreSpikehuntsStyle(t *testing.T) {
	var stderr strings.Builder
	if _, err := parseFlagsTo([]string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) ||
		!strings.HasPrefix(stderr.String(), "Usage: spikehunt-operator [flags]\n") ||
		!strings.Contains(stderr.String(), "\n  --dsn string\n") || strings.Contains(stderr.String(), "\n  -dsn") {
		t.Errorf("-h: %v\n%s", err, stderr.String())
	}
	stderr.Reset()
	if _, err := parseFlagsTo([]string{"--leader-elec"}, &stderr); !errors.Is(err, errUsage) ||
		stderr.String() != "unknown flag --leader-elec; did you mean --leader-elect?\n" {
		t.Errorf("--leader-elec: %v, stderr %q", err, stderr.String())
	}
}

// --version is answered before anything is configured or reached.
func TestVersionIsAnsweredBeforeAnythingStarts(t *testing.T) {
	var errs strings.Builder
	if _, err := parseFlagsTo([]string{"--version", "--dsn", "chdb:///nowhere"}, &errs); !errors.Is(err, errShowVersion) {
		t.Fatalf("--version: %v, want errShowVersion\n%s", err, errs.String())
	}
}
