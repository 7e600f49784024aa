package chhttp

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/internal/peerconns"
)

// ServerLimits bound what clients hold of serve-clickhouse's HTTP server.
type ServerLimits struct {
	// ReadHeader, Read, Write and Idle are the http.Server's timeouts.
	ReadHeader, Read, Write, Idle time.Duration
	// MaxConns is the connections open at once. MaxConnsPerPeer is one
	// client IP's share of them (0: a quarter, peerconns.DefaultPerPeer),
	// and the last ReservedConns places (0: a sixteenth,
	// peerconns.DefaultReserved; -1: none) are only for connections that
	// have carried a request whose user and password were checked (or any
	// request, with no user configured: loopback only). When a place is
	// wanted and none is free, the connection idle longest of the peer
	// holding the most is closed for it; only when every connection in the
	// way is busy is the newcomer closed on accept (internal/peerconns).
	MaxConns, MaxConnsPerPeer, ReservedConns int
}

// DefaultServerLimits are serve-clickhouse's limits for statements of at
// most maxExec: reading an INSERT's body and writing a result are bounded
// by the statement's own limit (plus 30 s), not by a shorter server-wide
// one that would cut a long but legitimate query.
func DefaultServerLimits(maxExec time.Duration) ServerLimits {
	return ServerLimits{ReadHeader: 10 * time.Second, Read: maxExec + 30*time.Second, Write: maxExec + 30*time.Second, Idle: time.Minute, MaxConns: 128}
}

// withDefaults fills the per-peer and reserved places from MaxConns.
func (l ServerLimits) withDefaults() ServerLimits {
	if l.MaxConnsPerPeer == 0 {
		l.MaxConnsPerPeer = peerconns.DefaultPerPeer(l.MaxConns)
	}
	switch l.ReservedConns {
	case 0:
		l.ReservedConns = peerconns.DefaultReserved(l.MaxConns)
	case -1:
		l.ReservedConns = 0
	}
	return l
}

// Validate checks l as serve-clickhouse's flags set it.
func (l ServerLimits) Validate() error {
	if l.Idle <= 0 || l.MaxConns < 1 {
		return fmt.Errorf("--http-idle-timeout must be positive and --http-max-connections at least 1 (got %v, %d)", l.Idle, l.MaxConns)
	}
	if l.MaxConnsPerPeer < 0 || l.ReservedConns < -1 {
		return fmt.Errorf("--http-max-connections-per-peer %d and --http-reserved-connections %d: want 0 (the default share) or more", l.MaxConnsPerPeer, l.ReservedConns)
	}
	d := l.withDefaults()
	if err := (peerconns.Config{Max: d.MaxConns, PerPeer: d.MaxConnsPerPeer, Reserved: d.ReservedConns}).Validate(); err != nil {
		return fmt.Errorf("--http-max-connections %d: %w", l.MaxConns, err)
	}
	return nil
}

// Listen listens on addr and returns the server that serves h there under
// l, and its listener, which gates connections per peer (ServerLimits);
// serve with srv.Serve(ln). The gate's refusals and open connections are
// registered on reg: spikehunt_chhttp_connections_refused_total{reason}
// and spikehunt_chhttp_connections. h's requests mark their connection
// authenticated through the request's context (Handler does, once their
// user is checked).
func Listen(addr string, h http.Handler, l ServerLimits, reg prometheus.Registerer) (*http.Server, net.Listener, error) {
	if err := l.Validate(); err != nil {
		return nil, nil, err
	}
	l = l.withDefaults()
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spikehunt_chhttp_connections_refused_total",
		Help: "Connections closed for want of a place (internal/peerconns), by reason: peer_full (the client IP held --http-max-connections-per-peer, all busy), server_full (no place the connection may take, none idle in its way), evicted_idle (an idle connection closed to make room for a newcomer).",
	}, []string{"reason"})
	for _, r := range []peerconns.Reason{peerconns.PeerFull, peerconns.ServerFull, peerconns.EvictedIdle} {
		refused.WithLabelValues(string(r))
	}
	open := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "spikehunt_chhttp_connections",
		Help: "Connections open to the ClickHouse HTTP server.",
	})
	for _, c := range []prometheus.Collector{refused, open} {
		if err := reg.Register(c); err != nil {
			return nil, nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	gated, err := peerconns.Listen(ln, peerconns.Config{
		Max:      l.MaxConns,
		PerPeer:  l.MaxConnsPerPeer,
		Reserved: l.ReservedConns,
		Closed:   func(r peerconns.Reason) { refused.WithLabelValues(string(r)).Inc() },
		Opened:   func(d int) { open.Add(float64(d)) },
	})
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: l.ReadHeader, ReadTimeout: l.Read, WriteTimeout: l.Write, IdleTimeout: l.Idle, MaxHeaderBytes: 64 << 10,
		ConnState: peerconns.ConnState, ConnContext: peerconns.ConnContext}
	return srv, gated, nil
}

// authenticated marks r's connection as carrying a client whose
// credentials were checked: it may then take the reserved places, and no
// unauthenticated newcomer closes it to make room.
func authenticated(r *http.Request) {
	if c := peerconns.FromContext(r.Context()); c != nil {
		c.Authenticate()
	}
}
