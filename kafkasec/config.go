package kafkasec

import (
	"errors"
	"fmt"
	"strings"
)

// Config is the security of one Kafka client: TLS on the connection and
// SASL authentication over it. The zero value is a plaintext client with no
// authentication (a listener of PLAINTEXT). Secrets are never values here:
// the password (and, if wanted, the user name) is read from a file, a
// mounted Kubernetes Secret.
type Config struct {
	TLS  TLSConfig  `yaml:"tls"`
	SASL SASLConfig `yaml:"sasl"`
}

// TLSConfig encrypts the connection and checks the broker's certificate.
type TLSConfig struct {
	// Enabled dials the brokers with TLS (a listener of SSL or SASL_SSL).
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM file of the CAs that may have issued the brokers'
	// certificates (Strimzi: ca.crt of the <cluster>-cluster-ca-cert
	// Secret). Empty: the system's roots, as for a managed Kafka with a
	// public certificate. Read once, at start.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a PEM client certificate (chain) and its key,
	// for brokers that authenticate clients by certificate (mTLS; Strimzi:
	// user.crt and user.key of a KafkaUser with tls authentication). Both
	// or neither. Read at every new connection, so a renewed certificate is
	// used without a restart.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the brokers' certificates must carry. Empty:
	// the host of each broker's address, which is right unless the brokers
	// are reached through an address their certificates do not name.
	ServerName string `yaml:"server_name"`
	// DangerousSkipVerify accepts any certificate from any broker: the
	// connection is encrypted but anyone on the path can read and forge
	// it, password included. Never in production; for a first try against
	// a broker whose CA is not at hand.
	DangerousSkipVerify bool `yaml:"dangerous_skip_verify"`
}

// SASLConfig authenticates the client to the brokers.
type SASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (upper or lower
	// case). Empty: no SASL. PLAIN sends the password itself: only over
	// TLS.
	Mechanism string `yaml:"mechanism"`
	// Username, or UsernameFile holding it (one of them).
	Username     string `yaml:"username"`
	UsernameFile string `yaml:"username_file"`
	// PasswordFile holds the password (Strimzi: the password key of the
	// KafkaUser's Secret). One trailing line break is not part of it.
	// Read at every new connection, so a rotated Secret is used without a
	// restart.
	PasswordFile string `yaml:"password_file"`
}

// The SASL mechanisms spikehunt's clients speak.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// ErrConfig is what every configuration error of Validate and Options
// matches with errors.Is.
var ErrConfig = errors.New("kafka security")

// Validate checks the configuration's shape without reading any file and
// without changing c; Options also reads the files. Field names in its
// messages are the flags' (kafka.tls.ca-file), which the config file
// spells with underscores (kafka.tls.ca_file).
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...))
	}
	t := c.TLS
	if !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.DangerousSkipVerify) {
		bad("kafka.tls options are set but kafka.tls.enabled is not: set kafka.tls.enabled (or remove them)")
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		bad("give both kafka.tls.cert-file and kafka.tls.key-file for a client certificate, or neither")
	}
	if t.DangerousSkipVerify && (t.CAFile != "" || t.ServerName != "") {
		bad("kafka.tls.dangerous-skip-verify ignores kafka.tls.ca-file and kafka.tls.server-name: drop one or the other")
	}
	s := c.SASL
	if s.Mechanism == "" {
		if s.Username != "" || s.UsernameFile != "" || s.PasswordFile != "" {
			bad("kafka.sasl credentials are set but no mechanism: set kafka.sasl.mechanism to %s, %s or %s",
				MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512)
		}
		return errors.Join(errs...)
	}
	if mechanism(s.Mechanism) == "" {
		bad("unknown SASL mechanism %q: want %s, %s or %s (OAUTHBEARER, GSSAPI and AWS_MSK_IAM are not supported)",
			s.Mechanism, MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512)
	}
	switch {
	case s.Username == "" && s.UsernameFile == "":
		bad("SASL %s needs a user: set kafka.sasl.username or kafka.sasl.username-file", s.Mechanism)
	case s.Username != "" && s.UsernameFile != "":
		bad("set one of kafka.sasl.username and kafka.sasl.username-file, not both")
	}
	if s.PasswordFile == "" {
		bad("SASL %s needs kafka.sasl.password-file (a mounted Secret; there is no password flag, so that it never shows in a process list)", s.Mechanism)
	}
	return errors.Join(errs...)
}

// mechanism is name's canonical spelling, or "" when it is not one of ours.
func mechanism(name string) string {
	for _, m := range []string{MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512} {
		if strings.EqualFold(name, m) {
			return m
		}
	}
	return ""
}

// Enabled says whether c asks for anything beyond a plaintext connection.
func (c Config) Enabled() bool { return c.TLS.Enabled || c.SASL.Mechanism != "" }

// String describes c for a start-up log line, without secrets.
func (c Config) String() string {
	proto := "PLAINTEXT"
	switch {
	case c.TLS.Enabled && c.SASL.Mechanism != "":
		proto = "SASL_SSL"
	case c.TLS.Enabled:
		proto = "SSL"
	case c.SASL.Mechanism != "":
		proto = "SASL_PLAINTEXT"
	}
	var b strings.Builder
	b.WriteString(proto)
	if m := mechanism(c.SASL.Mechanism); m != "" {
		user := c.SASL.Username
		if user == "" {
			user = "(from " + c.SASL.UsernameFile + ")"
		}
		fmt.Fprintf(&b, " %s as %s", m, user)
	}
	if c.TLS.CertFile != "" {
		b.WriteString(", client certificate")
	}
	if c.TLS.DangerousSkipVerify {
		b.WriteString(", BROKER CERTIFICATES NOT VERIFIED")
	}
	return b.String()
}
