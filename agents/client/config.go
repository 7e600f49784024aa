package client

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Config configures a Client.
type Config struct {
	// Addr is the agent's line-protocol socket:
	// "unixgram:///run/spikehunt/agent.sock" (Linux, the agent's default)
	// or "udp://127.0.0.1:7171".
	Addr string
	// Service is the service.name of every request (at most 256 bytes of
	// UTF-8, no spaces).
	Service string
	// QueueSize bounds the requests waiting to be sent (default 8192).
	// Record drops and counts when it is full.
	QueueSize int
	// FlushInterval is how long a request may wait to be sent (default
	// 50ms: well inside the 100 ms in which the agent's local capture
	// trigger must see a slow request). Full datagrams wait for it too,
	// up to four, and then go together.
	FlushInterval time.Duration
	// MaxDatagram bounds one datagram (default 60 KiB; 1 KiB to 64 KiB,
	// the agent's limit, and to 65,507 bytes over UDP, the largest UDP
	// payload). Large datagrams are cheap for both sides: at 20,000
	// requests/s the agent wakes about 20 times a second (the datagrams
	// of one flush go back to back), where one request per datagram would
	// wake it 20,000 times. Lower it only for a kernel with a smaller
	// datagram limit.
	MaxDatagram int
}

const (
	defaultQueueSize     = 8192
	defaultFlushInterval = 50 * time.Millisecond
	defaultMaxDatagram   = 60 << 10
	maxDatagram          = 64 << 10
	maxUDPPayload        = 65507 // 65,535 less the IPv4 and UDP headers
	maxNameBytes         = 256
)

// validate fills defaults, checks bounds and returns the network and the
// address to dial.
func (c *Config) validate() (network, address string, err error) {
	if c.QueueSize == 0 {
		c.QueueSize = defaultQueueSize
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = defaultFlushInterval
	}
	if c.MaxDatagram == 0 {
		c.MaxDatagram = defaultMaxDatagram
	}
	var errs []error
	if c.QueueSize < 1 || c.QueueSize > 1<<20 {
		errs = append(errs, fmt.Errorf("QueueSize = %d, want 1–1048576", c.QueueSize))
	}
	if c.FlushInterval < time.Millisecond || c.FlushInterval > time.Minute {
		errs = append(errs, fmt.Errorf("FlushInterval = %s, want 1ms–1m", c.FlushInterval))
	}
	// A datagram must hold the longest line: two 256-byte names, a status
	// of 32, and numbers.
	network, address, err = parseAddr(c.Addr)
	if err != nil {
		errs = append(errs, err)
	}
	limit := maxDatagram
	if strings.HasPrefix(network, "udp") {
		limit = maxUDPPayload
	}
	if c.MaxDatagram < 1024 || c.MaxDatagram > limit {
		errs = append(errs, fmt.Errorf("MaxDatagram = %d, want 1024–%d", c.MaxDatagram, limit))
	}
	switch {
	case c.Service == "":
		errs = append(errs, errors.New("Service is empty: set it to the app's service.name"))
	case len(c.Service) > maxNameBytes || !utf8.ValidString(c.Service) || strings.IndexFunc(c.Service, unicode.IsSpace) >= 0:
		errs = append(errs, fmt.Errorf("Service %q: want at most 256 bytes of UTF-8 without spaces", c.Service))
	}
	if err := errors.Join(errs...); err != nil {
		return "", "", fmt.Errorf("spikehunt client: %w", err)
	}
	return network, address, nil
}

func parseAddr(addr string) (network, address string, err error) {
	u, err := url.Parse(addr)
	if err != nil {
		return "", "", fmt.Errorf("Addr %q: %w", addr, err)
	}
	switch u.Scheme {
	case "unixgram":
		if p := u.Host + u.Path; p != "" {
			return "unixgram", p, nil
		}
	case "udp", "udp4", "udp6":
		if u.Port() != "" {
			return u.Scheme, u.Host, nil
		}
	}
	return "", "", fmt.Errorf("Addr %q: want unixgram:///path/to/agent.sock or udp://host:port", addr)
}
