package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// A fleet that sends only spans never creates the metrics topic. The
// ingester consumes the spans topic anyway, says on /healthz and in
// spikehunt_ingest_topic_missing that the metrics topic is missing, and
// consumes it once it is created, without a restart.
func TestAMissingSourceTopicDoesNotBlockTheOthers(t *testing.T) {
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
		Now:             func() time.Time { return t0.Add(time.Hour) },
		TopicWatchEvery: 200 * time.Millisecond,
	}
	if err := k.CreateTopic(ctx, cfg.SpansTopic, 2); err != nil {
		t.Fatal(err)
	}
	p := &pipeline{k: k, st: st, cfg: cfg}
	var recs []*kgo.Record
	for m := range 4 {
		host := "node-" + strconv.Itoa(m)
		recs = append(recs, &kgo.Record{Topic: cfg.SpansTopic, Key: []byte(host), Value: agentSpans(t, host, 100, m*100)})
	}
	p.produce(t, recs...)

	in, err := New(cfg, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- in.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	p.waitFor(t, "SELECT count() FROM requests", "400")
	ok, detail := in.Health()
	if !ok || !strings.HasPrefix(detail, "degraded: ") || !strings.Contains(detail, cfg.MetricsTopic) || strings.Contains(detail, cfg.SpansTopic) {
		t.Errorf("Health() with the metrics topic missing = %v, %q; want ok and degraded naming %s only", ok, detail, cfg.MetricsTopic)
	}
	if got := testutil.ToFloat64(in.m.missing.WithLabelValues(cfg.MetricsTopic)); got != 1 {
		t.Errorf("spikehunt_ingest_topic_missing{topic=%q} = %v, want 1", cfg.MetricsTopic, got)
	}
	if got := testutil.ToFloat64(in.m.missing.WithLabelValues(cfg.SpansTopic)); got != 0 {
		t.Errorf("spikehunt_ingest_topic_missing{topic=%q} = %v, want 0", cfg.SpansTopic, got)
	}

	// The metrics topic is created, and an agent writes to it.
	if err := k.CreateTopic(ctx, cfg.MetricsTopic, 2); err != nil {
		t.Fatal(err)
	}
	mb, err := otlpwire.EncodeMetrics(telemetry.Resource{HostName: "node-0"}, []telemetry.Point{
		{Metric: "system.cpu.time", Unit: "s", Start: t0, End: t0.Add(time.Second), Value: 0.5,
			Attrs: []telemetry.Attr{telemetry.Int("cpu.logical_number", 1), telemetry.Str("cpu.mode", "user")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p.produce(t, &kgo.Record{Topic: cfg.MetricsTopic, Key: []byte("node-0"), Value: mb},
		&kgo.Record{Topic: cfg.SpansTopic, Key: []byte("node-9"), Value: agentSpans(t, "node-9", 50, 900)})
	p.waitFor(t, "SELECT metric, cpu, mode, value FROM counters WHERE host = 'node-0'", "system.cpu.time\t1\tuser\t0.5")
	p.waitFor(t, "SELECT count() FROM requests", "450")
	if ok, detail := in.Health(); !ok || detail != "ok" {
		t.Errorf("Health() once the metrics topic exists = %v, %q; want ok", ok, detail)
	}
	if got := testutil.ToFloat64(in.m.missing.WithLabelValues(cfg.MetricsTopic)); got != 0 {
		t.Errorf("spikehunt_ingest_topic_missing{topic=%q} once it exists = %v, want 0", cfg.MetricsTopic, got)
	}
}
