package intake

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

func TestConfigFromYAML(t *testing.T) {
	b, err := os.ReadFile("testdata/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Config{
		OTLPGRPC: "0.0.0.0:4317", LineUDP: "127.0.0.1:7171", LineUnix: "/run/spikehunt/agent.sock", LineUnixMode: 0o660,
		MaxRequestBytes: 4 << 20, SocketReadBuffer: 4 << 20,
		MaxSpansPerRequest: 4096, DecodeBudgetBytes: 32 << 20, OTLPDecoder: OTLPDecoderDirect, MaxSpanAge: 30 * time.Minute, MaxSpanAhead: 5 * time.Minute,
		OTLPReadTimeout: 30 * time.Second, OTLPWriteTimeout: 30 * time.Second, OTLPIdleTimeout: time.Minute,
		OTLPMaxConnectionAge: 30 * time.Minute, OTLPMaxConnections: 1024,
		// Shares of the totals the file set.
		OTLPMaxConnectionsPerPeer: 256, OTLPStreamsPerPeer: 16, DecodeBudgetPerPeerBytes: 8 << 20,
		SampleEvery: 20, SampledPerSecond: 250, SlowThreshold: 250 * time.Millisecond,
		ServiceSlowThresholds: map[string]time.Duration{"billy": time.Second, "search": 80 * time.Millisecond},
		TailQuantile:          0.995, TailWindow: time.Minute, TailMinCount: 200,
		MaxServices: 32, MaxEndpoints: 200, CardinalityIdle: 10 * time.Minute, CardinalityHalfLife: 2 * time.Minute, QueueSize: 4096,
		Auth: AuthConfig{TokenFile: "/etc/spikehunt-agent/intake-token/token"},
	}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if got := cfg.slowThreshold("billy"); got != time.Second {
		t.Errorf("slow threshold of billy = %s, want 1s", got)
	}
	if got := cfg.slowThreshold("other"); got != 250*time.Millisecond {
		t.Errorf("slow threshold of other = %s, want 250ms", got)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // substring of the error; "" = valid
	}{
		{"the defaults are valid", func(*Config) {}, ""},
		{"one receiver is enough", func(c *Config) { *c = Config{LineUDP: "127.0.0.1:7171"} }, ""},
		// A receiver that faces the network needs a way to authenticate.
		{"OTLP/HTTP on every interface without a token is an error", func(c *Config) { c.OTLPHTTP = ":4318" }, "otlp_http :4318 faces the network"},
		{"OTLP/gRPC on a node IP without a token is an error", func(c *Config) { c.OTLPGRPC = "10.0.0.7:4317" }, "otlp_grpc 10.0.0.7:4317 faces the network"},
		{"OTLP on IPv6 everywhere without a token is an error", func(c *Config) { c.OTLPGRPC = "[::]:4317" }, "otlp_grpc [::]:4317 faces the network"},
		{"OTLP on a host name without a token is an error", func(c *Config) { c.OTLPGRPC = "node-1.example:4317" }, "faces the network"},
		{"OTLP on localhost needs no token", func(c *Config) { c.OTLPGRPC, c.OTLPHTTP = "localhost:4317", "[::1]:4318" }, ""},
		{"OTLP beyond loopback with a token file is valid", func(c *Config) {
			c.OTLPGRPC, c.OTLPHTTP, c.Auth.TokenFile = "10.0.0.7:4317", "10.0.0.7:4318", "/etc/token"
		}, ""},
		{"UDP beyond loopback is an error even with a token file", func(c *Config) { c.LineUDP, c.Auth.TokenFile = "10.0.0.7:7171", "/etc/token" }, "line_udp 10.0.0.7:7171 faces the network"},
		{"allow_unauthenticated lets every receiver face the network", func(c *Config) {
			c.OTLPGRPC, c.OTLPHTTP, c.LineUDP, c.Auth.AllowUnauthenticated = ":4317", ":4318", ":7171", true
		}, ""},
		{"no receiver is an error", func(c *Config) { *c = Config{} }, "no receiver configured"},
		{"sample_every 0 takes the default", func(c *Config) { c.SampleEvery = 0 }, ""},
		{"a negative sample_every is an error", func(c *Config) { c.SampleEvery = -1 }, "sample_every = -1"},
		{"a negative slow_threshold disables it", func(c *Config) { c.SlowThreshold = -1 }, ""},
		{"a tail quantile of 1 is an error", func(c *Config) { c.TailQuantile = 1 }, "tail_quantile = 1"},
		{"a 1s tail window is too short", func(c *Config) { c.TailWindow = time.Second }, "tail_window = 1s"},
		{"a tiny request limit is an error", func(c *Config) { c.MaxRequestBytes = 100 }, "max_request_bytes = 100"},
		{"a zero per-service threshold is an error", func(c *Config) { c.ServiceSlowThresholds = map[string]time.Duration{"billy": -time.Second} }, `service_slow_thresholds["billy"]`},
		{"a decode budget below two requests is an error", func(c *Config) { c.DecodeBudgetBytes = 6 << 20 }, "decode_budget_bytes = 6291456"},
		{"a span age of two days is an error", func(c *Config) { c.MaxSpanAge = 48 * time.Hour }, "max_span_age = 48h0m0s"},
		{"a zero span cap takes the default", func(c *Config) { c.MaxSpansPerRequest = 0 }, ""},
		{"a negative span cap is an error", func(c *Config) { c.MaxSpansPerRequest = -1 }, "max_spans_per_request = -1"},
		{"a negative idle timeout is an error", func(c *Config) { c.OTLPIdleTimeout = -time.Second }, "otlp_idle_timeout"},
		{"a half-life of 0.5s is an error", func(c *Config) { c.CardinalityHalfLife = 500 * time.Millisecond }, "cardinality_half_life"},
		{"a mode with type bits is an error", func(c *Config) { c.LineUnixMode = os.ModeDir | 0o777 }, "line_unix_mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// Validate judges a config and changes nothing in it: defaults are
// WithDefaults' job, on a copy.
func TestValidateLeavesTheConfigAsItWas(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func() Config
	}{
		{"one receiver, every limit zero", func() Config { return Config{LineUDP: "127.0.0.1:7171"} }},
		{"the defaults", DefaultConfig},
		{"invalid: no receiver", func() Config { return Config{} }},
		{"invalid: a negative span cap, with thresholds and CIDRs", func() Config {
			c := Config{OTLPHTTP: ":4318", MaxSpansPerRequest: -1}
			c.ServiceSlowThresholds = map[string]time.Duration{"billy": time.Second}
			c.Trigger.CIDRs = []string{"10.0.0.0/8"}
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.make()
			_ = cfg.Validate()
			if diff := cmp.Diff(tc.make(), cfg); diff != "" {
				t.Errorf("Validate changed the config (-before +after):\n%s", diff)
			}
		})
	}
	if got := (Config{LineUDP: ":7171"}).WithDefaults(); got.MaxRequestBytes != DefaultMaxRequestBytes || got.DecodeBudgetBytes != DefaultDecodeBudgetBytes || got.LineUnixMode != 0o666 {
		t.Errorf("WithDefaults: max_request_bytes %d, decode_budget_bytes %d, line_unix_mode %o; want the defaults", got.MaxRequestBytes, got.DecodeBudgetBytes, got.LineUnixMode)
	}
}
