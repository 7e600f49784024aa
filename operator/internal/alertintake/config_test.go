package alertintake

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"
)

func TestConfigFromYAML(t *testing.T) {
	var cfg struct {
		Kafka   KafkaConfig   `yaml:"kafka"`
		Webhook WebhookConfig `yaml:"webhook"`
	}
	if err := yaml.Unmarshal(readTestdata(t, "config.yaml"), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Kafka, cfg.Webhook = cfg.Kafka.WithDefaults(), cfg.Webhook.WithDefaults()
	if err := cfg.Kafka.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Webhook.Validate(); err != nil {
		t.Fatal(err)
	}
	wantKafka := KafkaConfig{
		Brokers: []string{"kafka-0.kafka:9092", "kafka-1.kafka:9092"}, Topic: "spikehunt.alerts",
		Group: "spikehunt-operator-prod", ClientID: "spikehunt-operator", MaxPollRecords: 500,
		StartAt: "latest", SessionTimeout: 20 * time.Second,
		MaxRecordBytes: 256 << 10, KeysDir: "/etc/spikehunt/alert-keys", MaxSignatureAge: 30 * time.Minute, MaxClockSkew: 5 * time.Minute,
		TopicWatchEvery: 10 * time.Second,
	}
	ignoreClock := cmpopts.IgnoreFields(KafkaConfig{}, "Clock")
	if diff := cmp.Diff(wantKafka, cfg.Kafka, ignoreClock); diff != "" {
		t.Errorf("kafka config (-want +got):\n%s", diff)
	}
	wantWebhook := WebhookConfig{
		Address: "0.0.0.0:9443", TLSCertFile: "/etc/spikehunt/webhook-tls/tls.crt", TLSKeyFile: "/etc/spikehunt/webhook-tls/tls.key",
		MaxBodyBytes: 4 << 20, EmitTimeout: 10 * time.Second, MaxConnections: 512, MaxConnectionsPerPeer: 128,
		Grafana: &GrafanaConfig{
			Path: "/webhook/grafana", Secret: SecretSource{File: "/etc/spikehunt/grafana-hmac/secret"},
			SignatureHeader: "X-Grafana-Alerting-Signature", TimestampHeader: "X-Grafana-Alerting-Timestamp",
			ReplayWindow: 2 * time.Minute, ReplayCacheSize: 65536,
		},
		Alertmanager: &AlertmanagerConfig{Path: "/webhook/alertmanager", Token: SecretSource{Env: "SPIKEHUNT_ALERTMANAGER_TOKEN"}},
	}
	if diff := cmp.Diff(wantWebhook, cfg.Webhook, cmpopts.IgnoreFields(WebhookConfig{}, "Clock")); diff != "" {
		t.Errorf("webhook config (-want +got):\n%s", diff)
	}
}

func TestKafkaConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*KafkaConfig)
		want string // substring of the error; "" = valid
	}{
		{"brokers and a keys folder are enough", func(*KafkaConfig) {}, ""},
		{"no keys: refused, it would act on anything written to the topic", func(c *KafkaConfig) { c.KeysDir = "" },
			"no signing keys: set keys_dir (--alerts.keys-dir)"},
		{"no keys, unsigned allowed explicitly", func(c *KafkaConfig) { c.KeysDir, c.AllowUnsigned = "", true }, ""},
		{"a signature older than a week is never fresh", func(c *KafkaConfig) { c.MaxSignatureAge = 8 * 24 * time.Hour }, "max_signature_age = 192h0m0s"},
		{"a clock skew below a second", func(c *KafkaConfig) { c.MaxClockSkew = time.Millisecond }, "max_clock_skew = 1ms"},
		{"no brokers", func(c *KafkaConfig) { c.Brokers = nil }, "no brokers: set kafka.brokers"},
		{"an empty broker", func(c *KafkaConfig) { c.Brokers = append(c.Brokers, " ") }, "an empty broker address"},
		{"start_at neither earliest nor latest", func(c *KafkaConfig) { c.StartAt = "beginning" }, `start_at = "beginning"`},
		{"a session timeout below 6s", func(c *KafkaConfig) { c.SessionTimeout = time.Second }, "session_timeout = 1s"},
		{"a poll bound above 100000", func(c *KafkaConfig) { c.MaxPollRecords = 200_000 }, "max_poll_records = 200000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := KafkaConfig{Brokers: []string{"k:9092"}, KeysDir: "/etc/spikehunt/alert-keys"}
			tc.edit(&c)
			checkErr(t, c.Validate(), tc.want)
		})
	}
}

func TestWebhookConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*WebhookConfig)
		want string
	}{
		{"both endpoints with defaults", func(*WebhookConfig) {}, ""},
		{"only alertmanager", func(c *WebhookConfig) { c.Grafana = nil }, ""},
		{"no endpoint", func(c *WebhookConfig) { c.Grafana, c.Alertmanager = nil, nil }, "no endpoint enabled"},
		{"no TLS key pair", func(c *WebhookConfig) { c.TLSKeyFile = "" }, "tls_cert_file and tls_key_file are required"},
		{"a secret from nowhere", func(c *WebhookConfig) { c.Grafana.Secret = SecretSource{} }, "grafana.secret: set exactly one of file or env"},
		{"a secret from two places", func(c *WebhookConfig) { c.Alertmanager.Token.Env = "X" }, "alertmanager.token: set exactly one of file or env"},
		{"one path for both", func(c *WebhookConfig) { c.Alertmanager.Path = DefaultGrafanaPath }, "grafana.path and alertmanager.path are both"},
		{"a relative path", func(c *WebhookConfig) { c.Grafana.Path = "hooks/grafana" }, `grafana.path = "hooks/grafana"`},
		{"a header name with a space", func(c *WebhookConfig) { c.Grafana.TimestampHeader = "X Time" }, `timestamp_header = "X Time" is not a header name`},
		{"one header for signature and timestamp", func(c *WebhookConfig) { c.Grafana.TimestampHeader = "x-grafana-alerting-signature" },
			"signature_header and grafana.timestamp_header are both"},
		{"a replay window of a day", func(c *WebhookConfig) { c.Grafana.ReplayWindow = 24 * time.Hour }, "replay_window = 24h0m0s, want 10s–1h"},
		{"a body bound of 100 bytes", func(c *WebhookConfig) { c.MaxBodyBytes = 100 }, "max_body_bytes = 100"},
		{"an emit timeout of 1ms", func(c *WebhookConfig) { c.EmitTimeout = time.Millisecond }, "emit_timeout = 1ms"},
		{"a million connections", func(c *WebhookConfig) { c.MaxConnections = 1 << 20 }, "max_connections = 1048576"},
		{"negative connections", func(c *WebhookConfig) { c.MaxConnections = -1 }, "max_connections = -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := WebhookConfig{
				TLSCertFile: "tls.crt", TLSKeyFile: "tls.key",
				Grafana:      &GrafanaConfig{Secret: SecretSource{File: "secret"}},
				Alertmanager: &AlertmanagerConfig{Token: SecretSource{File: "token"}},
			}
			tc.edit(&c)
			checkErr(t, c.Validate(), tc.want)
		})
	}
}

func TestSecretSourceLoad(t *testing.T) {
	dir := t.TempDir()
	const secret = "0123456789abcdef0123456789abcdef"
	t.Setenv("INTAKE_TEST_SECRET", secret)
	t.Setenv("INTAKE_TEST_SHORT", "hunter2")
	for _, tc := range []struct {
		name string
		src  SecretSource
		want string // the secret, or a substring of the error
		ok   bool
	}{
		{"a file's one trailing newline is dropped", SecretSource{File: writeFile(t, dir, "nl", secret+"\n")}, secret, true},
		{"a file with CRLF", SecretSource{File: writeFile(t, dir, "crlf", secret+"\r\n")}, secret, true},
		{"an environment variable", SecretSource{Env: "INTAKE_TEST_SECRET"}, secret, true},
		{"a missing file", SecretSource{File: dir + "/none"}, "no such file", false},
		{"an unset variable", SecretSource{Env: "INTAKE_TEST_UNSET"}, "environment variable INTAKE_TEST_UNSET is not set", false},
		{"a short secret", SecretSource{Env: "INTAKE_TEST_SHORT"}, "is 7 bytes, want 16–4096 (make one with: openssl rand -hex 32)", false},
		{"an empty file", SecretSource{File: writeFile(t, dir, "empty", "\n")}, "is 0 bytes", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.src.load("test.secret")
			if tc.ok {
				if err != nil || string(got) != tc.want {
					t.Fatalf("load = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			checkErr(t, err, tc.want)
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Errorf("no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("error %q does not contain %q", err, want)
	}
}

// Validate judges a config and changes nothing in it, not even the
// endpoint sections it points to: defaults are WithDefaults' job, on a
// copy.
func TestValidateLeavesTheConfigAsItWas(t *testing.T) {
	ignoreClock := cmpopts.IgnoreFields(KafkaConfig{}, "Clock")
	for _, tc := range []struct {
		name string
		make func() KafkaConfig
	}{
		{"brokers and keys, the rest zero", func() KafkaConfig {
			return KafkaConfig{Brokers: []string{"k:9092"}, KeysDir: "/keys"}
		}},
		{"invalid: no keys", func() KafkaConfig { return KafkaConfig{Brokers: []string{"k:9092"}} }},
	} {
		t.Run("kafka: "+tc.name, func(t *testing.T) {
			c := tc.make()
			_ = c.Validate()
			if diff := cmp.Diff(tc.make(), c); diff != "" {
				t.Errorf("Validate changed the config (-before +after):\n%s", diff)
			}
			if d := c.WithDefaults(); d.Clock == nil || cmp.Diff(tc.make(), c, ignoreClock) != "" || d.Topic != DefaultTopic {
				t.Errorf("WithDefaults: topic %q, clock %v; or it changed its receiver", d.Topic, d.Clock)
			}
		})
	}
	for _, tc := range []struct {
		name string
		make func() WebhookConfig
	}{
		{"both endpoints, paths and headers zero", func() WebhookConfig {
			return WebhookConfig{TLSCertFile: "tls.crt", TLSKeyFile: "tls.key",
				Grafana:      &GrafanaConfig{Secret: SecretSource{File: "secret"}},
				Alertmanager: &AlertmanagerConfig{Token: SecretSource{File: "token"}}}
		}},
		{"invalid: no TLS", func() WebhookConfig {
			return WebhookConfig{Grafana: &GrafanaConfig{Secret: SecretSource{Env: "S"}}}
		}},
	} {
		t.Run("webhook: "+tc.name, func(t *testing.T) {
			c := tc.make()
			g := c.Grafana
			_ = c.Validate()
			d := c.WithDefaults()
			if diff := cmp.Diff(tc.make(), c); diff != "" {
				t.Errorf("Validate or WithDefaults changed the config (-before +after):\n%s", diff)
			}
			if c.Grafana != g || d.Grafana == g || d.Grafana.Path != DefaultGrafanaPath {
				t.Errorf("WithDefaults must fill a copy of the grafana section: got path %q", d.Grafana.Path)
			}
		})
	}
}
