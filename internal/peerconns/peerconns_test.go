package peerconns

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// gate listens on 127.0.0.1 and accepts in the background; conns holds
// what it admitted, reasons what it closed.
type gate struct {
	l       *Listener
	mu      sync.Mutex
	conns   []*Conn
	reasons map[Reason]int
}

func newGate(t *testing.T, cfg Config) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{reasons: map[Reason]int{}}
	cfg.Closed = func(r Reason) { g.mu.Lock(); g.reasons[r]++; g.mu.Unlock() }
	g.l, err = Listen(ln, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.l.Close() })
	go func() {
		for {
			c, err := g.l.Accept()
			if err != nil {
				return
			}
			g.mu.Lock()
			g.conns = append(g.conns, c.(*Conn))
			g.mu.Unlock()
		}
	}()
	return g
}

func (g *gate) count(r Reason) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reasons[r]
}

// dialFrom connects from a loopback address of its own (127.0.0.0/8 is
// all loopback on Linux), so each "peer" is a distinct IP.
func dialFrom(t *testing.T, from string, to net.Addr) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", to.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func waitOpen(t *testing.T, g *gate, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for g.l.Open() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", g.l.Open(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestOnePeerHoldsAtMostItsShare(t *testing.T) {
	g := newGate(t, Config{Max: 8, PerPeer: 2})
	// The first two connections of a peer that are busy stay; a third is
	// refused while they are busy.
	a := dialFrom(t, "127.0.0.2", g.l.Addr())
	b := dialFrom(t, "127.0.0.2", g.l.Addr())
	waitOpen(t, g, 2)
	g.mu.Lock()
	for _, c := range g.conns {
		c.Busy()
	}
	g.mu.Unlock()
	c := dialFrom(t, "127.0.0.2", g.l.Addr())
	if !closedByServer(c) {
		t.Error("a third connection of a busy peer was kept")
	}
	if got := g.count(PeerFull); got != 1 {
		t.Errorf("peer_full = %d, want 1", got)
	}
	for _, c := range []net.Conn{a, b} {
		if closedByServer(c) {
			t.Error("a busy connection was closed")
		}
	}
}

func TestIdleConnectionsMakeRoomForOthers(t *testing.T) {
	g := newGate(t, Config{Max: 8, PerPeer: 4})
	// Two flooding peers fill the server with idle connections.
	var flood []net.Conn
	for i := range 8 {
		flood = append(flood, dialFrom(t, []string{"127.0.0.2", "127.0.0.3"}[i%2], g.l.Addr()))
	}
	waitOpen(t, g, 8)
	// Six clients of other peers each get in, and stay, by closing the
	// floods' idle connections.
	var real []net.Conn
	for i := range 6 {
		c := dialFrom(t, []string{"127.0.0.4", "127.0.0.5", "127.0.0.6"}[i%3], g.l.Addr())
		real = append(real, c)
		waitOpen(t, g, 8)
	}
	for i, c := range real {
		if closedByServer(c) {
			t.Errorf("client %d was closed", i)
		}
	}
	closed := 0
	for _, c := range flood {
		if closedByServer(c) {
			closed++
		}
	}
	if closed != 6 || g.count(EvictedIdle) != 6 {
		t.Errorf("%d flood connections closed, evicted_idle = %d; want 6 and 6", closed, g.count(EvictedIdle))
	}
}

func TestUnauthenticatedConnectionsNeverTakeTheReservedPlaces(t *testing.T) {
	trusted := netip.MustParseAddr("127.0.0.9")
	g := newGate(t, Config{Max: 4, PerPeer: 3, Reserved: 1, Trusted: func(a netip.Addr) bool { return a == trusted }})
	for _, from := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		dialFrom(t, from, g.l.Addr())
	}
	waitOpen(t, g, 3)
	g.mu.Lock()
	for _, c := range g.conns {
		c.Busy()
	}
	g.mu.Unlock()
	if c := dialFrom(t, "127.0.0.5", g.l.Addr()); !closedByServer(c) {
		t.Error("an unauthenticated connection took the reserved place")
	}
	if got := g.count(ServerFull); got != 1 {
		t.Errorf("server_full = %d, want 1", got)
	}
	c := dialFrom(t, "127.0.0.9", g.l.Addr())
	waitOpen(t, g, 4)
	if closedByServer(c) {
		t.Error("the trusted peer was refused the reserved place")
	}
}

func TestAnAuthenticatedConnectionIsNotEvictedByAStranger(t *testing.T) {
	g := newGate(t, Config{Max: 2, PerPeer: 1})
	a := dialFrom(t, "127.0.0.2", g.l.Addr())
	b := dialFrom(t, "127.0.0.3", g.l.Addr())
	waitOpen(t, g, 2)
	g.mu.Lock()
	for _, c := range g.conns {
		c.Authenticate()
	}
	g.mu.Unlock()
	if c := dialFrom(t, "127.0.0.4", g.l.Addr()); !closedByServer(c) {
		t.Error("a stranger got in by closing an authenticated connection")
	}
	for _, c := range []net.Conn{a, b} {
		if closedByServer(c) {
			t.Error("an authenticated idle connection was closed")
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Max: 0, PerPeer: 1}, {Max: 4, PerPeer: 4}, {Max: 4, PerPeer: 1, Reserved: 4}, {Max: 4, PerPeer: 0}} {
		if c.Validate() == nil {
			t.Errorf("%+v: valid, want an error", c)
		}
	}
	if err := (Config{Max: 1, PerPeer: 1}).Validate(); err != nil {
		t.Errorf("one place: %v", err)
	}
}
