package schema

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/google/go-cmp/cmp"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// requestBatch is a block of requests rows as the ingest would write it.
type requestBatch struct {
	ts                               *proto.ColDateTime64
	service, host, hwClass, endpoint *proto.ColLowCardinality[string]
	status                           *proto.ColLowCardinality[string]
	latency, thread, weight          proto.ColUInt32
	traceID, spanID                  proto.ColFixedStr
}

func newRequestBatch() *requestBatch {
	b := &requestBatch{
		ts:      new(proto.ColDateTime64).WithPrecision(proto.PrecisionMicro),
		service: new(proto.ColStr).LowCardinality(), host: new(proto.ColStr).LowCardinality(),
		hwClass: new(proto.ColStr).LowCardinality(), endpoint: new(proto.ColStr).LowCardinality(),
		status: new(proto.ColStr).LowCardinality(),
	}
	b.traceID.SetSize(16)
	b.spanID.SetSize(8)
	return b
}

// add appends n requests of host at ts, each latencyUS long with weight.
func (b *requestBatch) add(n int, host, hwClass string, ts time.Time, latencyUS, weight uint32) {
	for i := 0; i < n; i++ {
		b.ts.Append(ts.Add(time.Duration(i) * time.Microsecond))
		b.service.Append("checkout")
		b.host.Append(host)
		b.hwClass.Append(hwClass)
		b.endpoint.Append("/v1/cart")
		b.status.Append("200")
		b.latency.Append(latencyUS)
		b.thread.Append(uint32(4000 + i%8))
		b.weight.Append(weight)
		id := make([]byte, 16)
		binary.BigEndian.PutUint64(id, uint64(b.latency.Rows()))
		b.traceID.Append(id)
		b.spanID.Append(id[:8])
	}
}

func (b *requestBatch) input() proto.Input {
	return proto.Input{
		{Name: "ts", Data: b.ts}, {Name: "service", Data: b.service}, {Name: "host", Data: b.host},
		{Name: "hw_class", Data: b.hwClass}, {Name: "endpoint", Data: b.endpoint},
		{Name: "latency_us", Data: &b.latency}, {Name: "status", Data: b.status},
		{Name: "trace_id", Data: &b.traceID}, {Name: "span_id", Data: &b.spanID},
		{Name: "thread_id", Data: &b.thread}, {Name: "weight", Data: &b.weight},
	}
}

func insertRequests(t *testing.T, st store.Store, b *requestBatch, opts ...store.Option) {
	t.Helper()
	if err := st.Insert(context.Background(), "requests", b.input(), opts...); err != nil {
		t.Fatal(err)
	}
}

var t0 = testenv.RecentDay().Add(3*time.Hour + 100*time.Millisecond)

// day is t0's day as the store prints it.
var day = t0.Format(time.DateOnly)

func TestLatency1sRollsUpWeightedRequestsPerHostAndSecond(t *testing.T) {
	ctx := context.Background()
	st := openDB(t)
	if _, err := Apply(ctx, st, Options{}); err != nil {
		t.Fatal(err)
	}
	// h1's first second arrives in two blocks, so latency_1s holds two
	// partial states for it until a merge. Sampled fast requests carry
	// weight 9: by rows most of h1's requests are 1 ms, by weight most are 5 ms.
	first := newRequestBatch()
	first.add(500, "h1", "gen9", t0, 1000, 1)
	first.add(10, "h2", "gen10", t0, 300, 1)
	insertRequests(t, st, first)
	second := newRequestBatch()
	second.add(100, "h1", "gen9", t0.Add(500*time.Millisecond), 5000, 9)
	// Three slow requests, always kept: 0.2 % of the weight, so p99.9 is theirs.
	second.add(3, "h1", "gen9", t0.Add(800*time.Millisecond), 900_000, 1)
	second.add(1, "h1", "gen9", t0.Add(time.Second), 2000, 2)
	insertRequests(t, st, second)

	type second1s struct {
		Host, TS                   string
		Weighted, Kept, Max, SumUS uint64
		P50, P90, P99, P999        float64
	}
	read := func() []second1s {
		var out []second1s
		for _, r := range queryRows(t, st, `
			SELECT host, ts, sum(weighted_count), sum(kept_count), max(max_us), sum(weighted_sum_us),
			       arrayStringConcat(quantilesTDigestWeightedMerge(0.5, 0.9, 0.99, 0.999)(quantiles_us), ',')
			FROM latency_1s WHERE service = 'checkout' GROUP BY host, ts ORDER BY host, ts`) {
			f := strings.Split(strings.ReplaceAll(r, ",", "\t"), "\t")
			u := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 10, 64); return v }
			q := func(i int) float64 { v, _ := strconv.ParseFloat(f[i], 64); return v }
			out = append(out, second1s{f[0], f[1], u(2), u(3), u(4), u(5), q(6), q(7), q(8), q(9)})
		}
		return out
	}
	got := read()
	t.Logf("%+v", got)
	want := []second1s{
		{Host: "h1", TS: day + " 03:00:00", Weighted: 500 + 900 + 3, Kept: 603, Max: 900_000,
			SumUS: 500*1000 + 900*5000 + 3*900_000, P50: 5000, P90: 5000, P99: 5000, P999: 900_000},
		{Host: "h1", TS: day + " 03:00:01", Weighted: 2, Kept: 1, Max: 2000, SumUS: 4000,
			P50: 2000, P90: 2000, P99: 2000, P999: 2000},
		{Host: "h2", TS: day + " 03:00:00", Weighted: 10, Kept: 10, Max: 300, SumUS: 3000,
			P50: 300, P90: 300, P99: 300, P999: 300},
	}
	// t-digest interpolates between centroids: 5 % is far tighter than the
	// 1 ms-vs-5 ms gap an unweighted median would show.
	approx := cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) <= 0.05*math.Max(math.Abs(a), math.Abs(b)) })
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Fatalf("latency_1s (-want +got):\n%s", diff)
	}

	// A background merge collapses the partial states into one row per key
	// without changing what the -Merge query reads.
	if err := st.Exec(ctx, "OPTIMIZE TABLE latency_1s FINAL"); err != nil {
		t.Fatal(err)
	}
	if n := queryOne(t, st, "SELECT count() FROM latency_1s"); n != "3" {
		t.Errorf("latency_1s has %s rows after OPTIMIZE FINAL, want 3 (one per host and second)", n)
	}
	if diff := cmp.Diff(want, read(), approx); diff != "" {
		t.Errorf("latency_1s after a merge (-want +got):\n%s", diff)
	}
}

func TestLatency1sCountsEachSecondsRequestsByLatencyBin(t *testing.T) {
	ctx := context.Background()
	st := openDB(t)
	if _, err := Apply(ctx, st, Options{}); err != nil {
		t.Fatal(err)
	}
	// One second in two blocks: bins count the always-kept (weight 1)
	// requests, summed across blocks and merges; requests under 1 ms and
	// sampled fast ones are left out.
	first := newRequestBatch()
	first.add(5, "h1", "gen9", t0, 1000, 1) // bin ⌊8 log2 1000⌋ = 79
	first.add(7, "h1", "gen9", t0, 300, 1)  // under 1 ms
	first.add(1, "h1", "gen9", t0, 0, 1)    // no log2 of 0
	insertRequests(t, st, first)
	second := newRequestBatch()
	second.add(2, "h1", "gen9", t0.Add(500*time.Millisecond), 5000, 30)   // sampled: no bin
	second.add(3, "h1", "gen9", t0.Add(800*time.Millisecond), 900_000, 1) // bin 158
	second.add(1, "h1", "gen9", t0.Add(850*time.Millisecond), 1010, 1)    // bin 79 too
	insertRequests(t, st, second)
	q := "SELECT toString(sumMap(latency_hist)) FROM latency_1s WHERE host = 'h1' AND ts = " +
		"toDateTime('" + day + " 03:00:00', 'UTC')"
	const want = "([79,158],[6,3])"
	if got := queryOne(t, st, q); got != want {
		t.Errorf("latency_hist of h1's second = %s, want %s", got, want)
	}
	if err := st.Exec(ctx, "OPTIMIZE TABLE latency_1s FINAL"); err != nil {
		t.Fatal(err)
	}
	if got := queryOne(t, st, "SELECT toString(latency_hist) FROM latency_1s WHERE host = 'h1'"); got != want {
		t.Errorf("latency_hist after a merge = %s, want %s", got, want)
	}
}

func TestARetriedInsertWithTheSameTokenIsDroppedAndDoesNotCountTwiceInTheRollup(t *testing.T) {
	ctx := context.Background()
	st := openDB(t)
	if _, err := Apply(ctx, st, Options{}); err != nil {
		t.Fatal(err)
	}
	b := newRequestBatch()
	b.add(100, "h1", "gen9", t0, 1000, 4)
	insertRequests(t, st, b, store.WithSetting("insert_deduplication_token", "otlp_spans/3/1200"))
	insertRequests(t, st, b, store.WithSetting("insert_deduplication_token", "otlp_spans/3/1200"))
	got := queryOne(t, st, "SELECT (SELECT count() FROM requests), (SELECT sum(weighted_count) FROM latency_1s)")
	if got != "100\t400" {
		t.Errorf("after a retried insert: requests rows, latency_1s weighted count = %q, want 100, 400", got)
	}
	insertRequests(t, st, b, store.WithSetting("insert_deduplication_token", "otlp_spans/3/1201"))
	got = queryOne(t, st, "SELECT (SELECT count() FROM requests), (SELECT sum(weighted_count) FROM latency_1s)")
	if got != "200\t800" {
		t.Errorf("after a new batch: requests rows, latency_1s weighted count = %q, want 200, 800", got)
	}

	var (
		ts                       = new(proto.ColDateTime64).WithPrecision(proto.PrecisionMicro)
		interval                 proto.ColUInt32
		host, metric, device, md = new(proto.ColStr).LowCardinality(), new(proto.ColStr).LowCardinality(), new(proto.ColStr).LowCardinality(), new(proto.ColStr).LowCardinality()
		cpu                      proto.ColInt16
		value                    proto.ColFloat64
	)
	for c := int16(0); c < 4; c++ {
		ts.Append(t0)
		interval.Append(1003)
		host.Append("h1")
		metric.Append("system.cpu.time")
		device.Append("")
		md.Append("softirq")
		cpu.Append(c)
		value.Append(1.0)
	}
	cols := proto.Input{{Name: "ts_start", Data: ts}, {Name: "interval_ms", Data: &interval}, {Name: "host", Data: host},
		{Name: "metric", Data: metric}, {Name: "cpu", Data: &cpu}, {Name: "device", Data: device}, {Name: "mode", Data: md}, {Name: "value", Data: &value}}
	for i := 0; i < 2; i++ {
		if err := st.Insert(ctx, "counters", cols, store.WithSetting("insert_deduplication_token", "otlp_metrics/0/77")); err != nil {
			t.Fatal(err)
		}
	}
	if n := queryOne(t, st, "SELECT count() FROM counters"); n != "4" {
		t.Errorf("counters has %s rows after a retried insert, want 4", n)
	}
}

// latency_1m is latency_1s per minute: the same sums, max and merged
// digests, whichever blocks the seconds arrived in.
func TestLatency1mRollsUpLatency1sPerMinute(t *testing.T) {
	ctx := context.Background()
	st := openDB(t)
	if _, err := Apply(ctx, st, Options{}); err != nil {
		t.Fatal(err)
	}
	// Two minutes of h1 over three blocks (one minute split across two),
	// and a slow second in the second minute.
	for i, block := range [][2]int{{0, 40}, {40, 60}, {60, 120}} {
		b := newRequestBatch()
		for s := block[0]; s < block[1]; s++ {
			lat := uint32(2000 + 10*s)
			if s == 90 {
				lat = 1_000_000
			}
			b.add(5, "h1", "gen9", t0.Add(time.Duration(s)*time.Second), lat, uint32(1+i))
		}
		insertRequests(t, st, b)
	}
	const perMinute = `SELECT toStartOfMinute(ts) AS m, sum(weighted_count), sum(kept_count), max(max_us), sum(weighted_sum_us),
		toString(sumMap(latency_hist)), arrayStringConcat(arrayMap(q -> toString(round(q)), quantilesTDigestWeightedMerge(0.5, 0.99)(quantiles_us)), ',')
		FROM %s GROUP BY m ORDER BY m`
	want := queryRows(t, st, strings.Replace(perMinute, "%s", "latency_1s", 1))
	got := queryRows(t, st, strings.Replace(perMinute, "%s", "latency_1m", 1))
	if len(want) != 2 {
		t.Fatalf("latency_1s has %d minutes, want 2: %v", len(want), want)
	}
	// Sums, max and histograms are exact; merged digests agree within
	// t-digest's error.
	for i := range want {
		w, g := strings.Split(want[i], "\t"), strings.Split(got[i], "\t")
		if strings.Join(w[:6], " ") != strings.Join(g[:6], " ") {
			t.Errorf("minute %d: latency_1m %v, latency_1s %v", i, g, w)
		}
		wq, gq := strings.Split(w[6], ","), strings.Split(g[6], ",")
		for k := range wq {
			a, _ := strconv.ParseFloat(wq[k], 64)
			b, _ := strconv.ParseFloat(gq[k], 64)
			if math.Abs(a-b) > 0.05*math.Max(a, b) {
				t.Errorf("minute %d quantile %d: latency_1m %v, latency_1s %v", i, k, b, a)
			}
		}
	}
	if w := strings.Split(want[0], "\t"); w[5] == "([],[])" {
		t.Errorf("the first minute's weight-1 requests are in no histogram bin: %v", w)
	}
	if n := queryOne(t, st, "SELECT max(max_us) FROM latency_1m WHERE ts = toStartOfMinute(toDateTime('"+day+" 03:01:00', 'UTC'))"); n != "1000000" {
		t.Errorf("the slow second's max in the second minute: %s", n)
	}
}
