package report

import (
	"errors"
	"fmt"
	"time"

	"github.com/spikehunt/spikehunt/internal/defaults"
	"github.com/spikehunt/spikehunt/internal/peerconns"
)

// Mode is how a file reaches the browser.
type Mode string

const (
	// ModeProxy streams the file through the operator once its sha256
	// matches the record: the browser needs to reach only the operator,
	// and the operator vouches for every byte.
	ModeProxy Mode = "proxy"
	// ModeRedirect answers 302 to a presigned URL for exactly that object,
	// valid for PresignTTL: the bytes go from the bucket to the browser,
	// which must reach the store's endpoint as the operator names it. S3
	// stores only; nothing checks the bytes on the way, and the response
	// carries the bucket's headers, not this server's Content-Security-
	// Policy.
	ModeRedirect Mode = "redirect"
)

// Defaults, exported for the operator's flag help.
const (
	DefaultMode              = ModeProxy
	DefaultPresignTTL        = 5 * time.Minute
	DefaultMaxConnections    = 32
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 10 * time.Second
	// DefaultWriteTimeout bounds checking and sending one file: 256 MiB
	// at 10 MB/s.
	DefaultWriteTimeout = 2 * time.Minute
	DefaultIdleTimeout  = time.Minute
	DefaultMaxPathBytes = 1024
	// DefaultMaxFileBytes bounds a file served in proxy mode: reports and
	// profiles are a few MiB; a perf.data of a long window is for
	// `spikehunt captures get`.
	DefaultMaxFileBytes = 256 << 20
	// MaxPresignTTL is far below S3's seven days: a link handed to a
	// browser is followed at once.
	MaxPresignTTL = 12 * time.Hour
)

// Config configures a Server. Address and UsersFile are required; a zero
// field of the others means its default (WithDefaults).
type Config struct {
	// Address is where the server listens (":8090"). The server is off
	// unless it is set.
	Address string
	// Mode is ModeProxy (default) or ModeRedirect.
	Mode Mode
	// PresignTTL is how long a redirect's URL is valid (default 5m, 1s–12h).
	// Only for ModeRedirect. Short: a URL copied out of a browser grants
	// the object to anyone until it expires.
	PresignTTL time.Duration
	// UsersFile is the users and their password hashes (YAML, users.go);
	// the server refuses to start without one.
	UsersFile string
	// TLSCertFile and TLSKeyFile serve HTTPS; both or neither. Without
	// them the server speaks plain HTTP and must sit behind a TLS ingress:
	// basic auth sends the password with every request.
	TLSCertFile, TLSKeyFile string
	// MaxConnections bounds open connections (default 32).
	// MaxConnectionsPerPeer bounds one client IP's, below it (default a
	// quarter of it); the last sixteenth of the places are only for
	// connections that have carried a signed-in request. A connection
	// that finds no place takes that of the connection idle longest of the
	// peer with the most; when every one in its way is busy it is closed
	// on accept (internal/peerconns), counted in
	// spikehunt_operator_report_connections_refused_total{reason}.
	MaxConnections        int
	MaxConnectionsPerPeer int
	// Timeouts of one connection: reading the header and the request,
	// writing the response, idling between requests.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxPathBytes bounds a request's path (default 1024, 64–8192): longer
	// ones are answered 414 before anything is looked up.
	MaxPathBytes int
	// MaxFileBytes bounds a file served in proxy mode (default 256 MiB,
	// at least 1 MiB): a larger one is refused with 413 before it is
	// read. In ModeRedirect the bucket sends it and no cap applies.
	MaxFileBytes int64
	// SpoolDir holds files over 1 MiB while their checksum is checked
	// (default: the system's temporary folder; the chart mounts an
	// emptyDir). It needs MaxConnections × MaxFileBytes at worst.
	SpoolDir string
}

// DefaultConfig is the configuration WithDefaults completes a Config from.
func DefaultConfig() Config {
	return Config{Mode: DefaultMode, PresignTTL: DefaultPresignTTL, MaxConnections: DefaultMaxConnections,
		ReadHeaderTimeout: DefaultReadHeaderTimeout, ReadTimeout: DefaultReadTimeout, WriteTimeout: DefaultWriteTimeout,
		IdleTimeout: DefaultIdleTimeout, MaxPathBytes: DefaultMaxPathBytes, MaxFileBytes: DefaultMaxFileBytes}
}

// WithDefaults returns c with its zero fields set to their defaults; c
// itself is not changed.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	defaults.Fill(&c.Mode, d.Mode)
	defaults.Fill(&c.PresignTTL, d.PresignTTL)
	defaults.Fill(&c.MaxConnections, d.MaxConnections)
	defaults.Fill(&c.MaxConnectionsPerPeer, peerconns.DefaultPerPeer(c.MaxConnections))
	defaults.Fill(&c.ReadHeaderTimeout, d.ReadHeaderTimeout)
	defaults.Fill(&c.ReadTimeout, d.ReadTimeout)
	defaults.Fill(&c.WriteTimeout, d.WriteTimeout)
	defaults.Fill(&c.IdleTimeout, d.IdleTimeout)
	defaults.Fill(&c.MaxPathBytes, d.MaxPathBytes)
	defaults.Fill(&c.MaxFileBytes, d.MaxFileBytes)
	return c
}

// ErrNoUsers is the error of a server configured without users: it would
// hand capture artifacts (stacks, request paths, hostnames) to anyone who
// can reach it.
var ErrNoUsers = errors.New("the report server needs users: set --report.users-file to a users file (operator/internal/report/users.go; " +
	"the chart's operator.reportServer.usersSecret); it never serves without authentication")

// Validate checks c, completed by WithDefaults, without changing it.
func (c Config) Validate() error {
	if c.Address == "" {
		return errors.New("report server: no address (--report.address)")
	}
	if c.UsersFile == "" {
		return ErrNoUsers
	}
	switch c.Mode {
	case ModeProxy, ModeRedirect:
	default:
		return fmt.Errorf("report server: mode %q, want %s or %s (--report.mode)", c.Mode, ModeProxy, ModeRedirect)
	}
	if c.PresignTTL < time.Second || c.PresignTTL > MaxPresignTTL {
		return fmt.Errorf("report server: presign TTL %v, want 1s–%v (--report.presign-ttl): a presigned URL grants its object to whoever holds it", c.PresignTTL, MaxPresignTTL)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("report server: give both --report.tls-cert-file and --report.tls-key-file, or neither (then put a TLS ingress in front)")
	}
	if c.MaxConnections < 1 || c.MaxConnections > 10000 {
		return fmt.Errorf("report server: max connections %d, want 1–10000", c.MaxConnections)
	}
	if c.MaxConnectionsPerPeer < 1 || (c.MaxConnections > 1 && c.MaxConnectionsPerPeer >= c.MaxConnections) {
		return fmt.Errorf("report server: max connections per peer %d, want 1 to max connections - 1 (%d): one client must leave the others room", c.MaxConnectionsPerPeer, c.MaxConnections-1)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read header timeout", c.ReadHeaderTimeout}, {"read timeout", c.ReadTimeout}, {"write timeout", c.WriteTimeout}, {"idle timeout", c.IdleTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("report server: %s %v, want more than 0", d.name, d.v)
		}
	}
	if c.MaxPathBytes < 64 || c.MaxPathBytes > 8192 {
		return fmt.Errorf("report server: max path bytes %d, want 64–8192 (a namespace, a name and a file name fit in 700)", c.MaxPathBytes)
	}
	if c.MaxFileBytes < 1<<20 {
		return fmt.Errorf("report server: max file bytes %d, want at least 1 MiB (--report.max-file-bytes)", c.MaxFileBytes)
	}
	return nil
}
