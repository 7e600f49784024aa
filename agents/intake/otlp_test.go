package intake

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// t0 is a minute ago, to the ns: the intake refuses spans far from its
// clock (max_span_age, max_span_ahead).
var t0 = time.Now().UTC().Truncate(time.Second).Add(-time.Minute + 535897*time.Microsecond)

// TestOTelSDKOverGRPC: a standard OTel Go SDK app exports over OTLP/gRPC
// (gzip); only its server span comes out.
func TestOTelSDKOverGRPC(t *testing.T) {
	in := startIntake(t, testConfig(t))
	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx,
		otlptracegrpc.WithEndpoint(in.Addrs().OTLPGRPC),
		otlptracegrpc.WithInsecure(),
		otlptracegrpc.WithCompressor("gzip"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "billy"))))
	defer tp.Shutdown(ctx)
	tr := tp.Tracer("billy/http")

	sctx, server := tr.Start(ctx, "GET /search/{q}",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(t0),
		trace.WithAttributes(
			attribute.String("http.route", "/search/{q}"),
			attribute.Int("http.response.status_code", 200),
			attribute.Int("thread.id", 21560)))
	_, client := tr.Start(sctx, "GET backend", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(t0.Add(time.Millisecond)))
	client.End(trace.WithTimestamp(t0.Add(900 * time.Millisecond)))
	_, internal := tr.Start(sctx, "parse", trace.WithTimestamp(t0.Add(time.Millisecond)))
	internal.End(trace.WithTimestamp(t0.Add(2 * time.Millisecond)))
	server.End(trace.WithTimestamp(t0.Add(1042 * time.Millisecond)))
	// A request span that ends before it starts (a clock step in the
	// app) is rejected and counted, and costs nothing else.
	_, backwards := tr.Start(ctx, "GET /backwards", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(t0))
	backwards.End(trace.WithTimestamp(t0.Add(-time.Second)))
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatalf("ForceFlush: %v", err)
	}

	got := collect(t, in, 1, 5*time.Second)
	sc := server.SpanContext()
	want := []telemetry.Request{{
		Service: "billy", Endpoint: "/search/{q}", Start: t0, Duration: 1042 * time.Millisecond,
		Status: "200", TraceID: sc.TraceID(), SpanID: sc.SpanID(), ThreadID: 21560, Weight: 1,
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	expectNoMore(t, in, 50*time.Millisecond)
	if got := testutilIgnored(in, SourceOTLPGRPC); got != 2 {
		t.Errorf("spans_ignored{source=otlp_grpc} = %v, want 2 (client and internal)", got)
	}
	if got := drops(in, SourceOTLPGRPC, "duration"); got != 1 {
		t.Errorf("drops{otlp_grpc, duration} = %v, want 1", got)
	}
}

var (
	traceA = pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	spanA  = pcommon.SpanID{1, 1, 1, 1, 1, 1, 1, 1}
	spanB  = pcommon.SpanID{2, 2, 2, 2, 2, 2, 2, 2}
	spanC  = pcommon.SpanID{3, 3, 3, 3, 3, 3, 3, 3}
)

// mixedTraces holds two request spans, two spans that are not requests and
// three invalid request spans.
func mixedTraces() ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "billy")
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	add := func(name string, kind ptrace.SpanKind, parent pcommon.SpanID, start, end time.Time) ptrace.Span {
		s := spans.AppendEmpty()
		s.SetName(name)
		s.SetKind(kind)
		s.SetTraceID(traceA)
		s.SetSpanID(spanB)
		s.SetParentSpanID(parent)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(end))
		return s
	}
	// A server span with the legacy status attribute as a string.
	s := add("GET /cart", ptrace.SpanKindServer, spanA, t0, t0.Add(250*time.Millisecond))
	s.Attributes().PutStr("http.status_code", "503")
	s.Attributes().PutStr("thread.id", "77")
	// A root span of unspecified kind is a request, named by its span name.
	s = add("/health", ptrace.SpanKindUnspecified, pcommon.SpanID{}, t0, t0.Add(3*time.Millisecond))
	s.SetSpanID(spanC)
	s.Status().SetCode(ptrace.StatusCodeError)
	// Not requests: an unspecified child and a consumer span.
	add("child", ptrace.SpanKindUnspecified, spanA, t0, t0.Add(time.Millisecond))
	add("consume", ptrace.SpanKindConsumer, pcommon.SpanID{}, t0, t0.Add(time.Millisecond))
	// Invalid request spans.
	add("backwards", ptrace.SpanKindServer, spanA, t0, t0.Add(-time.Millisecond))
	add("instant", ptrace.SpanKindServer, spanA, t0, t0)
	add("no trace", ptrace.SpanKindServer, spanA, t0, t0.Add(time.Millisecond)).SetTraceID(pcommon.TraceID{})
	return td
}

var mixedWant = []telemetry.Request{
	{Service: "billy", Endpoint: "/health", Start: t0, Duration: 3 * time.Millisecond, Status: "ERROR", TraceID: traceA, SpanID: spanC, Weight: 1},
	{Service: "billy", Endpoint: "GET /cart", Start: t0, Duration: 250 * time.Millisecond, Status: "503", TraceID: traceA, SpanID: spanB, ThreadID: 77, Weight: 1},
}

func sortRequests(rs []telemetry.Request) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Endpoint < rs[j].Endpoint })
}

func TestOTLPHTTP(t *testing.T) {
	in := startIntake(t, testConfig(t))
	url := "http://" + in.Addrs().OTLPHTTP + "/v1/traces"
	req := ptraceotlp.NewExportRequestFromTraces(mixedTraces())
	pb, err := req.MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	js, err := req.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name, contentType string
		body              []byte
		gzip              bool
	}{
		{"protobuf", "application/x-protobuf", pb, false},
		{"JSON", "application/json", js, false},
		{"gzip protobuf", "application/x-protobuf", pb, true},
		{"gzip JSON with a charset", "application/json; charset=utf-8", js, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body
			if tc.gzip {
				body = gzipped(t, body)
			}
			hreq, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			hreq.Header.Set("Content-Type", tc.contentType)
			if tc.gzip {
				hreq.Header.Set("Content-Encoding", "gzip")
			}
			resp, err := http.DefaultClient.Do(hreq)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			rb, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, rb)
			}
			er := ptraceotlp.NewExportResponse()
			if tc.contentType == "application/x-protobuf" {
				err = er.UnmarshalProto(rb)
			} else {
				err = er.UnmarshalJSON(rb)
			}
			if err != nil {
				t.Fatalf("decode response %q: %v", rb, err)
			}
			if got := er.PartialSuccess().RejectedSpans(); got != 3 {
				t.Errorf("rejected spans = %d (%q), want 3", got, er.PartialSuccess().ErrorMessage())
			}
			got := collect(t, in, 2, 5*time.Second)
			sortRequests(got)
			if diff := cmp.Diff(mixedWant, got); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			n := float64(i + 1)
			for reason, per := range map[string]float64{"duration": 2, "trace_id": 1} {
				if got := drops(in, SourceOTLPHTTP, reason); got != per*n {
					t.Errorf("drops{reason=%s} = %v, want %v", reason, got, per*n)
				}
			}
			if got := testutilIgnored(in, SourceOTLPHTTP); got != 2*n {
				t.Errorf("spans_ignored = %v, want %v", got, 2*n)
			}
		})
	}
}

func TestOTLPGRPCPartialSuccess(t *testing.T) {
	in := startIntake(t, testConfig(t))
	conn := dialGRPC(t, in.Addrs().OTLPGRPC)
	resp, err := ptraceotlp.NewGRPCClient(conn).Export(t.Context(), ptraceotlp.NewExportRequestFromTraces(mixedTraces()))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.PartialSuccess().RejectedSpans(); got != 3 {
		t.Errorf("rejected spans = %d, want 3", got)
	}
	const wantMsg = "spikehunt: 3 request spans rejected: 2 with end not after start, 1 with an all-zero trace id"
	if got := resp.PartialSuccess().ErrorMessage(); got != wantMsg {
		t.Errorf("error message = %q, want %q", got, wantMsg)
	}
	got := collect(t, in, 2, 5*time.Second)
	sortRequests(got)
	if diff := cmp.Diff(mixedWant, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func dialGRPC(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func gzipped(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
