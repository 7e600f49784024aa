package storecare

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
)

// fleetDay is a range inside one day (yesterday, 10:00–11:00 UTC), so that
// each table's rows fall in one partition, within every TTL.
func fleetDay() time.Time {
	return time.Now().UTC().Truncate(24 * time.Hour).Add(-24*time.Hour + 10*time.Hour)
}

func openStore(t *testing.T, dir string) *store.Embedded {
	t.Helper()
	st, err := store.OpenEmbedded(context.Background(), store.EmbeddedConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func exec(t *testing.T, st store.Store, q string, opts ...store.Option) {
	t.Helper()
	if err := st.Exec(context.Background(), q, opts...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// rows reads a query's rows as lines of tab-separated text.
func rows(t *testing.T, st store.Store, q string) ([]string, error) {
	t.Helper()
	var out []string
	err := st.Query(context.Background(), q, func(b store.Block) error {
		for i := 0; i < b.Rows; i++ {
			var f []string
			for _, c := range b.Columns {
				f = append(f, store.Text(c, i))
			}
			out = append(out, strings.Join(f, "\t"))
		}
		return nil
	})
	return out, err
}

func mustRows(t *testing.T, st store.Store, q string) []string {
	t.Helper()
	r, err := rows(t, st, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return r
}

// loadFleet fills a migrated store with an hour of three hosts' requests
// from start, in several inserts (so latency_1m gets partial rows to
// merge), then merges latency_1m and requests to one part each.
func loadFleet(t *testing.T, st store.Store, start time.Time) {
	t.Helper()
	schemaApply(t, st)
	for i := 0; i < 4; i++ {
		exec(t, st, fmt.Sprintf(`INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, weight)
			SELECT toDateTime64(%d, 6, 'UTC') + toIntervalMillisecond(number * 250 + %d), 'checkout', 'host-' || toString(number %% 3), 'm5', '/pay',
			       toUInt32(1000 + (cityHash64(number, %d) %% 50000)), '200', 1 + (number %% 2)
			FROM numbers(14400)`, start.Unix(), i*60, i))
	}
	exec(t, st, "OPTIMIZE TABLE latency_1m FINAL")
	exec(t, st, "OPTIMIZE TABLE requests FINAL")
}

func schemaApply(t *testing.T, st store.Store) {
	t.Helper()
	if _, err := schema.Apply(context.Background(), st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
}

// minuteTruth is each host-minute's figures as latency_1s holds them.
const minuteTruth = `SELECT host, toStartOfMinute(ts) AS m, sum(weighted_count), sum(kept_count), max(max_us), sum(weighted_sum_us),
	arrayMap(x -> round(x), quantilesTDigestWeightedMerge(0.5, 0.99)(quantiles_us))
	FROM latency_1s GROUP BY host, m ORDER BY host, m`

// minuteRollup is the same figures from latency_1m.
const minuteRollup = `SELECT host, ts AS m, sum(weighted_count), sum(kept_count), max(max_us), sum(weighted_sum_us),
	arrayMap(x -> round(x), quantilesTDigestWeightedMerge(0.5, 0.99)(quantiles_us))
	FROM latency_1m GROUP BY host, m ORDER BY host, m`

// breakPart empties the marks file of table's one active part, as a full
// volume left one, before anything read it (the engine caches marks it
// read). It returns the part's name.
func breakPart(t *testing.T, st store.Store, table string) string {
	t.Helper()
	ps := mustRows(t, st, "SELECT name, path FROM system.parts WHERE database = 'default' AND table = '"+table+"' AND active")
	if len(ps) != 1 {
		t.Fatalf("%s has %d active parts, want 1: %v", table, len(ps), ps)
	}
	name, dir, _ := strings.Cut(ps[0], "\t")
	marks, _ := filepath.Glob(filepath.Join(dir, "*.cmrk*"))
	more, _ := filepath.Glob(filepath.Join(dir, "*.mrk*"))
	marks = append(marks, more...)
	if len(marks) == 0 {
		t.Fatalf("no marks file in %s", dir)
	}
	for _, m := range marks {
		if err := os.Truncate(m, 0); err != nil {
			t.Fatal(err)
		}
	}
	return name
}

// clock is a fake clock the test moves.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newCarer(t *testing.T, st store.Store, dir string, clk *clock, settle time.Duration) (*Carer, *prometheus.Registry, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	c, err := New(st, Config{Dir: dir, Settle: settle, Instance: "store-test", Now: clk.now,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	return c, reg, &log
}

// sameMinutes compares the rollup with the truth: counts, maxima and sums
// exactly, the quantiles within 1 % (digests merged in another order).
func sameMinutes(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("latency_1m has %d host-minutes, latency_1s %d", len(got), len(want))
	}
	for i := range want {
		g, w := strings.Split(got[i], "\t"), strings.Split(want[i], "\t")
		if strings.Join(g[:6], "\t") != strings.Join(w[:6], "\t") {
			t.Fatalf("host-minute %d: latency_1m %q, latency_1s %q", i, got[i], want[i])
		}
		gq, wq := floats(g[6]), floats(w[6])
		for j := range wq {
			if math.Abs(gq[j]-wq[j]) > 0.01*wq[j]+1 {
				t.Fatalf("host-minute %d: quantiles %v, want %v", i, gq, wq)
			}
		}
	}
}

func floats(s string) []float64 {
	var out []float64
	for _, f := range strings.Split(strings.Trim(s, "[]"), ",") {
		v, _ := strconv.ParseFloat(strings.TrimSpace(f), 64)
		out = append(out, v)
	}
	return out
}

func TestABrokenRollupPartIsTakenOutAndItsMinutesRebuiltFromTheSeconds(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	defer st.Close()
	start := fleetDay()
	loadFleet(t, st, start)
	truth := mustRows(t, st, minuteTruth)
	if len(truth) != 3*60 {
		t.Fatalf("latency_1s holds %d host-minutes, want 180", len(truth))
	}
	name := breakPart(t, st, "latency_1m")
	// The range ended 10 minutes ago on the carer's clock, so with a settle
	// of 30 minutes the rebuild waits.
	clk := &clock{start.Add(70 * time.Minute)}
	c, reg, log := newCarer(t, st, dir, clk, 30*time.Minute)
	if err := c.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rs := c.Repairs(); len(rs) != 0 {
		t.Fatalf("repairs before anything read the part: %+v", rs)
	}
	// A reader (the detector, a dashboard) fails on the part; the next
	// round finds it in the engine's errors.
	if _, err := rows(t, st, minuteRollup); err == nil || !strings.Contains(err.Error(), "Code: 246") {
		t.Fatalf("a read of the broken part: %v, want Code: 246 (CORRUPTED_DATA)", err)
	}
	if err := c.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	rs := c.Repairs()
	if len(rs) != 1 || rs[0].Table != "latency_1m" || rs[0].Part != name || rs[0].State != statePending {
		t.Fatalf("repairs after the first round: %+v, want latency_1m/%s pending\n%s", rs, name, log)
	}
	if !rs[0].From.Equal(start) || !rs[0].To.Equal(start.Add(59*time.Minute)) {
		t.Errorf("the part's range: %v – %v, want %v – %v", rs[0].From, rs[0].To, start, start.Add(59*time.Minute))
	}
	if got := mustRows(t, st, "SELECT count() FROM system.detached_parts WHERE table = 'latency_1m' AND name = '"+name+"'"); got[0] != "1" {
		t.Fatalf("the part is not in latency_1m's detached parts")
	}
	if got := mustRows(t, st, "SELECT count() FROM latency_1m"); got[0] != "0" {
		t.Fatalf("latency_1m holds %s rows while its range waits, want 0 (readable, empty)", got[0])
	}
	if v := testutil.ToFloat64(c.m.detached.WithLabelValues("latency_1m")); v != 1 {
		t.Errorf("spikehunt_store_parts_detached_total{table=latency_1m} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(c.m.pending); v != 1 {
		t.Errorf("spikehunt_store_repairs_pending = %v, want 1", v)
	}
	_ = reg

	// A store restarted in between: a new carer finds the repair in the
	// journal and rebuilds it once the range settled.
	clk.t = start.Add(100 * time.Minute)
	c2, _, log2 := newCarer(t, st, dir, clk, 30*time.Minute)
	if err := c2.Round(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, log2)
	}
	rs = c2.Repairs()
	if len(rs) != 1 || rs[0].State != stateRebuilt {
		t.Fatalf("repairs after the range settled: %+v, want rebuilt\n%s", rs, log2)
	}
	sameMinutes(t, mustRows(t, st, minuteRollup), truth)
	// Nothing counted twice downstream or upstream.
	if a, b := mustRows(t, st, "SELECT sum(weighted_count) FROM latency_1s"), mustRows(t, st, "SELECT sum(weight) FROM requests"); a[0] != b[0] {
		t.Errorf("latency_1s sums %s requests, requests %s", a[0], b[0])
	}
	if got := mustRows(t, st, "SELECT count() FROM system.tables WHERE name LIKE 'spikehunt_care_%'"); got[0] != "0" {
		t.Errorf("the scratch table was left behind")
	}
	c2.self.Flush(context.Background())
	got := mustRows(t, st, "SELECT metric, device, sum(value) FROM counters WHERE host = 'store-test' AND metric LIKE 'spikehunt.store.parts.%' GROUP BY metric, device ORDER BY metric")
	want := []string{"spikehunt.store.parts.detached\tlatency_1m\t1", "spikehunt.store.parts.rebuilt\tlatency_1m\t1"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("counters rows: %q, want %q", got, want)
	}
	if got := mustRows(t, st, "SELECT count() FROM counters WHERE host = 'store-test' AND metric = 'spikehunt.store.volume.free_bytes' AND value > 0"); got[0] == "0" {
		t.Errorf("no volume free rows in counters")
	}
	// The next round has nothing to do.
	if err := c2.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(c2.Repairs()); n != 1 {
		t.Errorf("%d repairs after a quiet round, want 1", n)
	}
}

func TestABrokenPartOfATableNoViewFeedsIsTakenOutAndItsRowsCountedLost(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	defer st.Close()
	start := fleetDay()
	loadFleet(t, st, start)
	seconds := mustRows(t, st, "SELECT count(), sum(weighted_count) FROM latency_1s")
	name := breakPart(t, st, "requests")
	clk := &clock{start.Add(3 * time.Hour)}
	c, _, log := newCarer(t, st, dir, clk, time.Minute)
	if err := c.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := rows(t, st, "SELECT max(latency_us) FROM requests"); err == nil {
		t.Fatal("a read of the broken requests part succeeded")
	}
	if err := c.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	rs := c.Repairs()
	if len(rs) != 1 || rs[0].Part != name || rs[0].State != stateLost || rs[0].Rows != 4*14400 {
		t.Fatalf("repairs: %+v, want requests/%s lost with 57600 rows\n%s", rs, name, log)
	}
	if v := testutil.ToFloat64(c.m.rowsLost.WithLabelValues("requests")); v != 4*14400 {
		t.Errorf("spikehunt_store_rows_lost_total{table=requests} = %v, want 57600", v)
	}
	if got := mustRows(t, st, "SELECT count() FROM requests"); got[0] != "0" {
		t.Errorf("requests holds %s rows, want 0 and readable", got[0])
	}
	if got := mustRows(t, st, "SELECT count(), sum(weighted_count) FROM latency_1s"); got[0] != seconds[0] {
		t.Errorf("latency_1s changed: %v, was %v", got, seconds)
	}
	if !strings.Contains(log.String(), "are lost: no view feeds its table") {
		t.Errorf("the log does not say the rows are lost:\n%s", log)
	}
}

func TestAPartTheEngineTookOutWhenItBootedIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	start := fleetDay()
	loadFleet(t, st, start)
	truth := mustRows(t, st, minuteTruth)
	name := breakPart(t, st, "latency_1m")
	st.Close()

	st = openStore(t, dir) // the engine boots again and detaches the part
	defer st.Close()
	if got := mustRows(t, st, "SELECT ifNull(reason, '') FROM system.detached_parts WHERE table = 'latency_1m' AND endsWith(name, '_"+name+"')"); len(got) != 1 || !strings.HasPrefix(got[0], "broken") {
		t.Fatalf("the engine did not take the part out when it booted: %v; detached: %v; active: %v", got,
			mustRows(t, st, "SELECT name, reason FROM system.detached_parts"), mustRows(t, st, "SELECT table, name FROM system.parts WHERE active AND table LIKE 'latency%'"))
	}
	clk := &clock{start.Add(3 * time.Hour)}
	c, _, log := newCarer(t, st, dir, clk, time.Minute)
	if err := c.Round(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	rs := c.Repairs()
	if len(rs) != 1 || rs[0].State != stateRebuilt || !rs[0].From.Equal(start) {
		t.Fatalf("repairs: %+v, want latency_1m rebuilt from %v\n%s", rs, start, log)
	}
	sameMinutes(t, mustRows(t, st, minuteRollup), truth)
	// A second carer (the next restart) finds the repair done in the
	// journal and does not rebuild it again.
	c2, _, _ := newCarer(t, st, dir, clk, time.Minute)
	if err := c2.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rs := c2.Repairs(); len(rs) != 1 || rs[0].State != stateRebuilt {
		t.Fatalf("repairs after another restart: %+v", rs)
	}
	sameMinutes(t, mustRows(t, st, minuteRollup), truth)
}

func TestAJournalThatCannotBeReadIsSetAsideAndReported(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	defer st.Close()
	schemaApply(t, st)
	p := filepath.Join(dir, journalDir, journalFile)
	os.MkdirAll(filepath.Dir(p), 0o700)
	os.WriteFile(p, []byte(`[{"table": "latency_1m", "part": `), 0o600)
	c, _, log := newCarer(t, st, dir, &clock{time.Now()}, time.Minute)
	if err := c.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p + ".bad"); err != nil {
		t.Errorf("the journal was not set aside: %v", err)
	}
	if !strings.Contains(log.String(), "cannot be read") {
		t.Errorf("the log does not report the journal:\n%s", log)
	}
}
