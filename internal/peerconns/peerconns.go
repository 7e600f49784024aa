// Package peerconns caps a server's open connections so that no one peer
// can refuse the others: each peer (a client's IP address) holds at most
// PerPeer connections, below the server's Max, and the last Reserved
// places are only for authenticated connections. When a place is
// wanted and none is free, an idle connection makes room: the one idle
// longest of the peer that holds the most, so idle connections, however
// many, cost a newcomer nothing but a close of someone else's idle one.
// Only when every connection in the way is busy is a newcomer closed on
// accept.
//
// A connection is busy while the server works on it: the server says so
// with Busy and Idle (an HTTP server through ConnState, a gRPC server per
// stream). A new connection is idle until then, so one that connects and
// says nothing is the first to go.
//
// Lifecycle: Listen wraps a listener; Close of the listener closes it,
// not the connections it handed out, which the server closes.
package peerconns

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Reason says why a connection was closed by the gate, for the caller's
// refusal counter.
type Reason string

const (
	// PeerFull: the peer holds PerPeer connections, all busy.
	PeerFull Reason = "peer_full"
	// ServerFull: the server holds every place it may give this
	// connection, and none of the connections it could close is idle.
	ServerFull Reason = "server_full"
	// EvictedIdle: an idle connection closed to make room for a newcomer.
	EvictedIdle Reason = "evicted_idle"
)

// Config bounds one server's connections.
type Config struct {
	// Max is the open connections of the server.
	Max int
	// PerPeer is one peer's open connections: at least 1, below Max.
	PerPeer int
	// Reserved are the last places of Max, which only an authenticated
	// connection may take: 0 to Max - 1.
	Reserved int
	// Trusted, if set, authenticates the connections of a peer from the
	// start (the peer's address is its credential).
	Trusted func(netip.Addr) bool
	// Closed, if set, is told of every connection the gate closes.
	Closed func(Reason)
	// Opened, if set, is told +1 and -1 as connections open and close.
	Opened func(delta int)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Validate checks c.
func (c Config) Validate() error {
	switch {
	case c.Max < 1:
		return fmt.Errorf("max connections %d, want ≥ 1", c.Max)
	case c.PerPeer < 1 || (c.Max > 1 && c.PerPeer >= c.Max):
		return fmt.Errorf("connections per peer %d, want 1 to %d (below the max, %d)", c.PerPeer, max(c.Max-1, 1), c.Max)
	case c.Reserved < 0 || (c.Max > 1 && c.Reserved >= c.Max):
		return fmt.Errorf("reserved connections %d, want 0 to %d (below the max, %d)", c.Reserved, max(c.Max-1, 0), c.Max)
	}
	return nil
}

// DefaultPerPeer is a default per-peer cap for a server of max places: a
// quarter, at least one and below max when max allows.
func DefaultPerPeer(max int) int {
	switch {
	case max <= 1:
		return 1
	case max < 4:
		return max - 1
	}
	return max / 4
}

// DefaultReserved is a default number of places kept for authenticated
// connections: a sixteenth of max, none below 16.
func DefaultReserved(max int) int { return max / 16 }

// Listener is a gated net.Listener.
type Listener struct {
	net.Listener
	cfg Config

	mu     sync.Mutex
	peers  map[netip.Addr]*peer
	open   int
	byAddr map[string]*Conn
}

type peer struct {
	conns map[*Conn]struct{}
}

// Listen gates ln under cfg, which must be valid.
func Listen(ln net.Listener, cfg Config) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Listener{Listener: ln, cfg: cfg, peers: map[netip.Addr]*peer{}, byAddr: map[string]*Conn{}}, nil
}

// Conn is a connection the gate admitted.
type Conn struct {
	net.Conn
	l    *Listener
	peer netip.Addr
	// busy and idleSince (unix nanoseconds) are atomic: a server marks a
	// connection busy and idle per request, without the listener's lock.
	busy      atomic.Int32
	idleSince atomic.Int64
	// Under l.mu:
	auth bool
	gone bool
}

// peerOf is the address a connection is counted under: its IP, IPv4 in
// IPv6 unmapped; the zero Addr for an address that is not IP (a unix
// socket), which is one peer.
func peerOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// Accept returns the next connection the gate admits; those it refuses
// are closed at once, so their clients see the refusal and retry instead
// of waiting in the kernel's backlog.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if gc := l.admit(c); gc != nil {
			return gc, nil
		}
	}
}

func (l *Listener) admit(c net.Conn) *Conn {
	p := peerOf(c.RemoteAddr())
	auth := l.cfg.Trusted != nil && p.IsValid() && l.cfg.Trusted(p)
	var evict []*Conn
	var refused Reason

	l.mu.Lock()
	pr := l.peers[p]
	if pr != nil && len(pr.conns) >= l.cfg.PerPeer {
		// The peer's own idle connection makes room, or nothing does.
		if v := l.idlest(pr, auth); v != nil {
			evict = append(evict, v)
		} else {
			refused = PeerFull
		}
	}
	if refused == "" {
		limit := l.cfg.Max
		if !auth {
			limit -= l.cfg.Reserved
		}
		// An unauthenticated newcomer counts every connection open
		// against Max - Reserved; an authenticated one against Max.
		if l.open-len(evict) >= limit {
			if v := l.biggestIdle(evict, auth); v != nil {
				evict = append(evict, v)
			} else {
				refused = ServerFull
			}
		}
	}
	var gc *Conn
	if refused == "" {
		for _, v := range evict {
			l.forget(v)
		}
		gc = &Conn{Conn: c, l: l, peer: p, auth: auth}
		gc.idleSince.Store(l.cfg.Now().UnixNano())
		if pr == nil {
			pr = &peer{conns: map[*Conn]struct{}{}}
			l.peers[p] = pr
		}
		pr.conns[gc] = struct{}{}
		l.open++
		l.byAddr[c.RemoteAddr().String()] = gc
	} else {
		evict = nil
	}
	l.mu.Unlock()

	// Counted before the close, so that whoever sees the close sees the
	// count.
	for _, v := range evict {
		l.told(EvictedIdle)
		l.opened(-1)
		v.Conn.Close()
	}
	if refused != "" {
		l.told(refused)
		c.Close()
		return nil
	}
	l.opened(1)
	return gc
}

func (l *Listener) told(r Reason) {
	if l.cfg.Closed != nil {
		l.cfg.Closed(r)
	}
}

func (l *Listener) opened(d int) {
	if l.cfg.Opened != nil {
		l.cfg.Opened(d)
	}
}

// idlest is pr's connection idle longest that a newcomer (authenticated
// or not) may close: an unauthenticated newcomer never closes an
// authenticated connection. Under l.mu.
func (l *Listener) idlest(pr *peer, auth bool) *Conn {
	var best *Conn
	for c := range pr.conns {
		if c.busy.Load() > 0 || (c.auth && !auth) {
			continue
		}
		if best == nil || c.idleSince.Load() < best.idleSince.Load() {
			best = c
		}
	}
	return best
}

// biggestIdle is the connection idle longest of the peer with the most
// connections that has one a newcomer may close, skipping those in not.
// Under l.mu.
func (l *Listener) biggestIdle(not []*Conn, auth bool) *Conn {
	var best *Conn
	bestN := 0
	for _, pr := range l.peers {
		n := len(pr.conns)
		if n < bestN {
			continue
		}
		var cand *Conn
		for c := range pr.conns {
			if c.busy.Load() > 0 || (c.auth && !auth) || contains(not, c) {
				continue
			}
			if cand == nil || c.idleSince.Load() < cand.idleSince.Load() {
				cand = c
			}
		}
		if cand == nil {
			continue
		}
		if n > bestN || cand.idleSince.Load() < best.idleSince.Load() {
			best, bestN = cand, n
		}
	}
	return best
}

func contains(cs []*Conn, c *Conn) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// forget drops c from the books; under l.mu. It reports whether c was
// still on them.
func (l *Listener) forget(c *Conn) bool {
	if c.gone {
		return false
	}
	c.gone = true
	if pr := l.peers[c.peer]; pr != nil {
		delete(pr.conns, c)
		if len(pr.conns) == 0 {
			delete(l.peers, c.peer)
		}
	}
	if k := c.Conn.RemoteAddr().String(); l.byAddr[k] == c {
		delete(l.byAddr, k)
	}
	l.open--
	return true
}

// Close gives the connection's place back, once however often it is
// called.
func (c *Conn) Close() error {
	c.l.mu.Lock()
	was := c.l.forget(c)
	c.l.mu.Unlock()
	if was {
		c.l.opened(-1)
	}
	return c.Conn.Close()
}

// Busy marks c as being worked on: the gate does not close it for a
// newcomer until Idle is called as many times.
func (c *Conn) Busy() { c.busy.Add(1) }

// Idle undoes one Busy.
func (c *Conn) Idle() {
	for {
		n := c.busy.Load()
		if n <= 0 {
			return
		}
		if n == 1 {
			// Idle from now: stamped before the count drops, so the gate
			// never sees an idle connection with an old stamp.
			c.idleSince.Store(c.l.cfg.Now().UnixNano())
		}
		if c.busy.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// Authenticate marks c as carrying an authenticated client: it may then
// hold the reserved places, and an unauthenticated newcomer never closes
// it.
func (c *Conn) Authenticate() {
	c.l.mu.Lock()
	c.auth = true
	c.l.mu.Unlock()
}

// Lookup is the admitted connection whose remote address is remote, or
// nil.
func (l *Listener) Lookup(remote net.Addr) *Conn {
	if remote == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byAddr[remote.String()]
}

// Open is the number of connections open now.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Of is the gate's Conn under c (c itself, or under a *tls.Conn), or nil.
func Of(c net.Conn) *Conn {
	for c != nil {
		switch v := c.(type) {
		case *Conn:
			return v
		case *tls.Conn:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// ConnState is an http.Server's ConnState hook that tells the gate when
// a connection is busy: from the first byte of a request until the
// server is done with it.
func ConnState(c net.Conn, s http.ConnState) {
	gc := Of(c)
	if gc == nil {
		return
	}
	switch s {
	case http.StateActive:
		gc.Busy()
	case http.StateIdle:
		gc.Idle()
	case http.StateHijacked, http.StateClosed:
		gc.busy.Store(0)
	}
}

type connKey struct{}

// ConnContext is an http.Server's ConnContext hook that keeps the gate's
// connection in each request's context, for FromContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if gc := Of(c); gc != nil {
		return context.WithValue(ctx, connKey{}, gc)
	}
	return ctx
}

// FromContext is the gate's connection of a request served under
// ConnContext, or nil.
func FromContext(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}
