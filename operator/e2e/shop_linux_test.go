package e2e

import (
	"context"
	"crypto/rand"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/agents/telemetry"
)

// shop is the test's app, service "shop" on the node. A request for
// /stall takes the app's one lock and blocks its OS thread in nanosleep
// for stallFor, the way a library that sleeps while holding a lock leaves
// the CPU (the thousand spikes (docs/field-stories.md)); every /fast request takes the same lock for a
// moment, so the requests that arrive meanwhile queue behind it and the
// stalled second's mean latency goes up by orders of magnitude, which is
// what the detector looks for. Each request is handed to observe as the
// agent's intake would hand it on: with its handler thread's id, a trace
// id and weight 1.
type shop struct {
	url     string
	client  *http.Client
	observe func(telemetry.Request)

	lock sync.Mutex
}

const stallFor = time.Second

func startShop(t *testing.T, observe func(telemetry.Request)) *shop {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &shop{url: "http://" + ln.Addr().String(), observe: observe,
		// The load is open-loop: every request that queues behind a stall
		// holds a connection, and they all come back at once.
		client: &http.Client{Timeout: 30 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 1024}}}
	srv := &http.Server{Handler: http.HandlerFunc(s.serve)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

func (s *shop) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var tid uint32
	s.lock.Lock()
	runtime.LockOSThread()
	tid = uint32(unix.Gettid())
	if r.URL.Path == "/stall" {
		ts := unix.NsecToTimespec(int64(stallFor))
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
	}
	runtime.UnlockOSThread()
	s.lock.Unlock()
	w.Write([]byte("ok\n"))
	q := telemetry.Request{Service: "shop", Endpoint: r.URL.Path, Start: start, Duration: time.Since(start),
		Status: "200", ThreadID: tid, Weight: 1}
	rand.Read(q.TraceID[:])
	rand.Read(q.SpanID[:])
	s.observe(q)
}

// load sends /fast requests at rate per second, each on its own
// goroutine, until ctx ends.
func (s *shop) load(ctx context.Context, rate int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			wg.Add(1)
			go func() {
				defer wg.Done()
				if resp, err := s.client.Get(s.url + "/fast"); err == nil {
					resp.Body.Close()
				}
			}()
		}
	}
}

// stall sends one /stall request and returns when it was sent and when
// its answer came.
func (s *shop) stall(t *testing.T) (from, to time.Time) {
	t.Helper()
	from = time.Now()
	resp, err := s.client.Get(s.url + "/stall")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return from, time.Now()
}
