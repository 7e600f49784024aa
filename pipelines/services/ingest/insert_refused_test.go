package ingest

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// run starts an ingester on p's config and st until the test ends, and
// returns it (its metrics, its health) and how to stop it early.
func (p *pipeline) run(t *testing.T, st store.Store) (*Ingester, func()) {
	t.Helper()
	in, err := New(p.cfg, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return in, stop
}

// centurySpans is what the agent exports for a node where one app sent
// 120 SERVER spans one per day starting in 2001, beside good requests
// of other apps (trace ids from id).
func centurySpans(t testing.TB, host string, good, id int) []byte {
	t.Helper()
	var reqs []telemetry.Request
	for i := range 120 {
		r := telemetry.Request{Service: "squatter", Endpoint: "/day", Status: "200", Weight: 1,
			Start: time.Date(2001, 1, 1, 12, 0, 0, 0, time.UTC).AddDate(0, 0, i), Duration: time.Millisecond}
		binary.BigEndian.PutUint64(r.TraceID[:8], 0xdead)
		binary.BigEndian.PutUint64(r.TraceID[8:], uint64(id*1000+i))
		binary.BigEndian.PutUint64(r.SpanID[:], uint64(i+1))
		reqs = append(reqs, r)
	}
	for i := range good {
		r := telemetry.Request{Service: "billy", Endpoint: "/v1/item/0", Status: "200", Weight: 10,
			Start: t0.Add(time.Duration(id+i) * time.Millisecond), Duration: time.Millisecond}
		binary.BigEndian.PutUint64(r.TraceID[8:], uint64(id+i))
		binary.BigEndian.PutUint64(r.SpanID[:], uint64(id+i))
		reqs = append(reqs, r)
	}
	b, err := otlpwire.EncodeSpans(telemetry.Resource{HostName: host, NodeName: host, HWClass: "gen5"}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// deadLetters reads the dead-letter topic until it holds n records, and
// returns their headers by source offset.
func (p *pipeline) deadLetters(t *testing.T, n int) map[string]map[string]string {
	t.Helper()
	cl, err := p.k.Client(kgo.ConsumeTopics(p.cfg.DLQTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(got) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			got[h["spikehunt.source.partition"]+"/"+h["spikehunt.source.offset"]] = h
		})
	}
	if len(got) < n {
		t.Fatalf("%d dead letters, want %d: %v", len(got), n, got)
	}
	return got
}

// One agent export request holding 120 SERVER spans,
// one per day since 2001, used to stall its partition for good (the block
// spans more than 100 day partitions: ClickHouse code 252, retried
// forever). Now its rows outside the accepted window (the requests TTL
// back, an hour ahead) are refused, the message goes to the dead-letter
// topic with reason timestamp, its good rows and the messages around it
// land exactly once, and the partition moves on.
func TestACenturyOfSpansInOneRequestIsDeadLetteredAndThePartitionMovesOn(t *testing.T) {
	p := newPipeline(t, 1)
	var recs []*kgo.Record
	for m := range 5 {
		recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte("node-1"), Value: agentSpans(t, "node-1", 100, m*100)})
	}
	recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte("node-1"), Value: centurySpans(t, "node-1", 30, 500)})
	for m := range 5 {
		recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte("node-1"), Value: agentSpans(t, "node-1", 100, 1000+m*100)})
	}
	p.produce(t, recs...)
	in, _ := p.run(t, p.st)

	p.waitFor(t, "SELECT count(), uniqExact(trace_id, span_id), countIf(service = 'squatter') FROM requests", "1030\t1030\t0")
	dl := p.deadLetters(t, 1)
	h := dl["0/5"]
	if h["spikehunt.dlq.reason"] != "timestamp" || h["spikehunt.dlq.partial"] != "true" ||
		!strings.Contains(h["spikehunt.dlq.detail"], "120 rows outside") || !strings.Contains(h["spikehunt.dlq.detail"], "other 30 rows ingested") {
		t.Errorf("dead letters: %v, want offset 5 with reason timestamp, partial, 120 refused and 30 ingested", dl)
	}
	// The partition moved on: its offsets are committed past the last
	// message, and a message produced now lands too.
	p.produce(t, &kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte("node-1"), Value: agentSpans(t, "node-1", 10, 5000)})
	p.waitFor(t, "SELECT count(), uniqExact(trace_id, span_id) FROM requests", "1040\t1040")
	if got := testutil.ToFloat64(in.m.refused.WithLabelValues("requests", badTimestamp)); got != 120 {
		t.Errorf("spikehunt_ingest_rows_refused_total{table=requests,reason=timestamp} = %v, want 120", got)
	}
	if got := testutil.ToFloat64(in.m.deadLetters.WithLabelValues(badTimestamp)); got != 1 {
		t.Errorf("spikehunt_ingest_dead_letters_total{reason=timestamp} = %v, want 1", got)
	}
}

// A permanent insert error that the time window does not catch (here
// the window is opened, so the century of days reaches ClickHouse, which
// refuses the block with code 252) splits the batch down to the messages
// it is about: those are dead-lettered with the reason, every other row
// lands exactly once.
func TestAnInsertClickHouseRefusesIsSplitDownToItsOffendingMessages(t *testing.T) {
	p := newPipeline(t, 1)
	p.cfg.MaxAge, p.cfg.MaxAhead = -1, -1
	p.cfg.MaxRows, p.cfg.MaxDelay = 1_000_000, time.Second // one batch
	var recs []*kgo.Record
	for m := range 24 {
		v := agentSpans(t, "node-1", 100, m*100)
		if m == 3 || m == 11 || m == 12 {
			v = centurySpans(t, "node-1", 0, m*100)
		}
		recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte("node-1"), Value: v})
	}
	p.produce(t, recs...)
	in, _ := p.run(t, p.st)
	p.waitFor(t, "SELECT count(), uniqExact(trace_id, span_id), countIf(service = 'squatter') FROM requests", "2100\t2100\t0")
	dl := p.deadLetters(t, 3)
	for _, off := range []string{"0/3", "0/11", "0/12"} {
		if dl[off]["spikehunt.dlq.reason"] != "too_many_partitions" || !strings.Contains(dl[off]["spikehunt.dlq.detail"], "ClickHouse refused") {
			t.Errorf("dead letter %s: %v, want reason too_many_partitions", off, dl[off])
		}
	}
	if len(dl) != 3 {
		t.Errorf("dead letters: %v, want offsets 3, 11 and 12", dl)
	}
	if got := testutil.ToFloat64(in.m.splits.WithLabelValues("requests")); got < 3 {
		t.Errorf("%v splits, want at least 3 (the batch, and halves down to each offender)", got)
	}
}

// crashAfterInserts is the real store that ends its ingester's Run (as a
// crash would: nothing after it happens) once n inserts landed.
type crashAfterInserts struct {
	store.Store
	n, done atomic.Int64
	crash   func()
}

func (s *crashAfterInserts) Insert(ctx context.Context, table string, input proto.Input, opts ...store.Option) error {
	if err := s.Store.Insert(ctx, table, input, opts...); err != nil {
		return err
	}
	if s.done.Add(1) == s.n.Load() {
		go s.crash()
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// A batch split in the middle of its handshake, the ingester gone after
// some halves landed and before the commit: the next one re-forms the
// batch from its intent, splits it the same way, and the halves' tokens
// make the halves that landed no-ops. The control run without tokens
// duplicates them, which proves the test can fail.
func TestASplitBatchIsExactlyOnceAcrossACrashMidSplit(t *testing.T) {
	for _, dedup := range []bool{true, false} {
		t.Run(fmt.Sprintf("dedup=%v", dedup), func(t *testing.T) {
			p := newPipeline(t, 1)
			p.cfg.MaxAge, p.cfg.MaxAhead, p.cfg.NoDedup = -1, -1, !dedup
			p.cfg.MaxRows, p.cfg.MaxDelay = 1_000_000, time.Second
			var recs []*kgo.Record
			for m := range 16 {
				v := agentSpans(t, "node-1", 100, m*100)
				if m == 13 {
					v = centurySpans(t, "node-1", 0, m*100)
				}
				recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte("node-1"), Value: v})
			}
			p.produce(t, recs...)

			// Halves [0-7] and [8-11] land, then the crash: [12-13] is
			// split again and [14-15] are still to come.
			st := &crashAfterInserts{Store: p.st}
			st.n.Store(2)
			_, stop := p.run(t, st)
			st.crash = stop
			deadline := time.Now().Add(30 * time.Second)
			for st.done.Load() < 2 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			stop()
			if got := p.query(t, "SELECT count() FROM requests"); got != "1200" {
				t.Fatalf("%s rows after the crash, want 1200 (two halves)", got)
			}
			p.run(t, p.st)
			if dedup {
				p.waitFor(t, "SELECT count(), uniqExact(trace_id, span_id) FROM requests", "1500\t1500")
			} else {
				p.waitFor(t, "SELECT count(), uniqExact(trace_id, span_id) FROM requests", "2700\t1500")
			}
		})
	}
}
