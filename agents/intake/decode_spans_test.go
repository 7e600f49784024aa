package intake

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// captureExporter keeps each Export request's bytes as the client sent
// them.
type captureExporter struct{ got chan []byte }

func (c captureExporter) export(_ context.Context, req *grpcRequest) (*grpcResponse, error) {
	c.got <- req.data.Materialize()
	return &grpcResponse{}, nil
}

// sdkBatch is one ExportTraceServiceRequest as the OpenTelemetry Go SDK
// sends it (captured off a real gRPC connection): n HTTP requests of
// service "billy" at start, each a server span with the HTTP semantic
// conventions' attributes and a database client span under it; one in 50
// fails with a 503 and an exception event, one in 100 is slow.
func sdkBatch(t testing.TB, n int, start time.Time) []byte {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	srv := grpc.NewServer(grpc.ForceServerCodecV2(otlpCodec{proto: encoding.GetCodecV2("proto")}))
	srv.RegisterService(exportServiceDesc(traceServiceName, "trace_service.proto"), captureExporter{got})
	go srv.Serve(ln)
	defer srv.Stop()

	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(ln.Addr().String()), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "billy"), attribute.String("service.version", "1.4.2"),
		attribute.String("host.name", "node-17"), attribute.Int("process.pid", 4242),
		attribute.String("k8s.pod.name", "billy-7d9f8c6b5-x2x9q")))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithMaxExportBatchSize(2*n), sdktrace.WithMaxQueueSize(2*n), sdktrace.WithBatchTimeout(time.Hour)),
		sdktrace.WithResource(res))
	defer tp.Shutdown(ctx)
	tr := tp.Tracer("go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp")
	for i := range n {
		at := start.Add(time.Duration(i) * time.Millisecond)
		lat := time.Duration(800+i%4000) * time.Microsecond
		if i%100 == 99 {
			lat = 750 * time.Millisecond
		}
		code := 200
		if i%50 == 49 {
			code = 503
		}
		route := fmt.Sprintf("/v1/item/%d/{id}", i%16)
		sctx, server := tr.Start(ctx, "GET "+route, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(at),
			trace.WithAttributes(
				attribute.String("http.request.method", "GET"), attribute.String("url.path", fmt.Sprintf("/v1/item/%d/%d", i%16, i)),
				attribute.String("url.scheme", "http"), attribute.String("http.route", route),
				attribute.Int("http.response.status_code", code), attribute.String("server.address", "billy.shop.svc"),
				attribute.Int("server.port", 8080), attribute.String("network.protocol.version", "1.1"),
				attribute.String("client.address", "10.244.3.17"), attribute.String("user_agent.original", "Go-http-client/1.1"),
				attribute.Int("thread.id", 100+i%8)))
		_, db := tr.Start(sctx, "SELECT shop.items", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(at.Add(100*time.Microsecond)),
			trace.WithAttributes(attribute.String("db.system.name", "postgresql"), attribute.String("db.query.text", "SELECT * FROM items WHERE id = $1"),
				attribute.String("server.address", "pg.shop.svc")))
		db.End(trace.WithTimestamp(at.Add(lat / 2)))
		if code >= 500 {
			server.AddEvent("exception", trace.WithTimestamp(at.Add(lat/2)), trace.WithAttributes(
				attribute.String("exception.type", "*net.OpError"), attribute.String("exception.message", "dial tcp: connection refused")))
			server.SetStatus(codes.Error, "upstream refused")
		}
		server.End(trace.WithTimestamp(at.Add(lat)))
	}
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("the SDK exported nothing")
		return nil
	}
}

// Wire helpers for hand-made messages.
func pbLen(f int, b []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, protowire.Number(f), protowire.BytesType), b)
}
func pbStr(f int, s string) []byte { return pbLen(f, []byte(s)) }
func pbVarint(f int, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, protowire.Number(f), protowire.VarintType), v)
}
func pbFixed64(f int, v uint64) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(nil, protowire.Number(f), protowire.Fixed64Type), v)
}
func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// kvStr and kvInt are KeyValue messages.
func kvStr(k, v string) []byte       { return cat(pbStr(1, k), pbLen(2, pbStr(1, v))) }
func kvInt(k string, v int64) []byte { return cat(pbStr(1, k), pbLen(2, pbVarint(3, uint64(v)))) }

// fuzzNow is the receive time of the fuzzed requests, and fuzzWindow its
// span window with the default age and lead.
var (
	fuzzNow    = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	fuzzWindow = newSpanWindow(fuzzNow, DefaultMaxSpanAge, DefaultMaxSpanAhead)
)

// wireRequestSpan is a valid request span's fields at fuzzNow, with more
// fields after them (which win where they repeat one).
func wireRequestSpan(more ...[]byte) []byte {
	start := uint64(fuzzNow.Add(-time.Second).UnixNano())
	return cat(pbLen(1, traceA[:]), pbLen(2, spanB[:]), pbStr(5, "GET /x"), pbVarint(6, 2),
		pbFixed64(7, start), pbFixed64(8, start+5e6), cat(more...))
}

// inResource is a request of one resource spans holding a scope of spans.
func inResource(resource []byte, spans ...[]byte) []byte {
	var ss []byte
	for _, s := range spans {
		ss = append(ss, pbLen(2, s)...)
	}
	return pbLen(1, cat(pbLen(1, resource), pbLen(2, ss)))
}

// directSeeds are hand-made messages at the edges of what pdata takes.
func directSeeds() map[string][]byte {
	svc := kvStr("service.name", "billy")
	long := strings.Repeat("é", 200) // 400 bytes: cut at a rune
	return map[string][]byte{
		"a request span":                     inResource(svc, wireRequestSpan()),
		"the resource after its spans":       pbLen(1, cat(pbLen(2, pbLen(2, wireRequestSpan())), pbLen(1, svc))),
		"a resource in two parts":            pbLen(1, cat(pbLen(1, kvStr("host.name", "n")), pbLen(2, pbLen(2, wireRequestSpan())), pbLen(1, svc))),
		"service.name an int, then a string": inResource(cat(pbLen(1, kvInt("service.name", 7)), pbLen(1, svc)), wireRequestSpan()),
		"service.name empty":                 inResource(kvStr("service.name", ""), wireRequestSpan()),
		"service.name not UTF-8":             inResource(kvStr("service.name", "bil\xffly"), wireRequestSpan()),
		"a long endpoint":                    inResource(svc, wireRequestSpan(pbStr(5, long))),
		"an empty name":                      inResource(svc, wireRequestSpan(pbStr(5, ""))),
		"http.route not a string":            inResource(svc, wireRequestSpan(pbLen(9, kvInt("http.route", 3)))),
		"http.route empty":                   inResource(svc, wireRequestSpan(pbLen(9, kvStr("http.route", "")))),
		"http.route twice":                   inResource(svc, wireRequestSpan(pbLen(9, kvStr("http.route", "/a")), pbLen(9, kvStr("http.route", "/b")))),
		"status codes as strings": inResource(svc,
			wireRequestSpan(pbLen(9, kvStr("http.response.status_code", "+200"))),
			wireRequestSpan(pbLen(9, kvStr("http.response.status_code", "2OO")), pbLen(9, kvStr("http.status_code", "404"))),
			wireRequestSpan(pbLen(9, kvStr("http.status_code", "-7"))),
			wireRequestSpan(pbLen(9, kvStr("http.status_code", "99999999999999999999")))),
		"status codes as ints": inResource(svc,
			wireRequestSpan(pbLen(9, kvInt("http.response.status_code", 700))),
			wireRequestSpan(pbLen(9, kvInt("http.status_code", 42)))),
		"a status, merged": inResource(svc, wireRequestSpan(pbLen(15, pbVarint(3, 2)), pbLen(15, pbStr(2, "boom")))),
		"thread ids": inResource(svc,
			wireRequestSpan(pbLen(9, kvStr("thread.id", "007"))),
			wireRequestSpan(pbLen(9, kvStr("thread.id", "-1"))),
			wireRequestSpan(pbLen(9, kvInt("thread.id", 1<<32))),
			wireRequestSpan(pbLen(9, kvInt("thread.id", 1<<32-1)))),
		// The edges of plainKeyValue, the fast path for the usual KeyValue.
		"attributes the fast path leaves to the general one": inResource(svc, wireRequestSpan(
			pbLen(9, cat(pbStr(1, "http.route"), pbLen(2, cat(pbStr(1, "/a"), pbVarint(3, 1))))), // a value of two fields
			pbLen(9, cat(pbStr(1, "thread.id"), pbLen(2, nil))),                                  // an empty value
			pbLen(9, kvStr("http.route", strings.Repeat("r", 130))),                              // a two-byte length
			pbLen(9, cat(pbLen(2, pbStr(1, "/v")), pbStr(1, "http.route"))),                      // the value before the key
			pbLen(9, cat(pbStr(1, "thread.id"), pbLen(2, pbVarint(2, 1)))))),                     // a bool
		"an attribute int as a ten-byte varint": inResource(svc, wireRequestSpan(pbLen(9, cat(pbStr(1, "thread.id"),
			pbLen(2, []byte{0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}))))),
		"an attribute string cut short":     inResource(svc, wireRequestSpan(pbLen(9, cat(pbStr(1, "k"), []byte{0x12, 0x03, 0x0a, 0x05, 'a'})))),
		"an attribute int cut short":        inResource(svc, wireRequestSpan(pbLen(9, cat(pbStr(1, "thread.id"), []byte{0x12, 0x02, 0x18, 0x80})))),
		"an attribute with a trailing byte": inResource(svc, wireRequestSpan(pbLen(9, cat(kvStr("http.route", "/t"), []byte{0x18})))),
		"a value field twice":               inResource(svc, wireRequestSpan(pbLen(9, cat(pbStr(1, "thread.id"), pbLen(2, pbVarint(3, 5)), pbLen(2, pbVarint(2, 1)))))),
		"kinds and parents": inResource(svc,
			wireRequestSpan(pbVarint(6, 0)),
			wireRequestSpan(pbVarint(6, 0), pbLen(4, make([]byte, 8))),
			wireRequestSpan(pbVarint(6, 0), pbLen(4, spanA[:])),
			wireRequestSpan(pbVarint(6, 3)),
			wireRequestSpan(pbVarint(6, 1<<32+2))),
		"invalid request spans": inResource(svc,
			wireRequestSpan(pbFixed64(7, 0)),
			wireRequestSpan(pbFixed64(8, uint64(fuzzNow.Add(-2*time.Second).UnixNano()))),
			wireRequestSpan(pbLen(1, nil)),
			wireRequestSpan(pbLen(2, make([]byte, 8))),
			wireRequestSpan(pbFixed64(7, 1), pbFixed64(8, 2)),
			wireRequestSpan(pbFixed64(8, uint64(fuzzNow.Add(time.Hour).UnixNano())))),
		"an id of 15 bytes":               inResource(svc, wireRequestSpan(pbLen(1, traceA[:15]))),
		"a link's span id of 7 bytes":     inResource(svc, wireRequestSpan(pbLen(13, pbLen(2, spanA[:7])))),
		"an event with attributes":        inResource(svc, wireRequestSpan(pbLen(11, cat(pbFixed64(1, 5), pbStr(2, "e"), pbLen(3, kvStr("a", "b")))))),
		"kind as a string":                inResource(svc, wireRequestSpan(pbStr(6, "2"))),
		"a group in an unknown field":     inResource(svc, wireRequestSpan([]byte{0xa3, 0x01, 0xa4, 0x01})),
		"a fixed32 unknown field":         inResource(svc, wireRequestSpan([]byte{0xa5, 0x01, 1, 2, 3, 4})),
		"flags":                           inResource(svc, wireRequestSpan([]byte{0x85, 0x01, 1, 0, 0, 0})),
		"flags as a varint":               inResource(svc, wireRequestSpan([]byte{0x80, 0x01, 1})),
		"field number 0":                  inResource(svc, wireRequestSpan([]byte{0x00, 0x01})),
		"a huge field number":             inResource(svc, wireRequestSpan([]byte{0xf8, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01})),
		"truncated":                       inResource(svc, wireRequestSpan())[:40],
		"only legacy scope spans":         pbLen(1, cat(pbLen(1, svc), pbLen(1000, pbLen(2, wireRequestSpan())))),
		"scope spans and legacy ones":     pbLen(1, cat(pbLen(1000, pbLen(2, wireRequestSpan(pbStr(5, "legacy")))), pbLen(1, svc), pbLen(2, pbLen(2, wireRequestSpan())))),
		"an empty scope spans and legacy": pbLen(1, cat(pbLen(2, nil), pbLen(1000, pbLen(2, wireRequestSpan())))),
		"entity refs":                     inResource(cat(svc, pbLen(3, cat(pbStr(1, "u"), pbStr(3, "a"), pbStr(4, "b")))), wireRequestSpan()),
		"a scope with attributes":         pbLen(1, pbLen(2, cat(pbLen(1, cat(pbStr(1, "lib"), pbLen(3, kvStr("a", "b")))), pbLen(2, wireRequestSpan())))),
		"a kvlist value":                  inResource(svc, wireRequestSpan(pbLen(9, cat(pbStr(1, "m"), pbLen(2, pbLen(6, pbLen(1, kvInt("x", 1)))))))),
		"two resources":                   cat(inResource(svc, wireRequestSpan()), inResource(kvStr("service.name", "search"), wireRequestSpan(pbStr(5, "GET /y")))),
		"empty spans":                     emptySpans(3),
		"more spans than the cap":         emptySpans(fuzzMaxSpans + 1),
		"nested values":                   nestedArrays(3),
		"values nested too deep":          nestedArrays(70),
	}
}

// fuzzMaxSpans is max_spans_per_request in the fuzz test: low, so that
// the cap is reached.
const fuzzMaxSpans = 64

// filed is a request span as emit saw it.
type filed struct {
	Service, Endpoint string
	Request           telemetry.Request
}

// referenceSpans is the reference path on b: what scanTraceRequest and
// ptraceotlp make of it, and the spans requestSpans would file; ok false
// when the receivers refuse b.
func referenceSpans(b []byte) (shape requestShape, got []filed, t spanTally, ok bool) {
	shape, err := scanTraceRequest(b)
	if err != nil || shape.spans > fuzzMaxSpans {
		return shape, nil, t, false
	}
	req := ptraceotlp.NewExportRequest()
	if err := req.UnmarshalProto(b); err != nil {
		return shape, nil, t, false
	}
	t = requestSpans(req.Traces(), fuzzWindow, func(svc, ep string, r *telemetry.Request) {
		got = append(got, filed{svc, ep, *r})
	})
	return shape, got, t, true
}

// FuzzSpanDecoderMatchesPdata holds the direct decoder to the reference
// path: it takes exactly the messages the receivers took before it
// (scanTraceRequest, the span cap, then ptraceotlp), with the same shape
// (spans and cost, so the budget answers alike), the same tally and the
// same request spans in the same order.
func FuzzSpanDecoderMatchesPdata(f *testing.F) {
	f.Add(sdkBatch(f, 3, fuzzNow.Add(-time.Minute)))
	pb, _ := ptraceotlp.NewExportRequestFromTraces(mixedTraces()).MarshalProto()
	f.Add(pb)
	for _, b := range directSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		wantShape, want, wantTally, wantOK := referenceSpans(b)
		hold := budgetHold{b: &decodeBudget{limit: 1 << 40}}
		d := getSpanDecoder()
		defer putSpanDecoder(d)
		err := d.decode(b, fuzzWindow, fuzzMaxSpans, &hold)
		if wantOK != (err == nil) {
			t.Fatalf("the reference path takes it: %v, the direct decoder: %v (%v)\n%s", wantOK, err == nil, err, hexHead(b))
		}
		if err != nil {
			return
		}
		if d.shape.spans != wantShape.spans || d.shape.cost != max(wantShape.cost, d.scratchBytes()) {
			t.Fatalf("shape %+v, scanTraceRequest's %+v (scratch %d)\n%s", d.shape, wantShape, d.scratchBytes(), hexHead(b))
		}
		if d.tally != wantTally {
			t.Fatalf("tally %+v, the reference path's %+v\n%s", d.tally, wantTally, hexHead(b))
		}
		var got []filed
		for i := range d.spans {
			s := &d.spans[i]
			var r telemetry.Request
			s.fill(&r)
			got = append(got, filed{string(d.services[s.resource]), string(s.endpoint), r})
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("request spans (-pdata +direct):\n%s\n%s", diff, hexHead(b))
		}
	})
}

// hexHead is b in hex, cut for a failure message (the fuzzer saves the
// whole input under testdata/fuzz).
func hexHead(b []byte) string {
	if len(b) > 256 {
		return fmt.Sprintf("%x… (%d bytes)", b[:256], len(b))
	}
	return fmt.Sprintf("%x", b)
}

// TestDirectDecoderKeepsTheSDKsRequestSpans: of an SDK batch, the server
// spans come out with their route, status, thread and times; the client
// spans are ignored.
func TestDirectDecoderKeepsTheSDKsRequestSpans(t *testing.T) {
	start := fuzzNow.Add(-time.Minute)
	b := sdkBatch(t, 100, start)
	hold := budgetHold{b: &decodeBudget{limit: 1 << 40}}
	d := getSpanDecoder()
	defer putSpanDecoder(d)
	if err := d.decode(b, fuzzWindow, DefaultMaxSpansPerRequest, &hold); err != nil {
		t.Fatalf("the direct decoder backs out of an SDK batch: %v", err)
	}
	if d.tally.ignored != 100 || d.tally.rejected() != 0 || len(d.spans) != 100 {
		t.Fatalf("%d request spans, tally %+v; want 100 request spans and 100 ignored", len(d.spans), d.tally)
	}
	s := d.spans[49]
	var r telemetry.Request
	s.fill(&r)
	if got := string(d.services[s.resource]); got != "billy" {
		t.Errorf("service %q, want billy", got)
	}
	if got := string(s.endpoint); got != "/v1/item/1/{id}" {
		t.Errorf("endpoint %q, want the route /v1/item/1/{id}", got)
	}
	if !r.Start.Equal(start.Add(49*time.Millisecond)) || r.Duration != 849*time.Microsecond || r.Status != "503" || r.ThreadID != 101 {
		t.Errorf("request %+v, want start+49ms, 849µs, status 503, thread 101", r)
	}
}

// TestOTLPIntakeFilesAnSDKBatchWithoutGarbage: an SDK batch through the
// gRPC handler, from the message to the queue, allocates a handful of
// objects a request, not a few a span as decoding it into pdata does.
func TestOTLPIntakeFilesAnSDKBatchWithoutGarbage(t *testing.T) {
	const n = 256
	in := startIntake(t, Config{OTLPGRPC: "127.0.0.1:0", QueueSize: 1 << 20, SampleEvery: 1, SampledPerSecond: -1})
	in.now = func() time.Time { return fuzzNow }
	b := sdkBatch(t, n, fuzzNow.Add(-time.Minute))
	svc := &traceService{in: in, src: in.m.sources[SourceOTLPGRPC]}
	export := func() {
		req := grpcRequest{data: mem.BufferSlice{mem.SliceBuffer(b)}}
		if _, err := svc.export(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
		for range n {
			<-in.Out()
		}
	}
	export() // the names' slots, the pools
	perSpan := testing.AllocsPerRun(20, export) / (2 * n)
	t.Logf("%.3f allocations a span", perSpan)
	if perSpan > 0.1 {
		t.Errorf("%.3f allocations a span, want at most 0.1 (the pdata path makes several)", perSpan)
	}
}
