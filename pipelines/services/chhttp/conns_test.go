package chhttp

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// openPools opens a pool of n of the shared engine's connections per role
// and one for the control pool.
func openPools(t *testing.T, n int) (Pools, [4]*store.Embedded) {
	t.Helper()
	db := testenv.ClickHouse(t).Database()
	var sts [4]*store.Embedded
	for i := range sts {
		size := n
		if i == 3 {
			size = 1
		}
		st, err := store.OpenEmbedded(context.Background(), store.EmbeddedConfig{Dir: testenv.ClickHouseDir(), Database: db, Connections: size})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		sts[i] = st
	}
	return Pools{ReadOnly: sts[0], Ingest: sts[1], Migrate: sts[2], Control: sts[3]}, sts
}

// serveConns serves a handler on pools as serve-clickhouse does
// (pipelines/cmd/spikehunt/serve.go: /healthz, the handler, Listen's
// gated listener and timeouts) on loopback, and returns its address, the
// handler and its registry.
func serveConns(t *testing.T, p Pools, cfg Config, l ServerLimits) (string, *Handler, *prometheus.Registry) {
	t.Helper()
	h := NewPools(p, cfg)
	reg := prometheus.NewRegistry()
	if err := h.Register(reg); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/healthz", h.Healthz())
	mux.Handle("/", Instrument(h, reg))
	srv, ln, err := Listen("127.0.0.1:0", mux, l, reg)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), h, reg
}

// flood holds n silent connections to addr from the loopback address
// from, each reopened (after a pause of 10 ms) when the server closes it,
// until the test ends.
func flood(t *testing.T, addr, from string, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err == nil {
					stop := context.AfterFunc(ctx, func() { c.Close() })
					io.Copy(io.Discard, c) // until the server closes it
					stop()
					c.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
	}
}

// selectOne sends an authenticated SELECT 1 on a connection of its own
// from the loopback address from, within 8 s.
func selectOne(addr, from string) error {
	tr := &http.Transport{DisableKeepAlives: true, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/?"+url.Values{"query": {"SELECT 1"}}.Encode(), nil)
	req.SetBasicAuth("grafana", "r")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && (resp.StatusCode != 200 || string(b) != "1\n") {
		return &store.Exception{Message: resp.Status + " " + string(b)}
	}
	return err
}

// The probe: 140 silent connections, each reopened when the server's
// header timeout closed it, held every one of serve-clickhouse's 128
// places (then a netutil.LimitListener): an authenticated SELECT 1 waited
// in the kernel's backlog until a wave of them timed out, and two of three
// timed out at 8 s. Now the flooding peer holds at most a quarter of the
// places, its silent connections, being idle, are closed to make room,
// and another client IP's every SELECT 1 is answered within its 8 s (in
// about a second on a quiet machine; the bound is the client's timeout,
// not a speed target, which belongs to a benchmark).
// (A flood from the client's own IP shares that IP's quarter with it:
// each of the flood's reconnections closes the IP's connection idle
// longest, and a new connection of the client that has not had its
// headers read within about 32 of them goes too.)
func TestSilentConnectionsDoNotKeepAnAuthenticatedClientOut(t *testing.T) {
	p, _ := openPools(t, 2)
	addr, _, reg := serveConns(t, p, threeUsers, DefaultServerLimits(threeUsers.MaxExecutionTime))
	flood(t, addr, "127.0.0.2", 140)
	time.Sleep(time.Second) // the flood holds its places
	failed := 0
	for i := range 3 {
		start := time.Now()
		err := selectOne(addr, "127.0.0.1")
		took := time.Since(start).Round(time.Millisecond)
		if err != nil {
			failed++
			t.Errorf("SELECT %d of 3 beside 140 silent connections: %v after %v", i+1, err, took)
		}
	}
	refused := refusals(t, reg, "evicted_idle") + refusals(t, reg, "peer_full")
	if refused == 0 {
		t.Errorf("no connection of the flood was refused or evicted (spikehunt_chhttp_connections_refused_total)")
	}
	t.Logf("%d of 3 SELECT 1 failed; %v connections of the flood refused or evicted", failed, refused)
}

// A connection that has carried an authenticated request keeps its place
// when strangers fill the server: an unauthenticated newcomer that finds
// no place closes the connection idle longest, never an authenticated
// one, however long it has been idle.
func TestAnAuthenticatedConnectionKeepsItsPlaceInAFullServer(t *testing.T) {
	p, _ := openPools(t, 2)
	addr, _, reg := serveConns(t, p, threeUsers, ServerLimits{ReadHeader: 10 * time.Second, Read: time.Minute, Write: time.Minute, Idle: time.Minute, MaxConns: 16, MaxConnsPerPeer: 4, ReservedConns: 4})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	ask := func() (int, error) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		req, _ := http.NewRequest("POST", "http://"+addr+"/?query=SELECT+1", nil)
		req.SetBasicAuth("grafana", "r")
		if err := req.Write(c); err != nil {
			return 0, err
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if status, err := ask(); status != 200 {
		t.Fatalf("SELECT 1: %d %v", status, err)
	}
	// Strangers, one connection each from 20 client IPs, more than the
	// 12 places of unauthenticated connections: each past them closes the
	// connection idle longest that it may.
	var held []net.Conn
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	for i := range 20 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+i))}}
		h, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, h)
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if status, err := ask(); status != 200 {
		t.Fatalf("SELECT 1 on the authenticated connection beside 20 strangers: %d %v", status, err)
	}
	if got := refusals(t, reg, "evicted_idle"); got < 8 {
		t.Errorf("connections_refused_total{evicted_idle} = %v, want the 8 strangers past the unauthenticated places to have closed idle ones", got)
	}
}

// /healthz answers at once while every pool, the control pool's one
// connection included, is held by a statement, and says which pool is
// wedged when a call on it lasts longer than anything that bounds it.
func TestHealthzAnswersWhileEveryPoolIsBusy(t *testing.T) {
	p, sts := openPools(t, 1)
	addr, h, _ := serveConns(t, p, threeUsers, ServerLimits{ReadHeader: 5 * time.Second, Read: time.Minute, Write: time.Minute, Idle: time.Minute, MaxConns: 16})
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, st := range sts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.QueryRaw(context.Background(), store.RawStatement{Query: "SELECT sleepEachRow(1) FROM numbers(6) SETTINGS max_block_size = 1"}, "TSV", io.Discard)
		}()
	}
	// The statements hold their pools once they run: on a busy machine
	// that may take a moment, so the control pool is probed until it no
	// longer answers.
	held := false
	for deadline := time.Now().Add(4 * time.Second); !held && time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		held = p.Control.QueryRaw(ctx, store.RawStatement{Query: "SELECT 1"}, "TSV", io.Discard) != nil
		cancel()
	}
	if !held {
		t.Fatal("the control pool still answers: it is not held")
	}
	get := func() (int, string) {
		t.Helper()
		// Answering takes no pool; the bound is for a loaded machine.
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("/healthz while every pool is busy: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := get(); status != 200 || body != "ok\n" {
		t.Fatalf("/healthz while every pool is busy: %d %q, want 200 ok", status, body)
	}
	// A call on the control pool older than a kill may take.
	done := h.watches[3].start()
	h.watches[3].mu.Lock()
	for id := range h.watches[3].calls {
		h.watches[3].calls[id] = time.Now().Add(-2 * time.Minute)
	}
	h.watches[3].mu.Unlock()
	if status, body := get(); status != http.StatusServiceUnavailable || !strings.Contains(body, "wedged: the control pool") {
		t.Fatalf("/healthz with a kill in flight for 2 minutes: %d %q, want 503 naming the control pool", status, body)
	}
	done()
	if status, _ := get(); status != 200 {
		t.Fatalf("/healthz once the call ended: %d", status)
	}
}

// refusals is spikehunt_chhttp_connections_refused_total{reason} of reg.
func refusals(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "spikehunt_chhttp_connections_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no spikehunt_chhttp_connections_refused_total{reason=%q}", reason)
	return 0
}
