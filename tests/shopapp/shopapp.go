//go:build linux

// Package shopapp is the end-to-end tests' app, "shop": an HTTP service
// whose /stall request takes the app's one lock and blocks its OS thread
// in nanosleep, the way a library that sleeps while holding a lock leaves
// the CPU (docs/field-stories.md, the thousand spikes). Every /fast
// request takes the same lock for a moment, so the requests that arrive
// meanwhile queue behind it and the stalled second's latency rises by
// orders of magnitude, which is what the detector looks for.
//
// operator/e2e runs it in the test process; tests/e2ecluster/shop runs it
// in a pod and reports its requests over OTLP.
package shopapp

import (
	"context"
	"net/http"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Request is one request the app served.
type Request struct {
	Path       string
	Start, End time.Time
	// ThreadID is the handler's OS thread (in the app's PID namespace).
	ThreadID uint32
}

// App serves /fast, /stall and /healthz, and hands every /fast and /stall
// request to Served once answered.
type App struct {
	StallFor time.Duration
	Served   func(Request)

	lock sync.Mutex
}

// ServeHTTP implements http.Handler.
func (a *App) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		w.Write([]byte("ok\n"))
		return
	case "/fast", "/stall":
	default:
		http.NotFound(w, r)
		return
	}
	start := time.Now()
	a.lock.Lock()
	runtime.LockOSThread()
	tid := uint32(unix.Gettid())
	if r.URL.Path == "/stall" {
		ts := unix.NsecToTimespec(int64(a.StallFor))
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
	}
	runtime.UnlockOSThread()
	a.lock.Unlock()
	w.Write([]byte("ok\n"))
	if a.Served != nil {
		a.Served(Request{Path: r.URL.Path, Start: start, End: time.Now(), ThreadID: tid})
	}
}

// Load sends /fast requests to base at rate per second, each on its own
// goroutine (open loop: the requests that queue behind a stall hold a
// connection each and all come back at once), until ctx ends.
func Load(ctx context.Context, base string, rate int) {
	client := &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 1024}}
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
				if resp, err := client.Get(base + "/fast"); err == nil {
					resp.Body.Close()
				}
			}()
		}
	}
}
