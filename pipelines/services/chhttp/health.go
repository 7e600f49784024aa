package chhttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// poolWatch keeps when each call in flight on one pool began (from before
// it waits for a connection to after it gives it back), so that Healthz
// can tell a pool that works from one that is wedged without taking any
// of its connections.
type poolWatch struct {
	name  string
	mu    sync.Mutex
	seq   uint64
	calls map[uint64]time.Time
}

func (w *poolWatch) start() func() {
	w.mu.Lock()
	w.seq++
	id := w.seq
	w.calls[id] = time.Now()
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.calls, id)
		w.mu.Unlock()
	}
}

// oldest is how long the oldest call in flight has lasted, and how many
// are in flight.
func (w *poolWatch) oldest(now time.Time) (time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var age time.Duration
	for _, t := range w.calls {
		age = max(age, now.Sub(t))
	}
	return age, len(w.calls)
}

// watched is a pool whose calls its poolWatch sees.
type watched struct {
	Engine
	w *poolWatch
}

func (e watched) QueryRaw(ctx context.Context, st store.RawStatement, format string, out io.Writer) error {
	defer e.w.start()()
	return e.Engine.QueryRaw(ctx, st, format, out)
}

func (e watched) InsertRaw(ctx context.Context, st store.RawStatement, format string, data io.Reader) error {
	defer e.w.start()()
	return e.Engine.InsertRaw(ctx, st, format, data)
}

// killTimeout bounds the KILL QUERY of a statement whose client left.
const killTimeout = 10 * time.Second

// wedgedAfter is how long a call may last on a pool before Healthz calls
// the pool wedged: a role's statement is stopped by the engine at
// max_execution_time and its client's connection by the server's read
// and write timeouts (max_execution_time + 30 s), a kill at killTimeout;
// a minute past that, the call is not being stopped.
func (h *Handler) wedgedAfter(pool int) time.Duration {
	if pool == 3 {
		return killTimeout + time.Minute
	}
	return h.cfg.MaxExecutionTime + time.Minute
}

// Healthz answers /healthz without taking a connection of any pool, so
// that a pool held busy (a flood of statements, a stuck KILL) cannot
// starve the kubelet's probes, nor a probe take the one connection a kill
// needs. The engine runs in this process: it was opened before the server
// listened and is closed only after it stops serving, so while this
// answers the engine is open. What it reports is whether the pools make
// progress: 503 "wedged: …" when a call on some pool has lasted longer
// than anything that bounds it allows (wedgedAfter: max_execution_time +
// 1 m, the control pool's kill 10 s + 1 m), naming the pool; else 200
// "ok". A pool that is merely busy, every connection in use and statements
// queued behind, is ok: that is load, and its callers' own timeouts end
// their wait. A statement that would fail on the engine is not checked
// here; the clients see that.
func (h *Handler) Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		var wedged []string
		for i, pw := range h.watches {
			if pw == nil {
				continue
			}
			if age, n := pw.oldest(now); age > h.wedgedAfter(i) {
				wedged = append(wedged, fmt.Sprintf("the %s pool has had a call in flight for %v (of %d), longer than %v allows", pw.name, age.Round(time.Second), n, h.wedgedAfter(i)))
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if len(wedged) > 0 {
			sort.Strings(wedged)
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "wedged: "+strings.Join(wedged, "; ")+"\n")
			return
		}
		io.WriteString(w, "ok\n")
	})
}
