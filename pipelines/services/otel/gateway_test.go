package otel

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/services/ingest"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// A standard OTel Go SDK app → the gateway Collector built from this
// folder → Kafka → spikehunt ingest → the requests table holds what the
// app sent: count, endpoints, durations, host and trace ids; and every
// Kafka record is keyed by the app's host.
func TestSDKAppThroughTheGatewayIntoClickHouse(t *testing.T) {
	k := testenv.SharedKafka(t)
	ctx := context.Background()
	const spansTopic, metricsTopic = "gw_spans", "gw_metrics"
	for _, topic := range []string{spansTopic, metricsTopic, "gw_dlq"} {
		if err := k.CreateTopic(ctx, topic, 3); err != nil {
			t.Fatal(err)
		}
	}
	grpcAddr := testenv.StartCollector(t, "config.yaml",
		"KAFKA_BROKERS=["+k.Brokers()[0]+"]", "SPANS_TOPIC="+spansTopic, "METRICS_TOPIC="+metricsTopic)

	// The app: 400 server spans on two routes with known durations.
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(grpcAddr), otlptracegrpc.WithInsecure(),
		otlptracegrpc.WithHeaders(map[string]string{"host.name": "app-host-7"}))
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("checkout"), semconv.HostName("app-host-7"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	tracer := tp.Tracer("checkout-app")
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	sent := map[string]string{} // trace id → "route duration_us"
	for i := range 400 {
		route := []string{"/pay", "/cart"}[i%2]
		start := t0.Add(time.Duration(i) * time.Millisecond)
		d := time.Duration(1000+7*i) * time.Microsecond
		_, span := tracer.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
		span.End(trace.WithTimestamp(start.Add(d)))
		sent[span.SpanContext().TraceID().String()] = fmt.Sprintf("%s %d", route, d.Microseconds())
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	in, err := ingest.New(ingest.Config{Brokers: k.Brokers(), Group: "gw", SpansTopic: spansTopic, MetricsTopic: metricsTopic,
		DLQTopic: "gw_dlq", MaxDelay: 200 * time.Millisecond}, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ictx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- in.Run(ictx) }()
	defer func() { cancel(); <-done }()

	var rows [][]string
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		tab, err := store.Select(ctx, st, "SELECT lower(hex(trace_id)), endpoint, latency_us, host, service FROM requests")
		if err != nil {
			t.Fatal(err)
		}
		if rows = tab.Rows; len(rows) >= len(sent) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(rows) != len(sent) {
		t.Fatalf("%d rows in requests, want the %d spans the app sent", len(rows), len(sent))
	}
	for _, r := range rows {
		if want, ok := sent[r[0]]; !ok || r[1]+" "+r[2] != want || r[3] != "app-host-7" || r[4] != "checkout" {
			t.Fatalf("row %v: the app sent %q for that trace id (host app-host-7, service checkout)", r, want)
		}
		delete(sent, r[0])
	}

	// The gateway keyed every record by the request's host.name.
	cl, err := k.Client(kgo.ConsumeTopics(spansTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	keys := map[string]int{}
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	for pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { keys[string(r.Key)]++ })
	}
	var got []string
	for k := range keys {
		got = append(got, k)
	}
	sort.Strings(got)
	if len(got) != 1 || got[0] != "app-host-7" {
		t.Errorf("record keys %v, want only app-host-7", keys)
	}
}
