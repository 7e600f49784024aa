package alertintake

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/alertsig"
	"github.com/spikehunt/spikehunt/internal/defaults"
	"github.com/spikehunt/spikehunt/internal/peerconns"
	"github.com/spikehunt/spikehunt/kafkasec"
)

// Defaults, exported so that the operator's flag help can print them.
const (
	DefaultTopic          = "spikehunt.alerts" // docs/design.md §3; pipelines/services/alerts.DefaultTopic
	DefaultGroup          = "spikehunt-operator-alerts"
	DefaultClientID       = "spikehunt-operator"
	DefaultMaxPollRecords = 500
	DefaultStartAt        = StartAtEarliest
	// DefaultMaxRecordBytes bounds an alert record: the detector's are a
	// few KiB (at most 20 hosts and 5 suspects per alert).
	DefaultMaxRecordBytes = 256 << 10
	// DefaultTopicWatchEvery: how often a missing alerts topic is looked for.
	DefaultTopicWatchEvery = 10 * time.Second

	DefaultAddress      = ":8443"
	DefaultMaxBodyBytes = 1 << 20
	DefaultEmitTimeout  = 10 * time.Second
	// DefaultMaxConnections bounds the webhook's open connections: Grafana
	// and Alertmanager each hold a few; a scanner holding thousands idle
	// would otherwise keep a file descriptor and a goroutine apiece.
	DefaultMaxConnections   = 256
	DefaultGrafanaPath      = "/webhook/grafana"
	DefaultAlertmanagerPath = "/webhook/alertmanager"
	// DefaultSignatureHeader is the signature header Grafana's contact
	// point form and documentation name.
	DefaultSignatureHeader = "X-Grafana-Alerting-Signature"
	// DefaultTimestampHeader is the timestamp header name of Grafana's
	// provisioning example. Grafana has no default: its contact point sends
	// a timestamp only when "Timestamp header" is filled in, and it must be
	// filled in with this name (or set TimestampHeader to the one used).
	DefaultTimestampHeader = "X-Grafana-Alerting-Signature-Timestamp"
	DefaultReplayWindow    = 5 * time.Minute
	DefaultReplayCacheSize = 1 << 16
)

// Where a consumer group that has no committed offset starts.
const (
	StartAtEarliest = "earliest" // everything the topic retains: no alert is missed, old ones come too
	StartAtLatest   = "latest"   // only alerts produced after the group first joined
)

// KafkaConfig configures a KafkaConsumer. Brokers and the detector's
// keys (KeysDir or Keys; or AllowUnsigned) are required; a zero field of
// the others means its default (WithDefaults; NewKafkaConsumer fills them).
type KafkaConfig struct {
	Brokers []string `yaml:"brokers"`
	// Topic is the detector's alerts topic (default spikehunt.alerts).
	Topic string `yaml:"topic"`
	// Group is the consumer group; its committed offsets are where a
	// restarted operator resumes (default spikehunt-operator-alerts). Give
	// two operators of different clusters different groups, or they share
	// the alerts between them.
	Group    string `yaml:"group"`
	ClientID string `yaml:"client_id"`
	// MaxPollRecords bounds the records handed to the sink in one Emit
	// (default 500, 1–100000).
	MaxPollRecords int `yaml:"max_poll_records"`
	// StartAt is where a group without committed offsets starts: earliest
	// (default) or latest. Once the group has committed, it resumes there.
	StartAt string `yaml:"start_at"`
	// SessionTimeout is the group session timeout (default: franz-go's,
	// 45s; 6s–5m). Lower it to hand a dead operator's partitions over
	// sooner.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// MaxRecordBytes bounds a record's value (default 256 KiB, 1 KiB–16
	// MiB); a larger one is refused as too_large before it is hashed or
	// parsed.
	MaxRecordBytes int `yaml:"max_record_bytes"`
	// KeysDir is a folder holding the detector's signing keys, one file
	// per key named after its id (a Kubernetes Secret mounted as a
	// volume). A record must be signed by one of them
	// (internal/alertdoc/schema.md, "Signatures"); to rotate, add the new
	// key here first, then sign with it, then remove the old one. Read once
	// by NewKafkaConsumer.
	KeysDir string `yaml:"keys_dir"`
	// Keys are verification keys given directly (tests, an in-process
	// detector), in addition to those of KeysDir.
	Keys []alertsig.Key `yaml:"-"`
	// AllowUnsigned accepts records that carry no signature at all.
	// Without keys it is required, and then anyone who can write to the
	// topic widens captures within the budgets: only for a topic nobody
	// untrusted can write to, or while the detector is being switched to
	// signing. Records that carry a signature are verified either way.
	AllowUnsigned bool `yaml:"allow_unsigned"`
	// MaxSignatureAge is how long ago a record may have been signed
	// (default 1h, 1m–168h). A backlog older than it, after an operator
	// outage, is refused as stale_signature (counted); a captured record
	// can be replayed for at most this long.
	MaxSignatureAge time.Duration `yaml:"max_signature_age"`
	// MaxClockSkew is how far ahead of the operator's clock a signing time
	// may be (default 5m, 1s–1h).
	MaxClockSkew time.Duration `yaml:"max_clock_skew"`
	// Clock stamps Alert.ReceivedAt and judges signing times. Default the
	// system clock.
	Clock Clock `yaml:"-"`
	// TopicWatchEvery is how often the consumer looks for the alerts
	// topic while it does not exist (default 10s, 100ms–10m): until a
	// detector publishes, the topic may not be there; the consumer waits
	// for it, says so (spikehunt_alertintake_kafka_topic_missing, a
	// warning), and consumes it once it exists. The webhooks are not
	// affected.
	TopicWatchEvery time.Duration `yaml:"topic_watch_every"`
	// Security is TLS and SASL (keys tls and sasl beside brokers).
	Security kafkasec.Config `yaml:",inline"`
}

// WithDefaults returns c with its zero fields set to their defaults; c
// itself is not changed.
func (c KafkaConfig) WithDefaults() KafkaConfig {
	defaults.Fill(&c.Topic, DefaultTopic)
	defaults.Fill(&c.Group, DefaultGroup)
	defaults.Fill(&c.ClientID, DefaultClientID)
	defaults.Fill(&c.MaxPollRecords, DefaultMaxPollRecords)
	defaults.Fill(&c.StartAt, DefaultStartAt)
	defaults.Fill(&c.MaxRecordBytes, DefaultMaxRecordBytes)
	defaults.Fill(&c.MaxSignatureAge, alertsig.DefaultMaxAge)
	defaults.Fill(&c.MaxClockSkew, alertsig.DefaultMaxSkew)
	defaults.Fill[Clock](&c.Clock, systemClock{})
	defaults.Fill(&c.TopicWatchEvery, DefaultTopicWatchEvery)
	return c
}

// Validate checks c as NewKafkaConsumer would run it, its zero fields
// taken as their defaults. It does not change c.
func (c KafkaConfig) Validate() error {
	c = c.WithDefaults()
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("intake: kafka: "+format, args...))
		}
	}
	check(len(c.Brokers) > 0, "no brokers: set kafka.brokers (host:port of at least one broker)")
	for _, b := range c.Brokers {
		check(strings.TrimSpace(b) != "", "an empty broker address in kafka.brokers")
	}
	check(c.MaxPollRecords >= 1 && c.MaxPollRecords <= 100_000, "max_poll_records = %d, want 1–100000", c.MaxPollRecords)
	check(c.StartAt == StartAtEarliest || c.StartAt == StartAtLatest, "start_at = %q, want %q or %q", c.StartAt, StartAtEarliest, StartAtLatest)
	check(c.SessionTimeout == 0 || (c.SessionTimeout >= 6*time.Second && c.SessionTimeout <= 5*time.Minute),
		"session_timeout = %s, want 6s–5m (or 0 for franz-go's default)", c.SessionTimeout)
	check(c.KeysDir != "" || len(c.Keys) > 0 || c.AllowUnsigned,
		"no signing keys: set keys_dir (--alerts.keys-dir) to the mounted Secret of the detector's alert signing keys, "+
			"or allow_unsigned (--alerts.allow-unsigned) to let anyone who can write to the topic widen captures")
	check(c.MaxRecordBytes >= 1<<10 && c.MaxRecordBytes <= 16<<20, "max_record_bytes = %d, want 1 KiB–16 MiB", c.MaxRecordBytes)
	check(c.MaxSignatureAge >= time.Minute && c.MaxSignatureAge <= 7*24*time.Hour, "max_signature_age = %s, want 1m–168h", c.MaxSignatureAge)
	check(c.MaxClockSkew >= time.Second && c.MaxClockSkew <= time.Hour, "max_clock_skew = %s, want 1s–1h", c.MaxClockSkew)
	check(c.TopicWatchEvery >= 100*time.Millisecond && c.TopicWatchEvery <= 10*time.Minute, "topic_watch_every = %s, want 100ms–10m", c.TopicWatchEvery)
	if err := c.Security.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("intake: kafka: %w", err))
	}
	return errors.Join(errs...)
}

// WebhookConfig configures a Webhook. Each endpoint is enabled by its
// section; at least one must be.
type WebhookConfig struct {
	// Address is the host:port Serve listens on (default :8443).
	Address string `yaml:"address"`
	// TLSCertFile and TLSKeyFile are the PEM server certificate (chain)
	// and key. Required: the webhook is HTTPS only, because the
	// Alertmanager token travels in a header.
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
	// MaxBodyBytes bounds a request body (default 1 MiB, 1 KiB–64 MiB);
	// larger requests get 413. Alertmanager and Grafana send a whole
	// notification group in one request: raise it for very large groups,
	// or cap the group size at the sender (Grafana "Max alerts",
	// Alertmanager max_alerts).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// EmitTimeout is how long a request waits for the sink to take its
	// alerts before it gets 503 and the sender retries (default 10s,
	// 100ms–5m). Grafana gives up on a webhook after 30s.
	EmitTimeout time.Duration `yaml:"emit_timeout"`
	// MaxConnections bounds the connections served at once (default 256,
	// 1–65536). MaxConnectionsPerPeer bounds one client IP's, below it
	// (default a quarter of it), and the last sixteenth of the places are
	// only for connections that have carried an authenticated request. A
	// connection that finds no place takes that of the connection idle
	// longest of the peer with the most; when every one in its way is
	// busy it is closed on accept (internal/peerconns). Both are counted
	// in spikehunt_alertintake_webhook_connections_refused_total{reason}.
	MaxConnections        int `yaml:"max_connections"`
	MaxConnectionsPerPeer int `yaml:"max_connections_per_peer"`

	Grafana      *GrafanaConfig      `yaml:"grafana"`
	Alertmanager *AlertmanagerConfig `yaml:"alertmanager"`

	// Clock stamps Alert.ReceivedAt and judges Grafana timestamps.
	// Default the system clock.
	Clock Clock `yaml:"-"`
}

// GrafanaConfig enables the Grafana alerting endpoint. Configure the
// contact point (Webhook integration) with the endpoint's URL, an HMAC
// signature with the same secret, and the timestamp header filled in:
// requests without a timestamp are refused, since a signature over the
// body alone can be replayed forever.
type GrafanaConfig struct {
	// Path is the endpoint's URL path (default /webhook/grafana).
	Path string `yaml:"path"`
	// Secret is the contact point's HMAC secret, used as is (its bytes,
	// not decoded). Required.
	Secret SecretSource `yaml:"secret"`
	// SignatureHeader and TimestampHeader are the contact point's Header
	// and Timestamp header (defaults DefaultSignatureHeader and
	// DefaultTimestampHeader). Set the contact point's Header explicitly:
	// when it is left empty, some Grafana versions sign into
	// X-Grafana-Alert-Signature instead of the documented name.
	SignatureHeader string `yaml:"signature_header"`
	TimestampHeader string `yaml:"timestamp_header"`
	// ReplayWindow is how far a request's timestamp may be from now, in
	// either direction (default 5m, 10s–1h). Clocks of Grafana and the
	// operator must agree within it. A Grafana clock d behind the
	// operator's also gets 503 (retried) for d after each start or leader
	// change: requests signed before the webhook started are refused.
	ReplayWindow time.Duration `yaml:"replay_window"`
	// ReplayCacheSize bounds the signatures remembered to refuse a request
	// seen before within the window (default 65536, 1–10000000); beyond it
	// the oldest are forgotten early.
	ReplayCacheSize int `yaml:"replay_cache_size"`
}

// AlertmanagerConfig enables the Alertmanager endpoint. Configure the
// receiver's webhook_config with the endpoint's URL and
// http_config.authorization.credentials_file holding the same token.
type AlertmanagerConfig struct {
	// Path is the endpoint's URL path (default /webhook/alertmanager).
	Path string `yaml:"path"`
	// Token is the bearer token. Required.
	Token SecretSource `yaml:"token"`
}

// SecretSource says where a secret is read from: a file (a mounted
// Kubernetes Secret) or an environment variable. Exactly one is set;
// secrets are never written in the configuration itself.
type SecretSource struct {
	// File is the path of a file holding the secret; one trailing newline
	// is ignored.
	File string `yaml:"file"`
	// Env is the name of an environment variable holding the secret.
	Env string `yaml:"env"`
}

// Bounds on secrets: a short one is guessable, and a "secret" of
// megabytes is the wrong file.
const (
	minSecretLen = 16
	maxSecretLen = 4 << 10
)

func (s SecretSource) validate(name string) error {
	if (s.File == "") == (s.Env == "") {
		return fmt.Errorf("intake: webhook: %s: set exactly one of file or env (secrets are never given inline)", name)
	}
	return nil
}

// load reads the secret. name says which one in errors; the secret itself
// never appears in one.
func (s SecretSource) load(name string) ([]byte, error) {
	if err := s.validate(name); err != nil {
		return nil, err
	}
	var v string
	if s.File != "" {
		f, err := os.Open(s.File)
		if err != nil {
			return nil, fmt.Errorf("intake: webhook: %s: %w", name, err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxSecretLen+2))
		if err != nil {
			return nil, fmt.Errorf("intake: webhook: %s: read %s: %w", name, s.File, err)
		}
		v = string(b)
		v = strings.TrimSuffix(v, "\n")
		v = strings.TrimSuffix(v, "\r")
	} else {
		var ok bool
		if v, ok = os.LookupEnv(s.Env); !ok {
			return nil, fmt.Errorf("intake: webhook: %s: environment variable %s is not set", name, s.Env)
		}
	}
	if len(v) < minSecretLen || len(v) > maxSecretLen {
		return nil, fmt.Errorf("intake: webhook: %s is %d bytes, want %d–%d (make one with: openssl rand -hex 32)",
			name, len(v), minSecretLen, maxSecretLen)
	}
	return []byte(v), nil
}

// WithDefaults returns c with its zero fields, and those of its
// endpoints, set to their defaults. c itself, and the endpoint sections it
// points to, are not changed: the copy points to copies.
func (c WebhookConfig) WithDefaults() WebhookConfig {
	defaults.Fill(&c.Address, DefaultAddress)
	defaults.Fill(&c.MaxBodyBytes, DefaultMaxBodyBytes)
	defaults.Fill(&c.EmitTimeout, DefaultEmitTimeout)
	defaults.Fill(&c.MaxConnections, DefaultMaxConnections)
	defaults.Fill(&c.MaxConnectionsPerPeer, peerconns.DefaultPerPeer(c.MaxConnections))
	defaults.Fill[Clock](&c.Clock, systemClock{})
	if c.Grafana != nil {
		g := *c.Grafana
		defaults.Fill(&g.Path, DefaultGrafanaPath)
		defaults.Fill(&g.SignatureHeader, DefaultSignatureHeader)
		defaults.Fill(&g.TimestampHeader, DefaultTimestampHeader)
		defaults.Fill(&g.ReplayWindow, DefaultReplayWindow)
		defaults.Fill(&g.ReplayCacheSize, DefaultReplayCacheSize)
		c.Grafana = &g
	}
	if c.Alertmanager != nil {
		a := *c.Alertmanager
		defaults.Fill(&a.Path, DefaultAlertmanagerPath)
		c.Alertmanager = &a
	}
	return c
}

// Validate checks c as NewWebhook would run it, its zero fields taken as
// their defaults. It does not change c, and does not read the secrets:
// NewWebhook does.
func (c WebhookConfig) Validate() error {
	c = c.WithDefaults()
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("intake: webhook: "+format, args...))
		}
	}
	check(c.TLSCertFile != "" && c.TLSKeyFile != "",
		"tls_cert_file and tls_key_file are required: the webhook is HTTPS only (a cert-manager Certificate's Secret, mounted, provides both)")
	check(c.MaxBodyBytes >= 1<<10 && c.MaxBodyBytes <= 64<<20, "max_body_bytes = %d, want 1 KiB–64 MiB", c.MaxBodyBytes)
	check(c.MaxConnections >= 1 && c.MaxConnections <= 1<<16, "max_connections = %d, want 1–65536", c.MaxConnections)
	check(c.MaxConnectionsPerPeer >= 1 && (c.MaxConnections == 1 || c.MaxConnectionsPerPeer < c.MaxConnections),
		"max_connections_per_peer = %d, want 1 to max_connections - 1 (%d): one client must leave the others room", c.MaxConnectionsPerPeer, c.MaxConnections-1)
	check(c.EmitTimeout >= 100*time.Millisecond && c.EmitTimeout <= 5*time.Minute, "emit_timeout = %s, want 100ms–5m", c.EmitTimeout)
	check(c.Grafana != nil || c.Alertmanager != nil, "no endpoint enabled: configure grafana (secret) or alertmanager (token), or both")
	if g := c.Grafana; g != nil {
		if err := g.Secret.validate("grafana.secret"); err != nil {
			errs = append(errs, err)
		}
		check(validPath(g.Path), "grafana.path = %q, want an absolute URL path such as %s", g.Path, DefaultGrafanaPath)
		check(validHeaderName(g.SignatureHeader), "grafana.signature_header = %q is not a header name", g.SignatureHeader)
		check(validHeaderName(g.TimestampHeader), "grafana.timestamp_header = %q is not a header name", g.TimestampHeader)
		check(http.CanonicalHeaderKey(g.SignatureHeader) != http.CanonicalHeaderKey(g.TimestampHeader),
			"grafana.signature_header and grafana.timestamp_header are both %q", g.SignatureHeader)
		check(g.ReplayWindow >= 10*time.Second && g.ReplayWindow <= time.Hour, "grafana.replay_window = %s, want 10s–1h", g.ReplayWindow)
		check(g.ReplayCacheSize >= 1 && g.ReplayCacheSize <= 10_000_000, "grafana.replay_cache_size = %d, want 1–10000000", g.ReplayCacheSize)
	}
	if a := c.Alertmanager; a != nil {
		if err := a.Token.validate("alertmanager.token"); err != nil {
			errs = append(errs, err)
		}
		check(validPath(a.Path), "alertmanager.path = %q, want an absolute URL path such as %s", a.Path, DefaultAlertmanagerPath)
	}
	if c.Grafana != nil && c.Alertmanager != nil {
		check(c.Grafana.Path != c.Alertmanager.Path, "grafana.path and alertmanager.path are both %q", c.Grafana.Path)
	}
	return errors.Join(errs...)
}

func validPath(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.ContainsAny(p, " \t\r\n?#{}")
}

// validHeaderName: an RFC 9110 token.
func validHeaderName(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
