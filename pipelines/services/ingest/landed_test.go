package ingest

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// A crashed ingester wrote its intent for offsets 0–6, and ClickHouse
// recorded the batch's token in its deduplication log, but the part never
// landed: the state a kill between the log and the part's rename leaves
// (landed.go). The test makes that state with a decoy block of one other
// row under the batch's token. The next ingester re-forms the batch, its
// insert is dropped as a repeat, and the check finds the rows missing and
// inserts them: every request once, for spans and for counters.
func TestABatchWhoseTokenLandedWithoutItsPartIsInsertedAgain(t *testing.T) {
	t.Run("spans", func(t *testing.T) {
		p := newPipeline(t, 1)
		p.cfg.MaxRows, p.cfg.MaxDelay = 1_000_000, time.Second
		var recs []*kgo.Record
		for m := range 10 {
			recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Partition: 0, Value: agentSpans(t, "node-1", 100, m*100)})
		}
		p.produce(t, recs...)
		ctx := context.Background()
		if err := writeIntent(ctx, p.st, p.cfg.Group, p.cfg.SpansTopic, 0, intent{0, 6}); err != nil {
			t.Fatal(err)
		}
		decoy := NewRequestRows()
		r := telemetry.Request{Service: "decoy", Endpoint: "/", Status: "200", Start: t0.Add(-time.Minute), Duration: time.Millisecond, Weight: 1}
		binary.BigEndian.PutUint64(r.TraceID[:8], 0xdec0)
		b, err := otlpwire.EncodeSpans(telemetry.Resource{HostName: "decoy"}, []telemetry.Request{r})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := decoy.AppendTraces(b); err != nil {
			t.Fatal(err)
		}
		tok := token(p.cfg.Group, p.cfg.SpansTopic, 0, 0, 6)
		if err := p.st.Insert(ctx, "requests", decoy.Input(), store.WithSetting("insert_deduplication_token", tok)); err != nil {
			t.Fatal(err)
		}

		p.start(t)
		p.waitFor(t, "SELECT count(), uniqExact(trace_id, span_id) FROM requests WHERE service = 'billy'", "1000\t1000")
		p.waitFor(t, fmt.Sprintf("SELECT first_offset, last_offset FROM ingest_intents FINAL WHERE consumer_group = '%s'", p.cfg.Group), "7\t9")
	})
	t.Run("counters", func(t *testing.T) {
		p := newPipeline(t, 1)
		p.cfg.MaxRows, p.cfg.MaxDelay = 1_000_000, time.Second
		var recs []*kgo.Record
		for m := range 6 {
			recs = append(recs, &kgo.Record{Topic: p.cfg.MetricsTopic, Partition: 0, Value: agentCounters(t, "node-1", m)})
		}
		p.produce(t, recs...)
		ctx := context.Background()
		if err := writeIntent(ctx, p.st, p.cfg.Group, p.cfg.MetricsTopic, 0, intent{0, 3}); err != nil {
			t.Fatal(err)
		}
		decoy := NewCounterRows()
		decoy.appendOwn(t0.Add(-time.Minute), 1000, "decoy", "decoy.metric", "", "", 1)
		tok := token(p.cfg.Group, p.cfg.MetricsTopic, 0, 0, 3)
		if err := p.st.Insert(ctx, "counters", decoy.Input(), store.WithSetting("insert_deduplication_token", tok)); err != nil {
			t.Fatal(err)
		}

		p.start(t)
		p.waitFor(t, "SELECT count(), uniqExact(ts_start, cpu) FROM counters WHERE host = 'node-1'", "24\t24")
	})
}

// agentCounters is one agent export request of four CPUs' softirq time
// for second m after t0.
func agentCounters(t testing.TB, host string, m int) []byte {
	t.Helper()
	var pts []telemetry.Point
	for cpu := range 4 {
		start := t0.Add(time.Duration(m) * time.Second)
		pts = append(pts, telemetry.Point{Metric: "system.cpu.time", Unit: "s", Start: start, End: start.Add(time.Second), Value: 0.1,
			Attrs: []telemetry.Attr{telemetry.Int("cpu.logical_number", int64(cpu)), telemetry.Str("cpu.mode", "softirq")}})
	}
	b, err := otlpwire.EncodeMetrics(telemetry.Resource{HostName: host}, pts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
