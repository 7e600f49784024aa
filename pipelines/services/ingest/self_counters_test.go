package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// An ingester writes its own figures into counters as it goes: the rows it
// stored by destination add up to what the tables hold, the dead letters
// by topic and reason, and the lag reads 0 once it has caught up. Its rows
// are inserts of their own: the agents' counters are exactly the points
// they sent.
func TestIngesterWritesItsOwnCounters(t *testing.T) {
	p := newPipeline(t, 2)
	p.cfg.ReportEvery = 300 * time.Millisecond
	const msgs, per = 12, 150
	var recs []*kgo.Record
	for m := range msgs {
		host := "node-" + strconv.Itoa(m%3)
		recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte(host), Value: agentSpans(t, host, per, m*per)})
	}
	recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte("node-0"), Value: []byte("not protobuf \xff\xff")},
		&kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte("node-1"), Value: []byte("nor this \xff\xff\xff")})
	mb, err := otlpwire.EncodeMetrics(telemetry.Resource{HostName: "node-0"}, []telemetry.Point{
		{Metric: "system.cpu.time", Unit: "s", Start: t0, End: t0.Add(time.Second), Value: 0.5, Attrs: []telemetry.Attr{telemetry.Int("cpu.logical_number", 0)}},
		telemetry.Gauge("spikehunt.memory.slab", "By", t0, 1<<20),
	})
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, &kgo.Record{Topic: p.cfg.MetricsTopic, Key: []byte("node-0"), Value: mb})
	p.produce(t, recs...)
	p.start(t)

	p.waitFor(t, "SELECT count() FROM requests", strconv.Itoa(msgs*per))
	own := "FROM counters WHERE host = '" + p.cfg.Instance + "'"
	p.waitFor(t, "SELECT device, sum(value) "+own+" AND metric = 'spikehunt.ingest.rows' GROUP BY device ORDER BY device",
		fmt.Sprintf("counters\t2\ndlq\t2\nrequests\t%d", msgs*per))
	p.waitFor(t, "SELECT device, mode, sum(value) "+own+" AND metric = 'spikehunt.ingest.dlq' GROUP BY device, mode ORDER BY device, mode",
		p.cfg.MetricsTopic+"\t\t0\n"+p.cfg.SpansTopic+"\t\t0\n"+p.cfg.SpansTopic+"\tprotobuf\t2")
	p.waitFor(t, "SELECT device, argMax(value, ts_start) "+own+" AND metric = 'spikehunt.ingest.lag' GROUP BY device ORDER BY device",
		p.cfg.MetricsTopic+"\t0\n"+p.cfg.SpansTopic+"\t0")
	// Deltas have an interval, gauges none; nothing is per CPU.
	if got := p.query(t, "SELECT metric, min(interval_ms) > 0, max(interval_ms) > 0, min(cpu), max(cpu) "+own+" GROUP BY metric ORDER BY metric"); got !=
		"spikehunt.ingest.dlq\t1\t1\t-1\t-1\nspikehunt.ingest.lag\t0\t0\t-1\t-1\nspikehunt.ingest.rows\t1\t1\t-1\t-1" {
		t.Errorf("own rows by metric (interval > 0, cpu):\n%s", got)
	}
	// The deltas tile time: each interval starts where the last one ended.
	if got := p.query(t, `SELECT countIf(gap > 50) FROM (
		SELECT toUnixTimestamp64Milli(ts_start) - lagInFrame(toUnixTimestamp64Milli(ts_start) + interval_ms) OVER w AS gap, row_number() OVER w AS rn
		`+own+` AND metric = 'spikehunt.ingest.rows' AND device = 'requests'
		WINDOW w AS (ORDER BY ts_start ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)) WHERE rn > 1`); got != "0" {
		t.Errorf("%s gaps between consecutive rows intervals", got)
	}
	if got := p.query(t, "SELECT metric, value FROM counters WHERE host = 'node-0' ORDER BY metric"); got != "spikehunt.memory.slab\t1048576\nsystem.cpu.time\t0.5" {
		t.Errorf("the agent's counters: %q", got)
	}
}

// The lag gauge sums the partitions of a topic this instance holds, as of
// their last fetch, and forgets the partitions it lost.
func TestOwnLagSumsTheHeldPartitions(t *testing.T) {
	st := testenv.ClickHouse(t)
	ctx := context.Background()
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	in, err := NewWithMemory(Config{Instance: "ingest-lag"}, st, NewMemorySource(4), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	lags := in.own.lags
	lags[topicPartition{DefaultSpansTopic, 0}] = 40
	lags[topicPartition{DefaultSpansTopic, 3}] = 2
	lags[topicPartition{DefaultMetricsTopic, 1}] = 7
	in.report(ctx)
	in.dropped(map[string][]int32{DefaultSpansTopic: {0}})
	in.report(ctx)
	tab, err := selectStrings(ctx, st, "SELECT device, groupArray(value) FROM (SELECT device, value FROM counters WHERE host = 'ingest-lag' AND metric = 'spikehunt.ingest.lag' ORDER BY ts_start) GROUP BY device ORDER BY device")
	if err != nil {
		t.Fatal(err)
	}
	if want := "otlp_metrics [7 7]\notlp_spans [42 2]"; tab != want {
		t.Errorf("lag by topic over two reports:\n%s\nwant\n%s", tab, want)
	}
}

// Own rows that the store refuses wait for the next Flush and then go in
// once, in their own block with its token.
func TestSelfCountersWaitForTheStore(t *testing.T) {
	st := testenv.ClickHouse(t)
	ctx := context.Background()
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	w := NewSelfCounters(st, "detect-1")
	now := time.Now()
	w.Gauge("spikehunt.detect.pass_seconds", "", "total", now, 1.5)
	w.Delta("spikehunt.detect.spikes", "", "", now.Add(-30*time.Second), now, 4)
	if err := st.Exec(ctx, "RENAME TABLE counters TO counters_away"); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err == nil {
		t.Fatal("Flush with no counters table: no error")
	}
	w.Gauge("spikehunt.detect.pass_seconds", "", "total", now.Add(30*time.Second), 1.25)
	if err := st.Exec(ctx, "RENAME TABLE counters_away TO counters"); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil { // nothing new: nothing inserted again
		t.Fatal(err)
	}
	got, err := selectStrings(ctx, st, "SELECT host, metric, cpu, device, mode, interval_ms, value FROM counters ORDER BY ts_start, metric")
	if err != nil {
		t.Fatal(err)
	}
	want := "detect-1 spikehunt.detect.spikes -1   30000 4\n" +
		"detect-1 spikehunt.detect.pass_seconds -1  total 0 1.5\n" +
		"detect-1 spikehunt.detect.pass_seconds -1  total 0 1.25"
	if got != want {
		t.Errorf("rows:\n%s\nwant\n%s", got, want)
	}
}

// selectStrings is q's rows, a line each, columns separated by a space.
func selectStrings(ctx context.Context, st store.Store, q string) (string, error) {
	tab, err := store.Select(ctx, st, q)
	if err != nil {
		return "", err
	}
	lines := make([]string, len(tab.Rows))
	for i, r := range tab.Rows {
		lines[i] = strings.Join(r, " ")
	}
	return strings.Join(lines, "\n"), nil
}
