package intake

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// AuthConfig says who may send over the receivers that face a network.
//
// OTLP (gRPC and HTTP) senders prove themselves with a bearer token, the
// header "authorization: Bearer <token>" that every OTLP exporter can send
// (OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<token>). A request
// without a token listed in TokenFile is refused before its body is read:
// HTTP 401, gRPC Unauthenticated, counted with reason unauthenticated.
// The line protocol cannot carry a token: its unix socket is guarded by
// the kernel (the socket file's mode, SCM_CREDENTIALS), and its UDP port
// by nothing.
//
// A receiver that faces a network (bound to anything but a loopback
// address) and cannot authenticate its senders refuses to start: an OTLP
// receiver without TokenFile, the UDP receiver always. AllowUnauthenticated
// lets them start anyway, for a network the operator vouches for.
type AuthConfig struct {
	// TokenFile holds the tokens OTLP senders may present, one per line
	// (blank lines and lines starting with # are skipped), so that a
	// token can be rotated by listing the new one beside the old. Each is
	// at least 16 characters. The file is read again every
	// tokenRecheckEvery when it has changed (a Kubernetes Secret volume
	// updates in place); a file that has become unreadable or empty
	// keeps the tokens read before, and says so in the log. Empty: OTLP
	// requests are not authenticated.
	TokenFile string `yaml:"token_file"`
	// AllowUnauthenticated lets a receiver that cannot authenticate its
	// senders listen beyond loopback (default false).
	AllowUnauthenticated bool `yaml:"allow_unauthenticated"`
}

const (
	minTokenLen       = 16
	maxTokens         = 64
	maxTokenFileBytes = 64 << 10
	tokenRecheckEvery = 10 * time.Second
)

// facesNetwork reports whether a receiver bound to addr (host:port) can
// be reached from beyond this host: any address that is not loopback,
// the unspecified address (every interface) and a host name other than
// localhost included.
func facesNetwork(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true // Validate's bind will say what is wrong; judge it the strict way
	}
	if strings.EqualFold(host, "localhost") {
		return false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return !a.Unmap().IsLoopback()
	}
	return true
}

// validateAuth checks which receivers of c may start under its auth.
func (c *Config) validateAuth() []error {
	var errs []error
	otlp := func(key, addr string) {
		if addr == "" || !facesNetwork(addr) || c.Auth.TokenFile != "" || c.Auth.AllowUnauthenticated {
			return
		}
		errs = append(errs, fmt.Errorf("intake: %s %s faces the network and auth.token_file is not set, so anyone who reaches it could send spans and fire captures: "+
			"set auth.token_file (senders send authorization: Bearer <token>), bind it to 127.0.0.1, "+
			"or set auth.allow_unauthenticated: true for a network you trust", key, addr))
	}
	otlp("otlp_grpc", c.OTLPGRPC)
	otlp("otlp_http", c.OTLPHTTP)
	if c.LineUDP != "" && facesNetwork(c.LineUDP) && !c.Auth.AllowUnauthenticated {
		errs = append(errs, fmt.Errorf("intake: line_udp %s faces the network, and a UDP datagram carries no credential: "+
			"send the line protocol over the unix socket (line_unix), bind line_udp to 127.0.0.1, "+
			"or set auth.allow_unauthenticated: true for a network you trust", c.LineUDP))
	}
	return errs
}

// tokens is the set of accepted bearer tokens, read from a file and
// re-read when it changes. Tokens are kept as SHA-256 digests and
// compared in constant time, so neither a token's bytes nor its length
// leak through timing.
type tokens struct {
	path string
	log  *slog.Logger
	now  func() time.Time

	set     atomic.Pointer[[][sha256.Size]byte]
	checked atomic.Int64 // unix nanoseconds of the last look at the file
	mu      sync.Mutex   // one re-read at a time
	raw     []byte       // the file as last read, under mu
	warned  string       // the last re-read error logged, under mu
}

// loadTokens reads path; it fails when the file cannot be read or holds
// no usable token, so that an agent never starts open by mistake.
func loadTokens(path string, log *slog.Logger, now func() time.Time) (*tokens, error) {
	t := &tokens{path: path, log: log, now: now}
	set, raw, err := readTokenFile(path)
	if err != nil {
		return nil, fmt.Errorf("intake: auth.token_file: %w", err)
	}
	t.set.Store(&set)
	t.raw = raw
	t.checked.Store(now().UnixNano())
	return t, nil
}

// readTokenFile reads and parses path, at most maxTokenFileBytes of it,
// and returns its bytes too.
func readTokenFile(path string) ([][sha256.Size]byte, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return nil, nil, err
	}
	if len(b) > maxTokenFileBytes {
		return nil, nil, fmt.Errorf("%s is larger than %d KiB: want one token per line", path, maxTokenFileBytes>>10)
	}
	set, err := parseTokens(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return set, b, nil
}

// parseTokens reads one token per line; see AuthConfig.TokenFile.
func parseTokens(b []byte) ([][sha256.Size]byte, error) {
	var set [][sha256.Size]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxTokenFileBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		switch {
		case len(line) < minTokenLen:
			return nil, fmt.Errorf("line %d: a token of %d characters, want at least %d (e.g. openssl rand -hex 32)", n, len(line), minTokenLen)
		case strings.ContainsAny(line, " \t"):
			return nil, fmt.Errorf("line %d: a token with a space in it: want one token per line", n)
		case len(set) == maxTokens:
			return nil, fmt.Errorf("more than %d tokens", maxTokens)
		}
		set = append(set, sha256.Sum256([]byte(line)))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(set) == 0 {
		return nil, errors.New("holds no token")
	}
	return set, nil
}

// accepts reports whether an authorization header's value ("Bearer
// <token>", the scheme in any case) carries a listed token.
func (t *tokens) accepts(authorization string) bool {
	t.refresh()
	scheme, tok, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	tok = strings.TrimSpace(tok)
	if tok == "" || len(tok) > maxTokenFileBytes {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	found := 0
	for _, s := range *t.set.Load() {
		found |= subtle.ConstantTimeCompare(sum[:], s[:])
	}
	return found == 1
}

// refresh re-reads the file (a few bytes) when tokenRecheckEvery has
// passed. A caller that finds another re-reading goes on with the tokens
// it has: a check never waits on the file system.
func (t *tokens) refresh() {
	now := t.now().UnixNano()
	last := t.checked.Load()
	if now-last < int64(tokenRecheckEvery) || !t.checked.CompareAndSwap(last, now) {
		return
	}
	if !t.mu.TryLock() {
		return
	}
	defer t.mu.Unlock()
	set, raw, err := readTokenFile(t.path)
	if err != nil {
		if err.Error() != t.warned { // once per fault, not every recheck
			t.warned = err.Error()
			t.log.Warn("intake: auth.token_file could not be read again; the tokens read before still hold", "file", t.path, "err", err)
		}
		return
	}
	t.warned = ""
	if bytes.Equal(raw, t.raw) {
		return
	}
	t.set.Store(&set)
	t.raw = raw
	t.log.Info("intake: auth.token_file read again", "file", t.path, "tokens", len(set))
}
