package captures_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/captures"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// fixture is a migrated embedded store and a reference time: spikes and
// captures sit at t0 + seconds. t0 is recent, inside every TTL.
type fixture struct {
	st store.Store
	t0 time.Time
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(context.Background(), st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	return fixture{st: st, t0: time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)}
}

// at is t0 + s seconds.
func (f fixture) at(s float64) time.Time {
	return f.t0.Add(time.Duration(s * float64(time.Second)))
}

type spikeRow struct {
	id, service, host string
	start, end        float64 // seconds after t0
	deleted           bool
	version           int // detected_at = t0 + 1h + version seconds
}

func (f fixture) addSpikes(t *testing.T, rows ...spikeRow) {
	t.Helper()
	var vals []string
	lit := func(tm time.Time) string { return "'" + tm.Format("2006-01-02 15:04:05.000") + "'" }
	for _, r := range rows {
		svc := r.service
		if svc == "" {
			svc = "billy"
		}
		del := 0
		if r.deleted {
			del = 1
		}
		vals = append(vals, fmt.Sprintf("(%s, %s, %s, 'gen5', %s, %s, 1000000, 5000, 200, 'v1', %s, %d)",
			store.QuoteString(r.id), store.QuoteString(svc), store.QuoteString(r.host), lit(f.at(r.start)), lit(f.at(r.end)),
			lit(f.t0.Add(time.Hour+time.Duration(r.version)*time.Second)), del))
	}
	q := `INSERT INTO spikes (spike_id, service, host, hw_class, window_start, window_end, peak_us, baseline_us, score,
		detector_version, detected_at, is_deleted) VALUES ` + strings.Join(vals, ", ")
	if err := f.st.Exec(context.Background(), q); err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
}

// capture is a perf capture on h1 over [t0+10s, t0+20s).
func (f fixture) capture(id string) captures.Capture {
	return captures.Capture{
		ID: id, Host: "h1", Node: "node-1", Backend: "perf", Profile: "cpu",
		WindowStart: f.at(10), WindowEnd: f.at(20), Trigger: "local threshold: /get 1.2s",
		URI: "s3://captures/sha256/ab12", Bytes: 4 << 20, LostEvents: 17, Checksum: "sha256:ab12",
	}
}

// seedWindows writes spike windows around the capture's [10 s, 20 s) on h1,
// one of each relation to it, and returns the ids that overlap it.
func (f fixture) seedWindows(t *testing.T) []string {
	f.addSpikes(t,
		spikeRow{id: "before", host: "h1", start: 0, end: 5},
		spikeRow{id: "touches-start", host: "h1", start: 5, end: 10},
		spikeRow{id: "over-start", host: "h1", start: 8, end: 12},
		spikeRow{id: "contains", host: "h1", start: 9, end: 25},
		spikeRow{id: "inside", host: "h1", start: 12, end: 14},
		spikeRow{id: "other-service", service: "cart", host: "h1", start: 15, end: 16},
		spikeRow{id: "deleted", host: "h1", start: 16, end: 17},
		spikeRow{id: "over-end", host: "h1", start: 18, end: 22},
		spikeRow{id: "last-ms", host: "h1", start: 19.999, end: 21},
		spikeRow{id: "touches-end", host: "h1", start: 20, end: 21},
		spikeRow{id: "after", host: "h1", start: 25, end: 27},
		spikeRow{id: "other-host", host: "h2", start: 12, end: 14},
		// Windows as long as a day: the look-back's edge.
		spikeRow{id: "day-long", host: "h1", start: -86000, end: 11},
		spikeRow{id: "begun-too-early", host: "h1", start: -86500, end: 15},
		spikeRow{id: "extended", host: "h1", start: 1, end: 3, version: 1},
		spikeRow{id: "shortened", host: "h1", start: 2, end: 15, version: 1},
	)
	// A later pass, in parts of its own as the detector writes them (one
	// insert block is deduplicated on insert; parts only by FINAL or a
	// merge): it retracts "deleted" and rewrites two windows with the same
	// service, host and start, one extended into the capture, one shortened
	// out of it.
	f.addSpikes(t,
		spikeRow{id: "deleted", host: "h1", start: 16, end: 17, deleted: true, version: 2},
		spikeRow{id: "extended", host: "h1", start: 1, end: 11, version: 2},
		spikeRow{id: "shortened", host: "h1", start: 2, end: 4, version: 2},
	)
	return []string{"day-long", "extended", "over-start", "contains", "inside", "other-service", "over-end", "last-ms"}
}

func TestIndexCaptureLinksExactlyTheOverlappingSpikesOfItsHost(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	want := f.seedWindows(t)

	c := f.capture("cap-1")
	got, err := captures.Index(ctx, f.st, c)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("linked spike ids (-want +got):\n%s", diff)
	}

	row, err := captures.Get(ctx, f.st, "cap-1")
	if err != nil {
		t.Fatal(err)
	}
	wantRow := c
	wantRow.SpikeIDs, wantRow.Status = want, captures.StatusIndexed
	if diff := cmp.Diff(wantRow, row, cmpIgnoreStamps); diff != "" {
		t.Errorf("captures row (-want +got):\n%s", diff)
	}
	if row.CreatedAt.IsZero() || row.UpdatedAt.Before(row.CreatedAt) {
		t.Errorf("created_at %v, updated_at %v", row.CreatedAt, row.UpdatedAt)
	}
}

var cmpIgnoreStamps = cmp.FilterPath(func(p cmp.Path) bool {
	s := p.String()
	return s == "CreatedAt" || s == "UpdatedAt"
}, cmp.Ignore())

func TestIndexCaptureTwiceLeavesOneRowWithANewerVersion(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	want := f.seedWindows(t)
	c := f.capture("cap-1")
	if _, err := captures.Index(ctx, f.st, c); err != nil {
		t.Fatal(err)
	}
	first, err := captures.Get(ctx, f.st, c.ID)
	if err != nil {
		t.Fatal(err)
	}

	c.CreatedAt = f.t0 // ignored: the stored row keeps its first created_at
	got, err := captures.Index(ctx, f.st, c)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("re-index (-want +got):\n%s", diff)
	}
	second, err := captures.Get(ctx, f.st, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, second, cmpIgnoreStamps); diff != "" {
		t.Errorf("the row changed (-first +second):\n%s", diff)
	}
	if !second.CreatedAt.Equal(first.CreatedAt) || !second.UpdatedAt.After(first.UpdatedAt) {
		t.Errorf("created_at %v → %v, updated_at %v → %v: want the same created_at and a newer updated_at",
			first.CreatedAt, second.CreatedAt, first.UpdatedAt, second.UpdatedAt)
	}
	if n := count(t, f.st, "SELECT count() FROM captures FINAL WHERE capture_id = 'cap-1'"); n != "1" {
		t.Errorf("%s rows after two indexings, want 1", n)
	}
}

func TestIndexCaptureAgainFollowsTheDetector(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	c := f.capture("cap-1")
	f.addSpikes(t, spikeRow{id: "first", host: "h1", start: 11, end: 12})
	if got, err := captures.Index(ctx, f.st, c); err != nil || !cmp.Equal(got, []string{"first"}) {
		t.Fatalf("Index = %v, %v; want [first]", got, err)
	}
	// A later pass finds a window it had not seen and retracts the first.
	f.addSpikes(t,
		spikeRow{id: "late", host: "h1", start: 17, end: 19},
		spikeRow{id: "first", host: "h1", start: 11, end: 12, deleted: true, version: 1},
	)
	got, err := captures.Index(ctx, f.st, c)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"late"}, got); diff != "" {
		t.Errorf("re-index (-want +got):\n%s", diff)
	}
	list, err := captures.CapturesOfSpike(ctx, f.st, "first")
	if err != nil || len(list) != 0 {
		t.Errorf("captures of the retracted spike: %v, %v", list, err)
	}
}

func TestIndexCaptureWithoutSpikesWritesAnEmptyLink(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.addSpikes(t, spikeRow{id: "elsewhere", host: "h2", start: 10, end: 20})
	got, err := captures.Index(ctx, f.st, f.capture("cap-1"))
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("Index = %#v, %v; want an empty, non-nil list", got, err)
	}
	row, err := captures.Get(ctx, f.st, "cap-1")
	if err != nil || len(row.SpikeIDs) != 0 || row.Status != captures.StatusIndexed {
		t.Errorf("row %+v, %v", row, err)
	}
}

func TestIndexCaptureRefusesWhatTheRowCannotHold(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if _, err := captures.Index(ctx, f.st, f.capture("cap-1")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*captures.Capture)
		want   error
	}{
		{"no id", func(c *captures.Capture) { c.ID = "" }, captures.ErrInvalidCapture},
		{"no host", func(c *captures.Capture) { c.Host = "" }, captures.ErrInvalidCapture},
		{"no window", func(c *captures.Capture) { c.WindowStart = time.Time{} }, captures.ErrInvalidCapture},
		{"an empty window", func(c *captures.Capture) { c.WindowEnd = c.WindowStart }, captures.ErrInvalidCapture},
		{"a window that ends before it starts", func(c *captures.Capture) { c.WindowEnd = c.WindowStart.Add(-time.Second) }, captures.ErrInvalidCapture},
		{"an indexed capture moved to another host", func(c *captures.Capture) { c.Host = "h2" }, captures.ErrKeyChanged},
		{"an indexed capture with another window start", func(c *captures.Capture) { c.WindowStart = c.WindowStart.Add(time.Second) }, captures.ErrKeyChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := f.capture("cap-1")
			tc.change(&c)
			if _, err := captures.Index(ctx, f.st, c); !errors.Is(err, tc.want) {
				t.Errorf("Index: %v, want %v", err, tc.want)
			}
		})
	}
	// A new end is not part of the key: the row follows it.
	c := f.capture("cap-1")
	c.WindowEnd = f.at(30)
	if _, err := captures.Index(ctx, f.st, c); err != nil {
		t.Fatal(err)
	}
	if row, err := captures.Get(ctx, f.st, "cap-1"); err != nil || !row.WindowEnd.Equal(f.at(30)) {
		t.Errorf("row %+v, %v; want the new end", row, err)
	}
	if n := count(t, f.st, "SELECT count() FROM captures FINAL"); n != "1" {
		t.Errorf("%s rows, want 1", n)
	}
}

func TestCaptureLookupsAndDelete(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	linked := f.seedWindows(t)
	a := f.capture("cap-a")
	b := f.capture("cap-b") // a second capture of the same stall, on the same host
	b.WindowStart, b.WindowEnd = f.at(13), f.at(13.5)
	if _, err := captures.Index(ctx, f.st, a); err != nil {
		t.Fatal(err)
	}
	if got, err := captures.Index(ctx, f.st, b); err != nil || !cmp.Equal(got, []string{"contains", "inside"}) {
		t.Fatalf("Index(cap-b) = %v, %v; want [contains inside]", got, err)
	}
	capturesOf := func(spike string) []string {
		t.Helper()
		list, err := captures.CapturesOfSpike(ctx, f.st, spike)
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{}
		for _, c := range list {
			ids = append(ids, c.ID)
		}
		return ids
	}
	uncaptured := func(s captures.Scope) []string {
		t.Helper()
		list, err := captures.SpikesWithoutCaptures(ctx, f.st, s)
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{}
		for _, sp := range list {
			ids = append(ids, sp.ID)
		}
		return ids
	}
	all := captures.Scope{From: f.at(-90000), To: f.at(60)}
	// Every live window of the fixture, oldest first; "deleted" is not one.
	everything := []string{"begun-too-early", "day-long", "before", "extended", "shortened", "touches-start", "over-start", "contains", "inside",
		"other-host", "other-service", "over-end", "last-ms", "touches-end", "after"}

	if diff := cmp.Diff([]string{"cap-a", "cap-b"}, capturesOf("inside")); diff != "" {
		t.Errorf("captures of inside (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cap-a"}, capturesOf("over-end")); diff != "" {
		t.Errorf("captures of over-end (-want +got):\n%s", diff)
	}
	if got := capturesOf("touches-end"); len(got) != 0 {
		t.Errorf("captures of touches-end: %v", got)
	}
	if diff := cmp.Diff(without(everything, linked), uncaptured(all)); diff != "" {
		t.Errorf("spikes without captures (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"other-host"}, uncaptured(captures.Scope{From: all.From, To: all.To, Host: "h2"})); diff != "" {
		t.Errorf("spikes without captures on h2 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{}, uncaptured(captures.Scope{From: all.From, To: all.To, Service: "cart"})); diff != "" {
		t.Errorf("spikes without captures of cart (-want +got):\n%s", diff)
	}

	// Retention deletes cap-a: the spikes only it covered lose their capture,
	// "contains" and "inside" keep cap-b.
	if err := captures.Delete(ctx, f.st, "cap-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := captures.Get(ctx, f.st, "cap-a"); !errors.Is(err, captures.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if diff := cmp.Diff([]string{"cap-b"}, capturesOf("inside")); diff != "" {
		t.Errorf("captures of inside after deleting cap-a (-want +got):\n%s", diff)
	}
	if got := capturesOf("over-end"); len(got) != 0 {
		t.Errorf("captures of over-end after deleting cap-a: %v", got)
	}
	if diff := cmp.Diff(without(everything, []string{"contains", "inside"}), uncaptured(all)); diff != "" {
		t.Errorf("spikes without captures after deleting cap-a (-want +got):\n%s", diff)
	}

	// A finalizer retries: deleting what is gone is fine.
	for _, id := range []string{"cap-a", "cap-b", "cap-b", "never-indexed"} {
		if err := captures.Delete(ctx, f.st, id); err != nil {
			t.Errorf("Delete(%s): %v", id, err)
		}
	}
	if diff := cmp.Diff(everything, uncaptured(all)); diff != "" {
		t.Errorf("spikes without captures after deleting both (-want +got):\n%s", diff)
	}
	if n := count(t, f.st, "SELECT count() FROM captures"); n != "0" {
		t.Errorf("%s captures rows left, want 0", n)
	}
}

func TestSpikesWithoutCapturesNeedsARange(t *testing.T) {
	f := newFixture(t)
	if _, err := captures.SpikesWithoutCaptures(context.Background(), f.st, captures.Scope{From: f.t0, To: f.t0}); err == nil {
		t.Error("an empty range: no error")
	}
}

// recordingStore is the other side of store.Store: it keeps the statements
// it is given.
type recordingStore struct {
	store.Store
	execs []string
}

func (r *recordingStore) Exec(_ context.Context, q string, _ ...store.Option) error {
	r.execs = append(r.execs, q)
	return nil
}

// A cluster has no embedded stand-in: the statement Delete sends to one is
// checked by the engine's parser.
func TestDeleteCaptureOnAClusterTargetsTheLocalTables(t *testing.T) {
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	var rec recordingStore
	if err := captures.Delete(ctx, &rec, "cap-'1", captures.OnCluster("fleet", "spikehunt")); err != nil {
		t.Fatal(err)
	}
	want := "DELETE FROM `spikehunt`.`captures_local` ON CLUSTER 'fleet' WHERE capture_id = 'cap-\\'1'"
	if len(rec.execs) != 1 || rec.execs[0] != want {
		t.Fatalf("statements %q, want %q", rec.execs, want)
	}
	if got := count(t, st, "SELECT formatQuery("+store.QuoteString(rec.execs[0])+") != ''"); got != "1" {
		t.Errorf("formatQuery: %s", got)
	}
	if err := captures.Delete(ctx, &rec, "x", captures.OnCluster("fleet", "")); err == nil {
		t.Error("OnCluster without a database: no error")
	}
}

func count(t *testing.T, st store.Store, q string) string {
	t.Helper()
	tab, err := store.Select(context.Background(), st, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return tab.Rows[0][0]
}

// without returns list minus drop, in list's order.
func without(list, drop []string) []string {
	out := []string{}
	for _, s := range list {
		keep := true
		for _, d := range drop {
			keep = keep && s != d
		}
		if keep {
			out = append(out, s)
		}
	}
	return out
}

// A capture's findings (the node's analysis) are written with its row,
// read back with it, and kept when the capture is indexed again without
// them; a capture without findings reads back without any.
func TestTheFindingsOfACaptureAreIndexedWithItAndKept(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	found := &captures.Findings{Verdict: "blocked 998 ms in do_nanosleep (stack …); woken by its timer", BlockingStack: "do_nanosleep ← hrtimer_nanosleep",
		HottestCPU: 4, SoftirqShare: 0.25}
	c := captures.Capture{ID: "cap-f", Host: "h1", Backend: "perf", WindowStart: f.at(10), WindowEnd: f.at(14), Findings: found}
	if _, err := captures.Index(ctx, f.st, c); err != nil {
		t.Fatal(err)
	}
	got, err := captures.Get(ctx, f.st, "cap-f")
	if err != nil || got.Findings == nil || *got.Findings != *found {
		t.Fatalf("findings read back %+v (%v), want %+v", got.Findings, err, found)
	}
	c.Findings = nil
	if _, err := captures.Index(ctx, f.st, c); err != nil {
		t.Fatal(err)
	}
	if got, err := captures.Get(ctx, f.st, "cap-f"); err != nil || got.Findings == nil || *got.Findings != *found {
		t.Errorf("after a re-index without findings: %+v (%v), want them kept", got.Findings, err)
	}
	if _, err := captures.Index(ctx, f.st, captures.Capture{ID: "cap-none", Host: "h1", Backend: "ftrace", WindowStart: f.at(20), WindowEnd: f.at(24)}); err != nil {
		t.Fatal(err)
	}
	if got, err := captures.Get(ctx, f.st, "cap-none"); err != nil || got.Findings != nil {
		t.Errorf("a capture without findings reads back %+v (%v)", got.Findings, err)
	}
}

// The row keeps the Capture object it came from, which the Captures
// dashboard's report link is made of (the capture_id is the arming id,
// not the object's name); the demo's captures have none.
func TestTheCaptureObjectIsIndexedWithItsRow(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := captures.Capture{ID: "checkout-0f3a9c-node-a-bait-1a2b3c4d5e6f7a8b", Host: "h1", Backend: "perf", WindowStart: f.at(10), WindowEnd: f.at(14),
		Namespace: "shop", Name: "checkout-node-a-7"}
	if _, err := captures.Index(ctx, f.st, c); err != nil {
		t.Fatal(err)
	}
	got, err := captures.Get(ctx, f.st, c.ID)
	if err != nil || got.Namespace != "shop" || got.Name != "checkout-node-a-7" {
		t.Fatalf("read back namespace %q, name %q (%v), want shop, checkout-node-a-7", got.Namespace, got.Name, err)
	}
	if _, err := captures.Index(ctx, f.st, captures.Capture{ID: "demo-1", Host: "h1", Backend: "perf", WindowStart: f.at(20), WindowEnd: f.at(24)}); err != nil {
		t.Fatal(err)
	}
	if got, err := captures.Get(ctx, f.st, "demo-1"); err != nil || got.Namespace != "" || got.Name != "" {
		t.Errorf("a capture without an object: %q/%q (%v)", got.Namespace, got.Name, err)
	}
}
