package capture

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// gate is a loopback TCP forwarder in front of the real S3 server that can
// be cut: while down it closes every connection, as a store out of reach
// does, and cutting it closes the connections a client keeps alive.
type gate struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); g.set(true) })
	go g.serve()
	return g
}

func (g *gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		down := g.down
		if !down {
			g.conns[c] = true
		}
		g.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		go func() {
			defer func() { g.mu.Lock(); delete(g.conns, c); g.mu.Unlock(); c.Close() }()
			up, err := net.DialTimeout("tcp", g.target, 5*time.Second)
			if err != nil {
				return
			}
			defer up.Close()
			go func() { io.Copy(up, c); up.Close() }()
			io.Copy(c, up)
		}()
	}
}

func (g *gate) set(down bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.down = down
	if down {
		for c := range g.conns {
			c.Close()
		}
	}
}

// A sealed capture whose S3 is out of reach waits for it: the engine
// keeps the capture and retries, and once S3 is back the capture is
// stored and Collected, with the refusals counted. Against the real
// s3proxy, cut off by a loopback gate.
func TestACaptureWaitsForItsStoreToComeBack(t *testing.T) {
	srv := testenv.S3(t)
	g := newGate(t, srv.Endpoint)
	secret := filepath.Join(t.TempDir(), "secret-key")
	if err := os.WriteFile(secret, []byte(srv.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store, err := artifact.OpenS3Store(ctx, artifact.S3StoreConfig{Endpoint: g.ln.Addr().String(), Region: srv.Region,
		Bucket: srv.Bucket, AccessKey: srv.AccessKey, SecretKeyFile: secret, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e := newTestEngine(t, &fileBackend{}, func(c *EngineConfig) {
		c.Store = store
		c.CollectTimeout = 2 * time.Second
		c.StoreRetryFor = time.Minute
	})
	spec := Spec{ID: "s3-outage", Backend: Perf, Pre: time.Second, Post: 50 * time.Millisecond,
		Trigger: Trigger{Service: "shop", Endpoint: "/pay", Latency: 200 * time.Millisecond}}
	if _, err := e.Arm(ctx, spec); err != nil {
		t.Fatal(err)
	}
	g.set(true)
	e.Observe(req("shop", "/pay", time.Now(), 300*time.Millisecond, 1))
	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(e.m.storeRetries) < 2 {
		if time.Now().After(deadline) {
			st, _ := e.Get(spec.ID)
			t.Fatalf("no retried refusal in 30 s; capture %s %s", st.State, st.Error)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st, _ := e.Get(spec.ID); st.State.Terminal() {
		t.Fatalf("the capture ended while its store was down: %s %s", st.State, st.Error)
	}
	g.set(false)
	wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	st, err := e.Wait(wctx, spec.ID)
	if err != nil || st.State != control.Collected {
		t.Fatalf("after the store came back: %v %s %s", err, st.State, st.Error)
	}
	if !strings.Contains(st.Location, spec.ID) {
		t.Errorf("location %q does not name the capture", st.Location)
	}
	if md, err := store.Get(ctx, spec.ID); err != nil || md.ID != spec.ID {
		t.Errorf("the store's record: %v, %v", md, err)
	}
}

// A store that stays down past StoreRetryFor fails the capture, and the
// error says where the sealed capture stays.
func TestACaptureWhoseStoreStaysDownFailsSayingWhereItIs(t *testing.T) {
	srv := testenv.S3(t)
	g := newGate(t, srv.Endpoint)
	secret := filepath.Join(t.TempDir(), "secret-key")
	if err := os.WriteFile(secret, []byte(srv.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store, err := artifact.OpenS3Store(ctx, artifact.S3StoreConfig{Endpoint: g.ln.Addr().String(), Region: srv.Region,
		Bucket: srv.Bucket, AccessKey: srv.AccessKey, SecretKeyFile: secret, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e := newTestEngine(t, &fileBackend{}, func(c *EngineConfig) {
		c.Store = store
		c.CollectTimeout = 2 * time.Second
		c.StoreRetryFor = 4 * time.Second
	})
	spec := Spec{ID: "s3-gone", Backend: Perf, Pre: time.Second, Post: 50 * time.Millisecond,
		Trigger: Trigger{Service: "shop", Endpoint: "/pay", Latency: 200 * time.Millisecond}}
	if _, err := e.Arm(ctx, spec); err != nil {
		t.Fatal(err)
	}
	g.set(true)
	e.Observe(req("shop", "/pay", time.Now(), 300*time.Millisecond, 1))
	wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	st, err := e.Wait(wctx, spec.ID)
	if err != nil || st.State != control.Failed || !strings.Contains(st.Error, "the sealed capture stays in") {
		t.Fatalf("%v %s %q", err, st.State, st.Error)
	}
	dir := st.Error[strings.LastIndex(st.Error, "stays in ")+len("stays in ") : len(st.Error)-1]
	if _, err := os.Stat(filepath.Join(dir, "requests.jsonl")); err != nil {
		t.Errorf("the sealed capture is not where the error says: %v", err)
	}
}
