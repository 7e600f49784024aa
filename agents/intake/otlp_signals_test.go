package intake

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otellog "go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// startRegistered starts an intake whose metrics are in a registry of
// their own, returned for gatherCounter.
func startRegistered(t *testing.T, cfg Config) (*Intake, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	in := startIntake(t, cfg, func(in *Intake) {
		if err := in.Register(reg); err != nil {
			t.Fatal(err)
		}
	})
	return in, reg
}

// gatherCounter is the value of the counter name with exactly labels, as
// /metrics would show it; 0 when there is none.
func gatherCounter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

const discardedName = "spikehunt_intake_discarded_requests_total"

// TestAStockSDKExportingTracesMetricsAndLogsToTheAgentReportsNoError: an
// app that sets only OTEL_EXPORTER_OTLP_ENDPOINT, as the README says,
// exports its traces, metrics and logs to the agent. The traces become
// requests; the metrics and logs are answered success and counted, so
// that the SDK logs no export error.
func TestAStockSDKExportingTracesMetricsAndLogsToTheAgentReportsNoError(t *testing.T) {
	in, reg := startRegistered(t, testConfig(t))
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+in.Addrs().OTLPGRPC)

	var mu sync.Mutex
	var sdkErrs []error
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		sdkErrs = append(sdkErrs, err)
	}))
	t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := resource.NewSchemaless(attribute.String("service.name", "billy"))

	texp, err := otlptracegrpc.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(texp), sdktrace.WithResource(res))
	_, span := tp.Tracer("billy/http").Start(ctx, "GET /search", trace.WithSpanKind(trace.SpanKindServer))
	span.End()

	mexp, err := otlpmetricgrpc.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp)), sdkmetric.WithResource(res))
	counter, err := mp.Meter("billy/http").Int64Counter("http.server.requests")
	if err != nil {
		t.Fatal(err)
	}
	counter.Add(ctx, 1)

	lexp, err := otlploggrpc.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lp := sdklog.NewLoggerProvider(sdklog.WithProcessor(sdklog.NewBatchProcessor(lexp)), sdklog.WithResource(res))
	var rec otellog.Record
	rec.SetTimestamp(time.Now())
	rec.SetBody(attribute.StringValue("served /search"))
	lp.Logger("billy").Emit(ctx, rec)

	var errs []error
	for name, flush := range map[string]func(context.Context) error{
		"traces": tp.ForceFlush, "metrics": mp.ForceFlush, "logs": lp.ForceFlush,
	} {
		if err := flush(ctx); err != nil {
			errs = append(errs, errors.New(name+": "+err.Error()))
		}
	}
	for _, shutdown := range []func(context.Context) error{tp.Shutdown, mp.Shutdown, lp.Shutdown} {
		if err := shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	mu.Lock()
	errs = append(errs, sdkErrs...)
	mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("the SDK reported export errors: %v", errors.Join(errs...))
	}

	got := collect(t, in, 1, 5*time.Second)
	if got[0].Service != "billy" || got[0].Endpoint != "GET /search" {
		t.Errorf("request = %+v, want billy GET /search", got[0])
	}
	for _, signal := range []string{"metrics", "logs"} {
		if n := gatherCounter(t, reg, discardedName, map[string]string{"source": SourceOTLPGRPC, "signal": signal}); n < 1 {
			t.Errorf("%s{source=otlp_grpc, signal=%s} = %v, want ≥ 1", discardedName, signal, n)
		}
	}
	// Each gRPC export held max_request_bytes of the decode budget from the
	// tap; every hold is given back when its call ends.
	deadline := time.Now().Add(5 * time.Second)
	for in.budget.used.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("decode budget holds %d bytes after every export ended, want 0", in.budget.used.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOTLPHTTPMetricsAndLogsAreAnsweredSuccessInTheRequestsEncodingAndCounted:
// the OTLP/HTTP paths /v1/metrics and /v1/logs take protobuf and JSON,
// answer an empty Export*ServiceResponse in the same encoding, and refuse
// a body over max_request_bytes as /v1/traces does.
func TestOTLPHTTPMetricsAndLogsAreAnsweredSuccessInTheRequestsEncodingAndCounted(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxRequestBytes = 64 << 10
	in, reg := startRegistered(t, cfg)
	base := "http://" + in.Addrs().OTLPHTTP

	metricsReq := &colmetrics.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{
		ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{{
			Name: "http.server.requests",
			Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{DataPoints: []*metricspb.NumberDataPoint{{
				Value: &metricspb.NumberDataPoint_AsInt{AsInt: 1}}}}},
		}}}},
	}}}
	logsReq := &collogs.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
		ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{
			Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "served /search"}}}}}},
	}}}
	cases := []struct {
		path   string
		signal string
		req    proto.Message
		resp   proto.Message
	}{
		{"/v1/metrics", "metrics", metricsReq, &colmetrics.ExportMetricsServiceResponse{}},
		{"/v1/logs", "logs", logsReq, &collogs.ExportLogsServiceResponse{}},
	}
	for _, c := range cases {
		for _, ct := range []string{ctProtobuf, ctJSON} {
			var body []byte
			var err error
			if ct == ctJSON {
				body, err = protojson.Marshal(c.req)
			} else {
				body, err = proto.Marshal(c.req)
			}
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.Post(base+c.path, ct, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("POST %s (%s) = %d %q, want 200", c.path, ct, resp.StatusCode, got)
				continue
			}
			if h := resp.Header.Get("Content-Type"); h != ct {
				t.Errorf("POST %s (%s): Content-Type %q, want %q", c.path, ct, h, ct)
			}
			if ct == ctJSON {
				err = protojson.Unmarshal(got, c.resp)
			} else {
				err = proto.Unmarshal(got, c.resp)
			}
			if err != nil {
				t.Errorf("POST %s (%s): answer %q is not an export response: %v", c.path, ct, got, err)
			}
		}
		if n := gatherCounter(t, reg, discardedName, map[string]string{"source": SourceOTLPHTTP, "signal": c.signal}); n != 2 {
			t.Errorf("%s{source=otlp_http, signal=%s} = %v, want 2", discardedName, c.signal, n)
		}

		// Over max_request_bytes: 413, counted as too large, not discarded.
		resp, err := http.Post(base+c.path, ctProtobuf, strings.NewReader(strings.Repeat("x", 65<<10)))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("POST %s of 65 KiB = %d, want 413", c.path, resp.StatusCode)
		}
	}
	if n := gatherCounter(t, reg, "spikehunt_intake_drops_total", map[string]string{"source": SourceOTLPHTTP, "reason": reasonTooLarge}); n != 2 {
		t.Errorf("drops{otlp_http, too_large} = %v, want 2", n)
	}
}
