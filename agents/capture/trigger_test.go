package capture

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

var (
	nobodyOnUnix = &telemetry.Sender{Source: "unixgram", HasCred: true, UID: 65534, GID: 65534, PID: 4711}
	rootOnUnix   = &telemetry.Sender{Source: "unixgram", HasCred: true, UID: 0, PID: 1, Trusted: true}
	strangerUDP  = &telemetry.Sender{Source: "udp", Addr: netip.MustParseAddr("10.9.9.9")}
)

func refused(e *Engine, reason string) float64 {
	return testutil.ToFloat64(e.m.refusedVec.WithLabelValues(reason))
}

// The finding: `checkout /pay 5000000 200` from an unprivileged
// user fired an armed capture. A request from a sender the intake did not
// trust is kept as data (it is in the window's requests) but never fires,
// and the refusal is counted.
func TestAnUntrustedSenderCannotFireAnArmedCapture(t *testing.T) {
	e := newTestEngine(t, &fileBackend{}, nil)
	ctx := context.Background()
	spec := Spec{ID: "bait", Backend: Perf, Pre: time.Second, Post: 50 * time.Millisecond,
		Trigger: Trigger{Service: "checkout", Latency: 500 * time.Millisecond}}
	if _, err := e.Arm(ctx, spec); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, from := range []*telemetry.Sender{nobodyOnUnix, strangerUDP} {
		e.ObserveFrom(req("checkout", "/pay", now.Add(time.Duration(i)*time.Millisecond), 5*time.Second, uint32(10+i)), from)
	}
	time.Sleep(50 * time.Millisecond) // a fire would be on its way by now
	if st, _ := e.Get("bait"); st.State != control.Armed {
		t.Fatalf("an untrusted sender's request moved the capture to %s", st.State)
	}
	if got := refused(e, reasonUntrusted); got != 2 {
		t.Errorf("refused{untrusted_sender} = %v, want 2", got)
	}
	// A trusted sender's slow request fires it; the untrusted requests
	// are in its window's requests all the same.
	e.ObserveFrom(req("checkout", "/pay", now.Add(10*time.Millisecond), 600*time.Millisecond, 20), rootOnUnix)
	st, err := e.Wait(ctx, "bait")
	if err != nil || st.State != control.Collected {
		t.Fatalf("%v %s %s", err, st.State, st.Error)
	}
	if st.Cause.Latency != 600*time.Millisecond {
		t.Errorf("fired on %+v, want the trusted 600ms request", st.Cause)
	}
	b, err := os.ReadFile(filepath.Join(st.Location, st.Metadata.Requests))
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range []string{`"thread_id":10,`, `"thread_id":11,`, `"thread_id":20,`} {
		if !strings.Contains(string(b), tid) {
			t.Errorf("requests.jsonl lacks %s:\n%s", tid, b)
		}
	}
}

// stepClock is an engine clock the test moves.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *stepClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// A trusted sender fires at most FireBurst captures at once and one more
// every FireEvery; another sender has a bucket of its own, and every
// capture one request fires counts as one fire.
func TestFiresAreRateLimitedPerSender(t *testing.T) {
	clock := &stepClock{t: time.Now()}
	e := newTestEngine(t, &fileBackend{}, func(c *EngineConfig) {
		c.FireEvery, c.FireBurst, c.MaxConcurrent, c.Now = time.Minute, 1, 8, clock.now
	})
	ctx := context.Background()
	arm := func(id, service string) {
		t.Helper()
		spec := Spec{ID: id, Backend: Perf, Pre: time.Second, Post: 10 * time.Millisecond,
			Trigger: Trigger{Service: service, Latency: 100 * time.Millisecond}}
		if _, err := e.Arm(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	state := func(id string) control.State { st, _ := e.Get(id); return st.State }
	waitCollected := func(id string) {
		t.Helper()
		if st, err := e.Wait(ctx, id); err != nil || st.State != control.Collected {
			t.Fatalf("%s: %v %s %s", id, err, st.State, st.Error)
		}
	}
	app := &telemetry.Sender{Source: "unixgram", HasCred: true, UID: 1000, PID: 1, Trusted: true}
	appAgain := &telemetry.Sender{Source: "unixgram", HasCred: true, UID: 1000, PID: 2, Trusted: true} // a new pid, the same user
	other := &telemetry.Sender{Source: "udp", Addr: netip.MustParseAddr("10.0.0.7"), Trusted: true}
	// Requests end on the wall clock (the post-window is timed from
	// them); the limiter reads the engine's clock, which the test moves.
	slow := func(service string) *telemetry.Request { return req(service, "/", time.Now(), time.Second, 0) }

	// One request fires both captures armed for its service: one fire.
	arm("perf-a", "a")
	arm("bpf-a", "a")
	e.ObserveFrom(slow("a"), app)
	waitCollected("perf-a")
	waitCollected("bpf-a")

	// The same uid from another process is the same sender: its bucket is
	// empty for a minute.
	arm("b1", "b")
	e.ObserveFrom(slow("b"), appAgain)
	time.Sleep(50 * time.Millisecond)
	if s := state("b1"); s != control.Armed {
		t.Fatalf("b1 is %s: the sender fired twice within its minute", s)
	}
	if got := refused(e, reasonRateLimited); got != 1 {
		t.Errorf("refused{rate_limited} = %v, want 1", got)
	}
	// Another sender fires it.
	e.ObserveFrom(slow("b"), other)
	waitCollected("b1")

	// A minute on, the first sender may fire again.
	arm("c1", "c")
	clock.add(59 * time.Second)
	e.ObserveFrom(slow("c"), app)
	time.Sleep(50 * time.Millisecond)
	if s := state("c1"); s != control.Armed {
		t.Fatalf("c1 is %s before the sender's minute was over", s)
	}
	clock.add(time.Second)
	e.ObserveFrom(slow("c"), app)
	waitCollected("c1")
	if got := refused(e, reasonRateLimited); got != 2 {
		t.Errorf("refused{rate_limited} = %v, want 2", got)
	}
}

// The limiter keeps an entry only for a fire that happened, and drops
// entries whose bucket is full again: refused senders cost no memory.
func TestFireLimiterTableStaysSmall(t *testing.T) {
	l := newFireLimiter(time.Second, 2)
	now := time.Now()
	for i := range 10_000 {
		k := telemetry.SenderKey{Addr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
		if !l.allow(k, now) {
			t.Fatalf("a new sender %d was refused", i)
		}
		now = now.Add(100 * time.Millisecond)
	}
	// Buckets refill in 2 s: at 10 fires a second, some 20 entries are
	// live at any time.
	if len(l.full) > pruneAt+1 {
		t.Errorf("%d entries for senders whose buckets are full again", len(l.full))
	}
	k := telemetry.SenderKey{UID: 1, HasCred: true}
	if !l.allow(k, now) || !l.allow(k, now) || l.allow(k, now) {
		t.Error("burst 2: want two fires, then a refusal")
	}
	if !l.allow(k, now.Add(time.Second)) {
		t.Error("refused after one interval")
	}
}

// A flood of untrusted requests is counted one by one but logged once a
// minute: it cannot flood the agent's log.
func TestRefusedTriggersAreLoggedOnceAMinute(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	clock := &stepClock{t: time.Now()}
	e := newTestEngine(t, &fileBackend{}, func(c *EngineConfig) {
		c.Now, c.Log = clock.now, slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logs}, nil))
	})
	spec := Spec{ID: "bait", Backend: Perf, Pre: time.Second, Post: 10 * time.Millisecond,
		Trigger: Trigger{Service: "checkout", Latency: 100 * time.Millisecond}}
	if _, err := e.Arm(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	for range 10_000 {
		e.ObserveFrom(req("checkout", "/pay", time.Now(), time.Second, 0), nobodyOnUnix)
	}
	clock.add(time.Minute)
	e.ObserveFrom(req("checkout", "/pay", time.Now(), time.Second, 0), strangerUDP)
	mu.Lock()
	n := strings.Count(logs.String(), "did not fire it")
	text := logs.String()
	mu.Unlock()
	if n != 2 || !strings.Contains(text, "uid 65534 (pid 4711) on unixgram") || !strings.Contains(text, "10.9.9.9 on udp") {
		t.Errorf("%d log lines for 10,001 refusals over a minute, want 2 naming each sender:\n%s", n, text)
	}
	if got := refused(e, reasonUntrusted); got != 10_001 {
		t.Errorf("refused{untrusted_sender} = %v, want 10001", got)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
