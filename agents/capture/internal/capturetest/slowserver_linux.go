//go:build linux

package capturetest

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// SlowServer is the test's app: an HTTP server whose handler, on a
// request for /slow, blocks its OS thread in nanosleep for 1 s, the way a
// thread blocked on a lock or a disk leaves the CPU. Every request is
// handed to observe with the handler thread's id.
type SlowServer struct {
	url  string
	srv  *http.Server
	mu   sync.Mutex
	slow []telemetry.Request
}

// StartSlowServer starts a SlowServer that hands each request to observe;
// the test's cleanup closes it.
func StartSlowServer(t testing.TB, observe func(*telemetry.Request)) *SlowServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &SlowServer{url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		runtime.LockOSThread()
		tid := uint32(unix.Gettid())
		if r.URL.Path == "/slow" {
			ts := unix.NsecToTimespec(int64(time.Second))
			for unix.Nanosleep(&ts, &ts) == unix.EINTR {
			}
		}
		runtime.UnlockOSThread()
		w.Write([]byte("ok\n"))
		q := telemetry.Request{Service: "web", Endpoint: r.URL.Path, Start: start, Duration: time.Since(start),
			Status: "200", ThreadID: tid, Weight: 1}
		if r.URL.Path == "/slow" {
			s.mu.Lock()
			s.slow = append(s.slow, q)
			s.mu.Unlock()
		}
		observe(&q)
	})}
	go s.srv.Serve(ln)
	t.Cleanup(func() { s.srv.Close() })
	return s
}

// Load sends fast requests at about rate per second until ctx ends.
func (s *SlowServer) Load(ctx context.Context, rate int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if resp, err := http.Get(s.url + "/fast"); err == nil {
				resp.Body.Close()
			}
		}
	}
}

// Get requests path and fails the test if it cannot.
func (s *SlowServer) Get(t testing.TB, path string) {
	resp, err := http.Get(s.url + path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// Slow returns the /slow requests served so far.
func (s *SlowServer) Slow() []telemetry.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]telemetry.Request(nil), s.slow...)
}
