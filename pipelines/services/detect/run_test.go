package detect

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/store"
)

// A range longer than MaxSpan is caught up in passes of at most MaxSpan,
// oldest first: only the last looks for patterns, each says how far behind
// it is, and the windows and patterns are those of one pass over the
// whole range (a window straddling a pass's start is seen whole through
// the pad).
func TestRunCatchesUpALongRangeInBoundedPasses(t *testing.T) {
	ctx := context.Background()
	st := loadStallingFleet(t)
	// Passes of 1,355 s: the fleet's stall at seconds 2700–2729 straddles
	// the third one's start, 2710.
	var passes []Result
	cfg := Config{Service: "billy", From: dataStart, To: sec(3600), MaxSpan: 1355 * time.Second, Now: time.Now}
	if err := Run(ctx, st, cfg, 0, RunHooks{Pass: func(r Result) { passes = append(passes, r) }}); err != nil {
		t.Fatal(err)
	}
	type span struct {
		from, to      int
		skip          bool
		behindMinutes int
	}
	var got []span
	for _, r := range passes {
		got = append(got, span{int(r.From.Sub(dataStart).Seconds()), int(r.To.Sub(dataStart).Seconds()), r.PatternsSkipped, int(r.Behind.Minutes())})
	}
	want := []span{{0, 1355, true, 37}, {1355, 2710, true, 14}, {2710, 3600, false, 0}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(span{})); diff != "" {
		t.Fatalf("passes (-want +got):\n%s", diff)
	}
	if len(passes[2].Patterns) == 0 {
		t.Error("the catch-up's last pass found no pattern")
	}
	for _, r := range passes[:2] {
		if len(r.Patterns) != 0 {
			t.Errorf("a catch-up pass before the last found patterns: %+v", r.Patterns)
		}
	}
	chunked := map[string][][]string{}
	for _, q := range []string{liveSpikes, livePatterns} {
		chunked[q] = queryRows(t, st, q)
	}

	// One pass over the whole range writes the same windows and patterns.
	for _, tab := range detectorTables {
		if err := st.Exec(ctx, "TRUNCATE TABLE "+tab); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(3600)}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{liveSpikes, livePatterns} {
		whole := queryRows(t, st, q)
		if len(whole) == 0 {
			t.Fatalf("one pass wrote no rows for %s", q)
		}
		if diff := cmp.Diff(whole, chunked[q]); diff != "" {
			t.Errorf("%s: the catch-up's rows differ from one pass's (-one +catch-up):\n%s", q, diff)
		}
	}
}

// failingStore fails every statement while down is set: the other side of
// our own store interface, for the outage of a real store.
type failingStore struct {
	store.Store
	down *atomic.Bool
}

var errStoreDown = errors.New("store down (test)")

func (s failingStore) Query(ctx context.Context, q string, fn func(store.Block) error, opts ...store.Option) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Query(ctx, q, fn, opts...)
}

func (s failingStore) Exec(ctx context.Context, q string, opts ...store.Option) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Exec(ctx, q, opts...)
}

// A store that stops answering fails the passes, each reported and tried
// again; once it answers, the detector catches up the gap from where its
// last good pass ended, in passes of at most MaxSpan, with no range
// skipped or covered twice, and the process never stopped.
func TestRunCatchesUpAfterTheStoreWasDown(t *testing.T) {
	// Five requests a second: at one, a 30 s stall in a host's first hour
	// is more than one request in a hundred, its own tail then, and
	// whether a live pass finds it depends on when its tails were taken
	// (a young host's trait, not the catch-up's). Host 3 stalls every
	// 3 minutes from minute 21; every host shares a 30 s stall at minute
	// 45.
	st := migrated(t)
	fleetLoad{hosts: 40, seconds: 3600, rps: 5, stall: "(h = 3 AND s >= 1200 AND s % 180 = 5) OR (s >= 2700 AND s < 2730)"}.insert(t, st)
	var down atomic.Bool
	fs := failingStore{Store: st, down: &down}

	// The clock runs 400× fast from second 600 of the data: a 30 s pass
	// every 75 ms of real time.
	var mu sync.Mutex
	began := time.Now()
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return sec(600).Add(time.Since(began) * 400)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		passes   []Result
		failures int
		outage   time.Time // data time the store went down at
	)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, fs, Config{Service: "billy", From: dataStart, To: now(), MaxSpan: 10 * time.Minute, Now: now}, 75*time.Millisecond, RunHooks{
			Pass: func(r Result) {
				mu.Lock()
				passes = append(passes, r)
				n := len(passes)
				mu.Unlock()
				switch {
				case n == 3 && outage.IsZero():
					outage = r.To
					down.Store(true)
					// Down for 30 minutes of data time, then back.
					time.AfterFunc(30*time.Minute/400, func() { down.Store(false) })
				case r.To.After(sec(3300)):
					cancel()
				}
			},
			Fail: func(err error) {
				if !errors.Is(err, errStoreDown) {
					t.Errorf("a failed pass reported %v, want the store's error", err)
				}
				mu.Lock()
				failures++
				mu.Unlock()
			},
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v, want it to run until cancelled", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("Run did not reach second 3300 of the data within 3 minutes")
	}
	mu.Lock()
	defer mu.Unlock()
	if failures == 0 {
		t.Fatal("no pass failed while the store was down")
	}
	for i := 1; i < len(passes); i++ {
		if !passes[i].From.Equal(passes[i-1].To) {
			t.Fatalf("pass %d starts at %s, the one before ended at %s: a range skipped or covered twice", i, passes[i].From, passes[i-1].To)
		}
	}
	// The first pass after the outage starts where the last good one
	// ended, and the gap (30 minutes and more) went in passes of ≤ 10.
	var after *Result
	for i := range passes {
		if passes[i].From.Equal(outage) {
			after = &passes[i]
			break
		}
	}
	if after == nil {
		t.Fatalf("no pass starts where the last pass before the outage ended (%s)", outage)
	}
	if after.To.Sub(after.From) != 10*time.Minute || !after.PatternsSkipped || after.Behind < 15*time.Minute {
		t.Errorf("the first pass after the outage covers %s → %s (patterns skipped %v, %s behind); want 10 minutes, skipped, 15m+ behind",
			after.From, after.To, after.PatternsSkipped, after.Behind)
	}
	for _, r := range passes {
		if r.To.Sub(r.From) > 10*time.Minute {
			t.Errorf("a pass covers %s → %s, longer than MaxSpan", r.From, r.To)
		}
	}
	// The gap's windows are those one pass over the data finds.
	gapWindows := func() [][]string {
		return queryRows(t, st, fmt.Sprintf(`SELECT host, toString(window_start), toString(window_end) FROM spikes FINAL
WHERE is_deleted = 0 AND window_start >= %s AND window_start < %s ORDER BY host, window_start`, secLit(outage), secLit(sec(3200))))
	}
	caught := gapWindows()
	// Every stall in the gap has its window: host 3's, and the fleet's on
	// every host.
	has := map[string]bool{}
	for _, w := range caught {
		has[w[0]+" "+w[1]] = true
	}
	stamp := func(s int) string { return sec(s).Format("2006-01-02 15:04:05.000") }
	gapFrom := int(outage.Sub(dataStart).Seconds())
	for s := 1265; s < 3200; s += 180 {
		if s >= gapFrom && s != 2705 && !has[host(3)+" "+stamp(s)] {
			t.Errorf("host 3's stall at second %d, in the outage's gap from second %d, has no window: %v", s, gapFrom, caught)
		}
	}
	if gapFrom <= 2700 {
		for h := 0; h < 40; h++ {
			if !has[host(h)+" "+stamp(2700)] {
				t.Errorf("%s: the fleet's stall at second 2700, in the outage's gap from second %d, has no window", host(h), gapFrom)
			}
		}
	}
	for _, tab := range detectorTables {
		if err := st.Exec(context.Background(), "TRUNCATE TABLE "+tab); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Pass(context.Background(), st, Config{Service: "billy", From: dataStart, To: sec(3600)}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(gapWindows(), caught); diff != "" {
		t.Errorf("the outage's gap: windows of the catch-up differ from one pass's (-one +catch-up):\n%s", diff)
	}
}
