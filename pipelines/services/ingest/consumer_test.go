package ingest

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/fakeclock"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

var topicSeq atomic.Int64

// pipeline is one test's broker topics, database and ingest config.
type pipeline struct {
	k   *testenv.Kafka
	st  *store.Embedded
	cfg Config
}

func newPipeline(t *testing.T, partitions int32) *pipeline {
	t.Helper()
	k := testenv.SharedKafka(t)
	st := testenv.ClickHouse(t)
	ctx := context.Background()
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	n := topicSeq.Add(1)
	cfg := Config{
		Brokers: k.Brokers(), Group: fmt.Sprintf("g%d", n),
		SpansTopic: fmt.Sprintf("spans%d", n), MetricsTopic: fmt.Sprintf("metrics%d", n), DLQTopic: fmt.Sprintf("dlq%d", n),
		MaxRows: 5000, MaxDelay: 200 * time.Millisecond, Instance: fmt.Sprintf("ingest-%d", n),
		// The messages are from around t0: the ingest's time window is
		// measured from an hour later, whatever day the tests run.
		Now: func() time.Time { return t0.Add(time.Hour) },
	}
	for _, topic := range []string{cfg.SpansTopic, cfg.MetricsTopic, cfg.DLQTopic} {
		if err := k.CreateTopic(ctx, topic, partitions); err != nil {
			t.Fatal(err)
		}
	}
	return &pipeline{k: k, st: st, cfg: cfg}
}

// start runs an ingester until the test ends.
func (p *pipeline) start(t *testing.T) {
	t.Helper()
	in, err := New(p.cfg, p.st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func (p *pipeline) produce(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	cl, err := p.k.Client(kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func (p *pipeline) query(t *testing.T, q string) string {
	t.Helper()
	tab, err := store.Select(context.Background(), p.st, q)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, r := range tab.Rows {
		rows = append(rows, strings.Join(r, "\t"))
	}
	return strings.Join(rows, "\n")
}

func (p *pipeline) waitFor(t *testing.T, q, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	got := ""
	for time.Now().Before(deadline) {
		if got = p.query(t, q); got == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s = %q, want %q", q, got, want)
}

var t0 = testenv.RecentDay().Add(3 * time.Hour)

// agentSpans is one agent export request of n requests from host, trace
// ids numbered from id.
func agentSpans(t testing.TB, host string, n, id int) []byte {
	t.Helper()
	reqs := make([]telemetry.Request, n)
	for i := range reqs {
		r := &reqs[i]
		r.Service, r.Endpoint, r.Status = "billy", fmt.Sprintf("/v1/item/%d", (id+i)%4), "200"
		r.Start, r.Duration = t0.Add(time.Duration(id+i)*time.Millisecond), time.Duration(1000+i)*time.Microsecond
		binary.BigEndian.PutUint64(r.TraceID[8:], uint64(id+i))
		binary.BigEndian.PutUint64(r.SpanID[:], uint64(id+i))
		r.Weight = 10
	}
	b, err := otlpwire.EncodeSpans(telemetry.Resource{HostName: host, NodeName: host, HWClass: "gen5"}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The agent's encoding → Kafka → ingest → requests and counters.
func TestAgentMessagesBecomeRows(t *testing.T) {
	p := newPipeline(t, 3)
	var recs []*kgo.Record
	for h := range 6 {
		host := "node-" + strconv.Itoa(h)
		for m := range 5 {
			recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte(host), Value: agentSpans(t, host, 100, (h*5+m)*100)})
		}
	}
	pts := []telemetry.Point{
		{Metric: "system.cpu.time", Unit: "s", Start: t0, End: t0.Add(1003 * time.Millisecond), Value: 0.9,
			Attrs: []telemetry.Attr{telemetry.Int("cpu.logical_number", 2), telemetry.Str("cpu.mode", "softirq")}},
		{Metric: "system.network.packet.count", Unit: "{packet}", Start: t0, End: t0.Add(time.Second), Value: 8000,
			Attrs: []telemetry.Attr{telemetry.Str("network.interface.name", "eth1"), telemetry.Str("network.io.direction", "receive"),
				telemetry.Str("spikehunt.network.operstate", "down")}},
	}
	mb, err := otlpwire.EncodeMetrics(telemetry.Resource{HostName: "node-0"}, pts)
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, &kgo.Record{Topic: p.cfg.MetricsTopic, Key: []byte("node-0"), Value: mb})
	p.produce(t, recs...)
	p.start(t)

	p.waitFor(t, "SELECT count(), uniqExact(trace_id, span_id), uniqExact(host) FROM requests", "3000\t3000\t6")
	if got := p.query(t, "SELECT endpoint, count(), sum(weight) FROM requests GROUP BY endpoint ORDER BY endpoint"); got !=
		"/v1/item/0\t750\t7500\n/v1/item/1\t750\t7500\n/v1/item/2\t750\t7500\n/v1/item/3\t750\t7500" {
		t.Errorf("requests by endpoint:\n%s", got)
	}
	// Request 1234 of the fleet: its trace id, duration and host survive.
	if got := p.query(t, "SELECT host, hw_class, latency_us, ts FROM requests WHERE trace_id = unhex('000000000000000000000000000004D2')"); got !=
		"node-2\tgen5\t1034\t"+t0.Format(time.DateOnly)+"T03:00:01.234Z" {
		t.Errorf("request 1234: %q", got)
	}
	p.waitFor(t, "SELECT metric, cpu, device, mode, value, interval_ms, attrs['spikehunt.network.operstate'] FROM counters WHERE host != '"+p.cfg.Instance+"' ORDER BY metric",
		"system.cpu.time\t2\t\tsoftirq\t0.9\t1003\t\nsystem.network.packet.count\t-1\teth1\treceive\t8000\t1000\tdown")
}

// An ingester that crashed after writing an intent (and maybe inserting)
// but before committing: the next one re-forms exactly that batch, and the
// token makes the retry a no-op. Without deduplication the same recovery
// duplicates the batch, which is what proves the test can fail.
func TestCrashedBatchIsReformedExactly(t *testing.T) {
	for _, dedup := range []bool{true, false} {
		t.Run(fmt.Sprintf("dedup=%v", dedup), func(t *testing.T) {
			p := newPipeline(t, 1)
			p.cfg.NoDedup = !dedup
			p.cfg.MaxRows, p.cfg.MaxDelay = 1_000_000, time.Second // alone, it would take all ten messages as one batch
			var recs []*kgo.Record
			for m := range 10 {
				recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Partition: 0, Value: agentSpans(t, "node-1", 100, m*100)})
			}
			p.produce(t, recs...)

			// The crashed ingester's batch: offsets 0–6, intent written,
			// rows inserted, offsets not committed.
			ctx := context.Background()
			crashed := NewRequestRows()
			for _, r := range recs[:7] {
				if _, _, err := crashed.AppendTraces(r.Value); err != nil {
					t.Fatal(err)
				}
			}
			if err := writeIntent(ctx, p.st, p.cfg.Group, p.cfg.SpansTopic, 0, intent{0, 6}); err != nil {
				t.Fatal(err)
			}
			opts := []store.Option{store.WithSetting("insert_deduplication_token", token(p.cfg.Group, p.cfg.SpansTopic, 0, 0, 6))}
			if !dedup {
				opts = []store.Option{store.WithSetting("insert_deduplication_token", uniqueToken())}
			}
			if err := p.st.Insert(ctx, "requests", crashed.Input(), opts...); err != nil {
				t.Fatal(err)
			}

			p.start(t)
			if dedup {
				p.waitFor(t, "SELECT count(), uniqExact(trace_id, span_id) FROM requests", "1000\t1000")
			} else {
				p.waitFor(t, "SELECT count(), uniqExact(trace_id, span_id) FROM requests", "1700\t1000")
			}
			// And the ingester moved on: its own intent is the next batch.
			p.waitFor(t, fmt.Sprintf("SELECT first_offset, last_offset FROM ingest_intents FINAL WHERE consumer_group = '%s'", p.cfg.Group), "7\t9")
		})
	}
}

// Messages that cannot be ingested go to the dead-letter topic with their
// reason; the messages around them are ingested; the partition moves on.
func TestPoisonMessagesGoToTheDeadLetterTopic(t *testing.T) {
	p := newPipeline(t, 1)
	metricsMsg, err := otlpwire.EncodeMetrics(telemetry.Resource{HostName: "node-1"}, []telemetry.Point{
		{Metric: "system.cpu.time", Start: t0, End: t0.Add(time.Second), Value: 1, Attrs: []telemetry.Attr{telemetry.Int("cpu.logical_number", 0)}}})
	if err != nil {
		t.Fatal(err)
	}
	ancient, err := otlpwire.EncodeSpans(telemetry.Resource{HostName: "node-1"}, []telemetry.Request{
		{Service: "billy", Endpoint: "/", Start: time.Unix(5, 0), Duration: time.Millisecond, Status: "200"}})
	if err != nil {
		t.Fatal(err)
	}
	good := agentSpans(t, "node-1", 50, 0)
	poison := map[string][]byte{
		"garbage":   []byte("this is not protobuf \xff\xff\xff"),
		"truncated": good[:len(good)/2],
		"metrics":   metricsMsg,
		"ancient":   ancient,
	}
	recs := []*kgo.Record{{Topic: p.cfg.SpansTopic, Value: good}}
	for name, v := range poison {
		recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte(name), Value: v})
	}
	recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Value: agentSpans(t, "node-1", 50, 50)})
	p.produce(t, recs...)
	p.start(t)
	p.waitFor(t, "SELECT count() FROM requests", "100")

	cl, err := p.k.Client(kgo.ConsumeTopics(p.cfg.DLQTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(got) < len(poison) && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			if h["spikehunt.source.topic"] != p.cfg.SpansTopic || h["spikehunt.dlq.detail"] == "" {
				t.Errorf("dead letter %s without its source or detail: %v", r.Key, h)
			}
			got[string(r.Key)] = h["spikehunt.dlq.reason"]
		})
	}
	for name := range poison {
		if got[name] == "" {
			t.Errorf("%s: not dead-lettered (got %v)", name, got)
		}
	}
	if got["ancient"] != "timestamp" {
		t.Errorf("a span from 1970 dead-lettered as %q, want timestamp", got["ancient"])
	}
}

// ClickHouse refusing inserts (here: the table is gone for a while) pauses
// the ingest; once it is back, every row arrives, once.
func TestIngestWaitsForClickHouse(t *testing.T) {
	p := newPipeline(t, 2)
	ctx := context.Background()
	if err := p.st.Exec(ctx, "RENAME TABLE requests TO requests_away"); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for m := range 8 {
		host := "node-" + strconv.Itoa(m%4)
		recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte(host), Value: agentSpans(t, host, 100, m*100)})
	}
	p.produce(t, recs...)
	p.start(t)
	time.Sleep(2 * time.Second)
	if got := p.query(t, "SELECT count() FROM requests_away"); got != "0" {
		t.Fatalf("rows arrived in the renamed table: %s", got)
	}
	if err := p.st.Exec(ctx, "RENAME TABLE requests_away TO requests"); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, "SELECT count(), uniqExact(trace_id, span_id) FROM requests", "800\t800")
}

// Members joining and leaving the group move partitions between them
// while messages flow; every request still lands exactly once.
func TestRebalancesCauseNoDuplicates(t *testing.T) {
	p := newPipeline(t, 6)
	p.cfg.MaxRows = 2000
	p.cfg.SessionTimeout = 6 * time.Second
	produce := func(from, to int) {
		var recs []*kgo.Record
		for m := from; m < to; m++ {
			host := fmt.Sprintf("node-%02d", m%24)
			recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte(host), Value: agentSpans(t, host, 500, m*500)})
		}
		p.produce(t, recs...)
	}
	run := func() (stop func()) {
		in, err := New(p.cfg, p.st, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- in.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	produce(0, 40)
	stopA := run()
	time.Sleep(500 * time.Millisecond)
	produce(40, 80)
	stopB := run() // B joins: partitions move from A to B
	time.Sleep(time.Second)
	produce(80, 120)
	stopA() // A leaves: its partitions go to B
	produce(120, 160)
	stopC := run() // C joins
	defer stopC()
	defer stopB()
	p.waitFor(t, "SELECT count(), uniqExact(trace_id, span_id) FROM requests", "80000\t80000")
}

// The in-process source (the embedded demo's Kafka): the same rows, dead
// letters and exactly-once, without a broker; a second ingester on the
// same source resumes where the first committed.
func TestMemorySourceIngestsLikeKafka(t *testing.T) {
	st := testenv.ClickHouse(t)
	ctx := context.Background()
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	src := NewMemorySource(4)
	cfg := Config{MaxRows: 3000, MaxDelay: 100 * time.Millisecond, Now: func() time.Time { return t0.Add(time.Hour) }}
	run := func() (stop func()) { return runOnMemory(t, cfg, st, src) }
	produce := func(from, to int) {
		for m := from; m < to; m++ {
			host := fmt.Sprintf("node-%d", m%8)
			src.Produce(DefaultSpansTopic, []byte(host), agentSpans(t, host, 100, m*100))
		}
	}
	count := func() string {
		tab, err := store.Select(ctx, st, "SELECT count(), uniqExact(trace_id, span_id) FROM requests")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(tab.Rows[0], "\t")
	}
	waitCount := func(want string) {
		deadline := time.Now().Add(20 * time.Second)
		for count() != want && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if got := count(); got != want {
			t.Fatalf("requests: %s, want %s", got, want)
		}
	}
	stop := run()
	produce(0, 50)
	src.Produce(DefaultSpansTopic, []byte("node-0"), []byte("garbage"))
	waitCount("5000\t5000")
	stop()
	produce(50, 100) // while no ingester runs
	stop = run()
	defer stop()
	waitCount("10000\t10000")
	if dl := src.DeadLetters(); len(dl) != 1 || dl[0].Reason != "protobuf" {
		t.Errorf("dead letters %+v, want the garbage message (protobuf)", dl)
	}
	if lag := waitNoLag(src, 5*time.Second); lag != 0 {
		t.Errorf("lag %d after everything was ingested", lag)
	}
}

// runOnMemory runs an ingester on src until the returned stop is called.
func runOnMemory(t *testing.T, cfg Config, st store.Store, src *MemorySource) (stop func()) {
	t.Helper()
	in, err := NewWithMemory(cfg, st, src, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// waitNoLag waits up to d for src to have nothing uncommitted and returns
// its lag then.
func waitNoLag(src *MemorySource, d time.Duration) int64 {
	deadline := time.Now().Add(d)
	for src.Lag() != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	return src.Lag()
}

// slowIntents is the real store with reads of ingest_intents held back,
// as a busy engine answers them: longer than the memory source's poll.
type slowIntents struct {
	store.Store
	delay time.Duration
}

func (s slowIntents) Query(ctx context.Context, query string, fn func(store.Block) error, opts ...store.Option) error {
	if strings.Contains(query, "ingest_intents") {
		time.Sleep(s.delay)
	}
	return s.Store.Query(ctx, query, fn, opts...)
}

// On the memory source, a crashed batch is re-formed exactly even when
// reading its intent takes longer than a poll (MaxDelay/2): CI once saw
// 11,200 rows for 10,000 requests when the ingester gave up on the intent
// at the poll's deadline and batched the partition its own way.
func TestMemorySourceReformsACrashedBatchWhenIntentsAreSlow(t *testing.T) {
	st := testenv.ClickHouse(t)
	ctx := context.Background()
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	src := NewMemorySource(1)
	var values [][]byte
	for m := range 10 {
		v := agentSpans(t, "node-1", 100, m*100)
		values = append(values, v)
		src.Produce(DefaultSpansTopic, []byte("node-1"), v)
	}
	// The crashed ingester's batch: offsets 0–6, intent written, rows
	// inserted, offsets not committed.
	crashed := NewRequestRows()
	for _, v := range values[:7] {
		if _, _, err := crashed.AppendTraces(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeIntent(ctx, st, DefaultGroup, DefaultSpansTopic, 0, intent{0, 6}); err != nil {
		t.Fatal(err)
	}
	tok := store.WithSetting("insert_deduplication_token", token(DefaultGroup, DefaultSpansTopic, 0, 0, 6))
	if err := st.Insert(ctx, "requests", crashed.Input(), tok); err != nil {
		t.Fatal(err)
	}

	cfg := Config{MaxRows: 1_000_000, MaxDelay: 100 * time.Millisecond, Now: func() time.Time { return t0.Add(time.Hour) }}
	defer runOnMemory(t, cfg, slowIntents{st, 150 * time.Millisecond}, src)()
	if lag := waitNoLag(src, 20*time.Second); lag != 0 {
		t.Fatalf("lag %d: the ingester did not get through the partition", lag)
	}
	tab, err := store.Select(ctx, st, "SELECT count(), uniqExact(trace_id, span_id) FROM requests")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tab.Rows[0], "\t"); got != "1000\t1000" {
		t.Errorf("requests: %s, want 1000\t1000 (the crashed batch once)", got)
	}
}

// A batch whose partition is behind stays open past MaxDelay, up to
// CatchUpDelay, so that catching up makes big inserts; once the ingester
// has caught up, MaxDelay closes it again. The batch clock is a fake one:
// the test moves it past each delay instead of sleeping through it, so the
// default delays are tested as they are and a slow machine cannot age a
// batch beyond what the test says.
func TestABatchBehindItsPartitionWaitsForCatchUpDelay(t *testing.T) {
	st := testenv.ClickHouse(t)
	ctx := context.Background()
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	clock := fakeclock.New(t0.Add(time.Hour))
	cfg := Config{MaxRows: 1_000_000, Now: clock.Now, Clock: clock.Now}.WithDefaults() // MaxDelay 1s, CatchUpDelay 10s
	in, err := NewWithMemory(cfg, st, NewMemorySource(1), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	offset := int64(0)
	add := func(lag int64) {
		t.Helper()
		m := Message{Topic: DefaultSpansTopic, Offset: offset, Value: agentSpans(t, "node-1", 100, int(offset)*100), Lag: lag}
		offset++
		if err := in.add(ctx, &m); err != nil {
			t.Fatal(err)
		}
	}
	inserted := func() string {
		t.Helper()
		if err := in.flushDue(ctx); err != nil {
			t.Fatal(err)
		}
		tab, err := store.Select(ctx, st, "SELECT count() FROM requests")
		if err != nil {
			t.Fatal(err)
		}
		return tab.Rows[0][0]
	}

	add(5) // five more messages already in the partition
	clock.Advance(2 * cfg.MaxDelay)
	if got := inserted(); got != "0" {
		t.Fatalf("behind, past MaxDelay: %s rows inserted, want the batch still open", got)
	}
	add(0) // caught up
	if got := inserted(); got != "200" {
		t.Fatalf("caught up, past MaxDelay: %s rows inserted, want 200", got)
	}
	add(3)
	clock.Advance(cfg.CatchUpDelay - time.Millisecond)
	if got := inserted(); got != "200" {
		t.Fatalf("behind, just short of CatchUpDelay: %s rows inserted, want the batch still open", got)
	}
	clock.Advance(time.Millisecond)
	if got := inserted(); got != "300" {
		t.Fatalf("behind, at CatchUpDelay: %s rows inserted, want 300", got)
	}
}
