package ingest

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	protobuf "google.golang.org/protobuf/proto"

	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// fixtureEpoch has nanoseconds so that the cut to microseconds shows.
var fixtureEpoch = testenv.RecentDay().Add(3*time.Hour + 123_456_789)

// fixtureDate is fixtureEpoch's day as the store and the messages spell it.
var fixtureDate = fixtureEpoch.Format(time.DateOnly)

var fixtureResource = telemetry.Resource{HostName: "web-7", NodeName: "node-3", HWClass: "gen9"}

// fixtureID is an id of n bytes, each b: easy to spot in hex.
func fixtureID[T [16]byte | [8]byte](b byte) (id T) {
	for i := range len(id) {
		id[i] = b
	}
	return id
}

// fixtureRequests is what the agent exports for one tick: both services,
// every status form, an untraced request and a request too slow for
// UInt32 microseconds.
func fixtureRequests() []telemetry.Request {
	return []telemetry.Request{
		{Service: "checkout", Endpoint: "/v1/cart", Start: fixtureEpoch, Duration: 1_234_567, Status: "200",
			TraceID: fixtureID[[16]byte](0x01), SpanID: fixtureID[[8]byte](0x11), ThreadID: 4242, Weight: 9},
		{Service: "billing", Endpoint: "/v1/pay", Start: fixtureEpoch.Add(time.Millisecond), Duration: 5 * time.Millisecond, Status: "503"},
		{Service: "checkout", Endpoint: "GET /healthz", Start: fixtureEpoch.Add(2 * time.Millisecond), Duration: 999, Status: "OK",
			TraceID: fixtureID[[16]byte](0x02), SpanID: fixtureID[[8]byte](0x22)},
		{Service: "checkout", Endpoint: "/v1/export", Start: fixtureEpoch.Add(3 * time.Millisecond), Duration: 2 * time.Hour, Status: "ERROR",
			TraceID: fixtureID[[16]byte](0x03), SpanID: fixtureID[[8]byte](0x33), Weight: 1},
		{Service: "checkout", Endpoint: "/v1/cart", Start: fixtureEpoch.Add(4 * time.Millisecond), Duration: time.Millisecond, Status: "UNSET",
			TraceID: fixtureID[[16]byte](0x04), SpanID: fixtureID[[8]byte](0x44), Weight: math.MaxUint32},
	}
}

func fixtureSpansMsg(t testing.TB, res telemetry.Resource, reqs []telemetry.Request) []byte {
	t.Helper()
	msg, err := otlpwire.EncodeSpans(res, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// fixturePoints covers every attribute the agent's samplers set, each
// metric name once so that the row order is the point order.
func fixturePoints() []telemetry.Point {
	at := func(d time.Duration) time.Time { return fixtureEpoch.Add(d) }
	s := telemetry.Str
	cpu := func(n int64) telemetry.Attr { return telemetry.Int("cpu.logical_number", n) }
	return []telemetry.Point{
		{Metric: "system.cpu.time", Unit: "s", Start: at(0), End: at(1000*time.Millisecond + 400*time.Microsecond), Value: 0.25,
			Attrs: []telemetry.Attr{cpu(3), s("cpu.mode", "softirq")}},
		{Metric: "spikehunt.interrupts", Unit: "{interrupt}", Start: at(0), End: at(1499*time.Millisecond + 600*time.Microsecond), Value: 1200,
			Attrs: []telemetry.Attr{cpu(1), s("spikehunt.irq", "35"), s("spikehunt.irq.device", "eth0-TxRx-0")}},
		{Metric: "system.network.packet.dropped", Unit: "{packet}", Start: at(0), End: at(2*time.Millisecond + 499*time.Microsecond), Value: 3,
			Attrs: []telemetry.Attr{s("network.interface.name", "eth0"), s("network.io.direction", "receive"), s("spikehunt.network.operstate", "up")}},
		{Metric: "system.disk.operations", Unit: "{operation}", Start: at(0), End: at(time.Second), Value: 17,
			Attrs: []telemetry.Attr{s("system.device", "sda"), s("disk.io.direction", "read")}},
		{Metric: "spikehunt.softirqs", Unit: "{softirq}", Start: at(0), End: at(time.Second), Value: 950,
			Attrs: []telemetry.Attr{cpu(0), s("spikehunt.softirq.vector", "NET_RX")}},
		{Metric: "spikehunt.pressure.stall_time", Unit: "s", Start: at(0), End: at(time.Second), Value: 0.002,
			Attrs: []telemetry.Attr{s("spikehunt.pressure.resource", "io"), s("spikehunt.pressure.kind", "full")}},
		{Metric: "spikehunt.network.driver_drops", Unit: "{packet}", Start: at(0), End: at(time.Second), Value: 0,
			Attrs: []telemetry.Attr{s("network.interface.name", "eth1"), s("spikehunt.counter", "rx_missed_errors"), telemetry.Int("spikehunt.queue", 7)}},
		{Metric: "spikehunt.context_switches", Unit: "{switch}", Start: at(0), End: at(time.Second), Value: 81234},
		// Start == End: the agent sends a level as a Gauge.
		{Metric: "spikehunt.memory.slab", Unit: "By", Start: at(time.Second), End: at(time.Second), Value: 1 << 30,
			Attrs: []telemetry.Attr{s("spikehunt.memory.slab.kind", "reclaimable")}},
		// A cgroup's pressure: the cgroup is the device, the resource an attr.
		{Metric: "spikehunt.cgroup.pressure.stall_time", Unit: "s", Start: at(0), End: at(time.Second), Value: 0.3,
			Attrs: []telemetry.Attr{s("spikehunt.cgroup", "shop/checkout-7d9/app"), s("spikehunt.pressure.resource", "cpu"), s("spikehunt.pressure.kind", "some")}},
		{Metric: "spikehunt.cgroup.memory.events", Unit: "{event}", Start: at(0), End: at(time.Second), Value: 1,
			Attrs: []telemetry.Attr{s("spikehunt.cgroup", "system.slice/backup.service"), s("spikehunt.cgroup.memory.event", "oom_kill")}},
	}
}

func fixturePointsMsg(t testing.TB, res telemetry.Resource, points []telemetry.Point) []byte {
	t.Helper()
	msg, err := otlpwire.EncodeMetrics(res, points)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// traceMsg marshals the traces build makes.
func traceMsg(t testing.TB, build func(td ptrace.Traces)) []byte {
	t.Helper()
	td := ptrace.NewTraces()
	build(td)
	var m ptrace.ProtoMarshaler
	msg, err := m.MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// spanScope adds a resource of service checkout on host web-7 and returns
// its span slice.
func spanScope(td ptrace.Traces) ptrace.SpanSlice {
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "checkout")
	rs.Resource().Attributes().PutStr("host.name", "web-7")
	return rs.ScopeSpans().AppendEmpty().Spans()
}

// validSpan appends a SERVER span named name that makes a row as it is.
func validSpan(spans ptrace.SpanSlice, name string) ptrace.Span {
	s := spans.AppendEmpty()
	s.SetName(name)
	s.SetKind(ptrace.SpanKindServer)
	s.SetTraceID(fixtureID[[16]byte](0xaa))
	s.SetSpanID(fixtureID[[8]byte](0xbb))
	s.SetStartTimestamp(pcommon.NewTimestampFromTime(fixtureEpoch))
	s.SetEndTimestamp(pcommon.NewTimestampFromTime(fixtureEpoch.Add(time.Millisecond)))
	return s
}

// oneSpanMsg is a message of one valid span that edit may spoil.
func oneSpanMsg(t testing.TB, edit func(s ptrace.Span)) []byte {
	return traceMsg(t, func(td ptrace.Traces) { edit(validSpan(spanScope(td), "GET /x")) })
}

func metricMsg(t testing.TB, build func(ms pmetric.MetricSlice)) []byte {
	t.Helper()
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("host.name", "web-7")
	build(rm.ScopeMetrics().AppendEmpty().Metrics())
	var m pmetric.ProtoMarshaler
	msg, err := m.MarshalMetrics(md)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// validSum appends a delta Sum named name with one point that makes a row
// as it is: 1 over one second.
func validSum(ms pmetric.MetricSlice, name string) pmetric.NumberDataPoint {
	m := ms.AppendEmpty()
	m.SetName(name)
	m.SetEmptySum().SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	dp := m.Sum().DataPoints().AppendEmpty()
	dp.SetStartTimestamp(pcommon.NewTimestampFromTime(fixtureEpoch))
	dp.SetTimestamp(pcommon.NewTimestampFromTime(fixtureEpoch.Add(time.Second)))
	dp.SetDoubleValue(1)
	return dp
}

func validGauge(ms pmetric.MetricSlice, name string) pmetric.NumberDataPoint {
	m := ms.AppendEmpty()
	m.SetName(name)
	dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(pcommon.NewTimestampFromTime(fixtureEpoch))
	dp.SetDoubleValue(1)
	return dp
}

// inputCol finds the column name of in: reading rows back through Input
// checks the names the insert will use, not just the fields.
func inputCol[T proto.ColInput](t testing.TB, in proto.Input, name string) T {
	t.Helper()
	for _, c := range in {
		if c.Name == name {
			col, ok := c.Data.(T)
			if !ok {
				t.Fatalf("column %s is a %T", name, c.Data)
			}
			return col
		}
	}
	t.Fatalf("no column %s in %v", name, in)
	panic("unreachable")
}

// stringColumn is a String or LowCardinality(String) column read back:
// ch-go's, or the dictionary column the requests batch fills.
type stringColumn interface {
	proto.ColInput
	Row(i int) string
}

// inputRows is the row count of every column, which must agree.
func inputRows(t testing.TB, in proto.Input) int {
	t.Helper()
	n := in[0].Data.Rows()
	for _, c := range in {
		if c.Data.Rows() != n {
			t.Fatalf("column %s has %d rows, column %s %d", c.Name, c.Data.Rows(), in[0].Name, n)
		}
	}
	return n
}

type requestRowText struct {
	TS                                       string // RFC 3339, UTC
	Service, Host, HWClass, Endpoint, Status string
	LatencyUS                                uint32
	TraceID, SpanID                          string // hex
	ThreadID, Weight                         uint32
}

func requestRowsIn(t testing.TB, r *RequestRows) []requestRowText {
	t.Helper()
	in := r.Input()
	n := inputRows(t, in)
	if n != r.Rows() {
		t.Fatalf("Rows() = %d, columns hold %d", r.Rows(), n)
	}
	ts := inputCol[*proto.ColDateTime64](t, in, "ts")
	lc := func(name string) stringColumn { return inputCol[stringColumn](t, in, name) }
	u32 := func(name string) *proto.ColUInt32 { return inputCol[*proto.ColUInt32](t, in, name) }
	fixed := func(name string) *proto.ColFixedStr { return inputCol[*proto.ColFixedStr](t, in, name) }
	out := make([]requestRowText, n)
	for i := range out {
		out[i] = requestRowText{
			TS:      ts.Row(i).UTC().Format(time.RFC3339Nano),
			Service: lc("service").Row(i), Host: lc("host").Row(i), HWClass: lc("hw_class").Row(i),
			Endpoint: lc("endpoint").Row(i), Status: lc("status").Row(i),
			LatencyUS: u32("latency_us").Row(i),
			TraceID:   hex.EncodeToString(fixed("trace_id").Row(i)), SpanID: hex.EncodeToString(fixed("span_id").Row(i)),
			ThreadID: u32("thread_id").Row(i), Weight: u32("weight").Row(i),
		}
	}
	return out
}

type counterRowText struct {
	TSStart      string // RFC 3339, UTC
	IntervalMS   uint32
	Host, Metric string
	CPU          int16
	Device, Mode string
	Value        float64
	Attrs        string // k=v pairs in order, comma-separated
}

func counterRowsIn(t testing.TB, c *CounterRows) []counterRowText {
	t.Helper()
	in := c.Input()
	n := inputRows(t, in)
	if n != c.Rows() {
		t.Fatalf("Rows() = %d, columns hold %d", c.Rows(), n)
	}
	lc := func(name string) *proto.ColLowCardinality[string] {
		return inputCol[*proto.ColLowCardinality[string]](t, in, name)
	}
	attrs := inputCol[*proto.ColMap[string, string]](t, in, "attrs")
	out := make([]counterRowText, n)
	for i := range out {
		var kv []string
		for _, p := range attrs.RowKV(i) {
			kv = append(kv, p.Key+"="+p.Value)
		}
		out[i] = counterRowText{
			TSStart:    inputCol[*proto.ColDateTime64](t, in, "ts_start").Row(i).UTC().Format(time.RFC3339Nano),
			IntervalMS: inputCol[*proto.ColUInt32](t, in, "interval_ms").Row(i),
			Host:       lc("host").Row(i), Metric: lc("metric").Row(i),
			CPU:    inputCol[*proto.ColInt16](t, in, "cpu").Row(i),
			Device: lc("device").Row(i), Mode: lc("mode").Row(i),
			Value: inputCol[*proto.ColFloat64](t, in, "value").Row(i),
			Attrs: strings.Join(kv, ","),
		}
	}
	return out
}

// decodeErr asserts that err is a *DecodeError for reason whose Detail
// holds every one of details.
func decodeErr(t testing.TB, err error, reason string, details ...string) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T), want a *DecodeError", err, err)
	}
	if de.Reason != reason {
		t.Errorf("Reason %q (%s), want %q", de.Reason, de.Detail, reason)
	}
	for _, d := range details {
		if !strings.Contains(de.Detail, d) {
			t.Errorf("Detail %q does not say %q", de.Detail, d)
		}
	}
}

func TestAgentSpansBecomeRequestRows(t *testing.T) {
	r := NewRequestRows()
	rows, skipped, err := r.AppendTraces(fixtureSpansMsg(t, fixtureResource, fixtureRequests()))
	if err != nil || rows != 5 || skipped != 0 {
		t.Fatalf("AppendTraces = %d rows, %d skipped, %v; want 5, 0, nil", rows, skipped, err)
	}
	row := func(ts, service, endpoint, status string, latency uint32, trace, span string, thread, weight uint32) requestRowText {
		return requestRowText{TS: ts, Service: service, Host: "web-7", HWClass: "gen9", Endpoint: endpoint, Status: status,
			LatencyUS: latency, TraceID: trace, SpanID: span, ThreadID: thread, Weight: weight}
	}
	zeroTrace, zeroSpan := strings.Repeat("00", 16), strings.Repeat("00", 8)
	// The encoder groups spans by service, in order of first appearance.
	want := []requestRowText{
		row(fixtureDate+"T03:00:00.123456Z", "checkout", "/v1/cart", "200", 1234,
			strings.Repeat("01", 16), strings.Repeat("11", 8), 4242, 9),
		row(fixtureDate+"T03:00:00.125456Z", "checkout", "GET /healthz", "OK", 0,
			strings.Repeat("02", 16), strings.Repeat("22", 8), 0, 1),
		row(fixtureDate+"T03:00:00.126456Z", "checkout", "/v1/export", "ERROR", math.MaxUint32,
			strings.Repeat("03", 16), strings.Repeat("33", 8), 0, 1),
		row(fixtureDate+"T03:00:00.127456Z", "checkout", "/v1/cart", "UNSET", 1000,
			strings.Repeat("04", 16), strings.Repeat("44", 8), 0, math.MaxUint32),
		row(fixtureDate+"T03:00:00.124456Z", "billing", "/v1/pay", "503", 5000, zeroTrace, zeroSpan, 0, 1),
	}
	if diff := cmp.Diff(want, requestRowsIn(t, r)); diff != "" {
		t.Fatalf("rows (-want +got):\n%s", diff)
	}

	// A second message adds to the batch; Reset empties it for the next.
	if rows, _, err := r.AppendTraces(fixtureSpansMsg(t, fixtureResource, fixtureRequests()[:2])); err != nil || rows != 2 {
		t.Fatalf("second message: %d rows, %v; want 2", rows, err)
	}
	if got := requestRowsIn(t, r); len(got) != 7 || got[5] != want[0] || got[6] != want[4] {
		t.Fatalf("after a second message: %+v", got)
	}
	r.Reset()
	if n := inputRows(t, r.Input()); n != 0 || r.Rows() != 0 {
		t.Fatalf("after Reset: Rows() = %d, columns hold %d", r.Rows(), n)
	}
	if _, _, err := r.AppendTraces(fixtureSpansMsg(t, fixtureResource, fixtureRequests()[1:2])); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[4:], requestRowsIn(t, r)); diff != "" {
		t.Fatalf("after Reset and a message (-want +got):\n%s", diff)
	}
}

func TestHostFallsBackToTheNodeNameThenUnknown(t *testing.T) {
	for _, tc := range []struct {
		res                     telemetry.Resource
		service                 string
		wantHost, wantHW, wantS string
	}{
		{telemetry.Resource{HostName: "web-7", NodeName: "node-3"}, "checkout", "web-7", "", "checkout"},
		{telemetry.Resource{NodeName: "node-3", HWClass: "gen10"}, "checkout", "node-3", "gen10", "checkout"},
		{telemetry.Resource{}, "", "unknown", "", "unknown_service"},
	} {
		reqs := fixtureRequests()[:1]
		reqs[0].Service = tc.service
		r := NewRequestRows()
		if _, _, err := r.AppendTraces(fixtureSpansMsg(t, tc.res, reqs)); err != nil {
			t.Fatal(err)
		}
		got := requestRowsIn(t, r)[0]
		if got.Host != tc.wantHost || got.HWClass != tc.wantHW || got.Service != tc.wantS {
			t.Errorf("%+v, service %q: host %q, hw_class %q, service %q; want %q, %q, %q",
				tc.res, tc.service, got.Host, got.HWClass, got.Service, tc.wantHost, tc.wantHW, tc.wantS)
		}

		c := NewCounterRows()
		if _, err := c.AppendMetrics(fixturePointsMsg(t, tc.res, fixturePoints()[:1])); err != nil {
			t.Fatal(err)
		}
		if got := counterRowsIn(t, c)[0].Host; got != tc.wantHost {
			t.Errorf("%+v: counters host %q, want %q", tc.res, got, tc.wantHost)
		}
	}
}

func TestOnlyServerAndUnspecifiedRootSpansAreRequests(t *testing.T) {
	msg := traceMsg(t, func(td ptrace.Traces) {
		spans := spanScope(td)
		for _, k := range []struct {
			name   string
			kind   ptrace.SpanKind
			parent bool
		}{
			{"server child", ptrace.SpanKindServer, true},
			{"client", ptrace.SpanKindClient, false},
			{"unspecified root", ptrace.SpanKindUnspecified, false},
			{"unspecified child", ptrace.SpanKindUnspecified, true},
			{"internal", ptrace.SpanKindInternal, false},
			{"producer", ptrace.SpanKindProducer, false},
			{"consumer", ptrace.SpanKindConsumer, false},
			{"server root", ptrace.SpanKindServer, false},
		} {
			s := validSpan(spans, k.name)
			s.SetKind(k.kind)
			if k.parent {
				s.SetParentSpanID(fixtureID[[8]byte](0xcc))
			}
		}
	})
	r := NewRequestRows()
	rows, skipped, err := r.AppendTraces(msg)
	if err != nil || rows != 3 || skipped != 5 {
		t.Fatalf("AppendTraces = %d rows, %d skipped, %v; want 3, 5, nil", rows, skipped, err)
	}
	var got []string
	for _, row := range requestRowsIn(t, r) {
		got = append(got, row.Endpoint)
	}
	if want := []string{"server child", "unspecified root", "server root"}; !cmp.Equal(got, want) {
		t.Fatalf("endpoints %q, want %q", got, want)
	}
}

func TestSpanAttributesFillEndpointStatusThreadAndWeight(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(s ptrace.Span)
		want func(row *requestRowText)
	}{
		{"route over name", func(s ptrace.Span) { s.Attributes().PutStr("http.route", "/users/{id}") },
			func(r *requestRowText) { r.Endpoint = "/users/{id}" }},
		{"empty route", func(s ptrace.Span) { s.Attributes().PutStr("http.route", "") }, nil},
		{"route not a string", func(s ptrace.Span) { s.Attributes().PutInt("http.route", 3) }, nil},
		{"no route, no name", func(s ptrace.Span) { s.SetName("") },
			func(r *requestRowText) { r.Endpoint = "unknown" }},
		{"int status code", func(s ptrace.Span) {
			s.Attributes().PutInt("http.response.status_code", 404)
			s.Status().SetCode(ptrace.StatusCodeError)
		}, func(r *requestRowText) { r.Status = "404" }},
		{"string status code", func(s ptrace.Span) { s.Attributes().PutStr("http.response.status_code", "502") },
			func(r *requestRowText) { r.Status = "502" }},
		{"odd status code", func(s ptrace.Span) { s.Attributes().PutInt("http.response.status_code", 1234) },
			func(r *requestRowText) { r.Status = "1234" }},
		{"legacy status code", func(s ptrace.Span) { s.Attributes().PutInt("http.status_code", 301) },
			func(r *requestRowText) { r.Status = "301" }},
		{"status code not a number", func(s ptrace.Span) {
			s.Attributes().PutStr("http.response.status_code", "teapot")
			s.Status().SetCode(ptrace.StatusCodeError)
		}, func(r *requestRowText) { r.Status = "ERROR" }},
		{"span status ok", func(s ptrace.Span) { s.Status().SetCode(ptrace.StatusCodeOk) },
			func(r *requestRowText) { r.Status = "OK" }},
		{"thread id", func(s ptrace.Span) { s.Attributes().PutInt("thread.id", 77) },
			func(r *requestRowText) { r.ThreadID = 77 }},
		{"thread id as a string", func(s ptrace.Span) { s.Attributes().PutStr("thread.id", "78") },
			func(r *requestRowText) { r.ThreadID = 78 }},
		{"negative thread id", func(s ptrace.Span) { s.Attributes().PutInt("thread.id", -1) }, nil},
		{"thread id over 32 bits", func(s ptrace.Span) { s.Attributes().PutInt("thread.id", 1<<32) }, nil},
		{"weight", func(s ptrace.Span) { s.Attributes().PutInt("spikehunt.weight", 250) },
			func(r *requestRowText) { r.Weight = 250 }},
		{"zero ids", func(s ptrace.Span) {
			s.SetTraceID(pcommon.NewTraceIDEmpty())
			s.SetSpanID(pcommon.NewSpanIDEmpty())
		}, func(r *requestRowText) { r.TraceID, r.SpanID = strings.Repeat("00", 16), strings.Repeat("00", 8) }},
		{"end equals start", func(s ptrace.Span) { s.SetEndTimestamp(s.StartTimestamp()) },
			func(r *requestRowText) { r.LatencyUS = 0 }},
		{"earliest start", func(s ptrace.Span) {
			start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
			s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
			s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Second)))
		}, func(r *requestRowText) { r.TS, r.LatencyUS = "2000-01-01T00:00:00Z", 1_000_000 }},
		{"latest start", func(s ptrace.Span) {
			start := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
			s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
			s.SetEndTimestamp(pcommon.Timestamp(math.MaxUint64))
		}, func(r *requestRowText) { r.TS, r.LatencyUS = "2200-01-01T00:00:00Z", math.MaxUint32 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := requestRowText{TS: fixtureDate + "T03:00:00.123456Z", Service: "checkout", Host: "web-7", Endpoint: "GET /x",
				Status: "UNSET", LatencyUS: 1000, TraceID: strings.Repeat("aa", 16), SpanID: strings.Repeat("bb", 8), Weight: 1}
			if tc.want != nil {
				tc.want(&want)
			}
			r := NewRequestRows()
			if _, _, err := r.AppendTraces(oneSpanMsg(t, tc.edit)); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]requestRowText{want}, requestRowsIn(t, r)); diff != "" {
				t.Fatalf("row (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAnInvalidSpanRejectsItsWholeMessage(t *testing.T) {
	at := func(s ptrace.Span, start time.Time, d time.Duration) {
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(d)))
	}
	for _, tc := range []struct {
		name    string
		edit    func(s ptrace.Span)
		reason  string
		details []string
	}{
		{"no start", func(s ptrace.Span) { s.SetStartTimestamp(0) }, "timestamp", []string{"start 0 (unset)"}},
		{"no end", func(s ptrace.Span) { s.SetEndTimestamp(0) }, "timestamp", []string{"end 0 (unset)"}},
		{"end before start", func(s ptrace.Span) { s.SetEndTimestamp(s.StartTimestamp() - 1) }, "timestamp",
			[]string{"end " + fixtureDate + "T03:00:00.123456788Z before start " + fixtureDate + "T03:00:00.123456789Z"}},
		{"start in 1999", func(s ptrace.Span) { at(s, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Add(-1), time.Second) },
			"timestamp", []string{"1999-12-31T23:59:59.999999999Z", "not between 2000 and 2200"}},
		{"start after 2200", func(s ptrace.Span) { at(s, time.Date(2200, 1, 1, 0, 0, 0, 1, time.UTC), time.Second) },
			"timestamp", []string{"2200-01-01T00:00:00.000000001Z"}},
		{"start an uptime, not a wall-clock time", func(s ptrace.Span) { s.SetStartTimestamp(5e9) }, "timestamp", []string{"1970"}},
		{"weight 0", func(s ptrace.Span) { s.Attributes().PutInt("spikehunt.weight", 0) }, "span", []string{"spikehunt.weight = 0"}},
		{"negative weight", func(s ptrace.Span) { s.Attributes().PutInt("spikehunt.weight", -3) }, "span", []string{"= -3"}},
		{"weight over 32 bits", func(s ptrace.Span) { s.Attributes().PutInt("spikehunt.weight", 1<<32) }, "span", []string{"4294967296"}},
		{"fractional weight", func(s ptrace.Span) { s.Attributes().PutDouble("spikehunt.weight", 2.5) }, "span", []string{"2.5 (Double)"}},
		{"weight not a number", func(s ptrace.Span) { s.Attributes().PutStr("spikehunt.weight", "ten") }, "span", []string{"ten (Str)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A good span first: the bad one must take it down with it.
			msg := traceMsg(t, func(td ptrace.Traces) {
				spans := spanScope(td)
				validSpan(spans, "GET /ok")
				bad := validSpan(spans, "GET /bad")
				bad.SetSpanID(fixtureID[[8]byte](0x5b))
				tc.edit(bad)
			})
			r := NewRequestRows()
			if _, _, err := r.AppendTraces(fixtureSpansMsg(t, fixtureResource, fixtureRequests())); err != nil {
				t.Fatal(err)
			}
			before := requestRowsIn(t, r)
			rows, skipped, err := r.AppendTraces(msg)
			if rows != 0 || skipped != 0 {
				t.Errorf("AppendTraces = %d rows, %d skipped with an error, want 0, 0", rows, skipped)
			}
			decodeErr(t, err, tc.reason, append(tc.details, `span 1 of service "checkout" (span id 5b5b5b5b5b5b5b5b)`)...)
			if diff := cmp.Diff(before, requestRowsIn(t, r)); diff != "" {
				t.Fatalf("the rejected message changed the batch (-before +after):\n%s", diff)
			}
			// The batch takes the next good message as if nothing happened.
			if rows, _, err := r.AppendTraces(oneSpanMsg(t, func(ptrace.Span) {})); err != nil || rows != 1 || r.Rows() != len(before)+1 {
				t.Fatalf("next message: %d rows, %v; batch %d rows, want %d", rows, err, r.Rows(), len(before)+1)
			}
		})
	}
}

func TestAgentPointsBecomeCounterRows(t *testing.T) {
	c := NewCounterRows()
	rows, err := c.AppendMetrics(fixturePointsMsg(t, fixtureResource, fixturePoints()))
	if err != nil || rows != 11 {
		t.Fatalf("AppendMetrics = %d rows, %v; want 11, nil", rows, err)
	}
	start := fixtureDate + "T03:00:00.123456Z"
	row := func(metric string, ms uint32, cpu int16, device, mode string, value float64, attrs string) counterRowText {
		return counterRowText{TSStart: start, IntervalMS: ms, Host: "web-7", Metric: metric, CPU: cpu,
			Device: device, Mode: mode, Value: value, Attrs: attrs}
	}
	slab := row("spikehunt.memory.slab", 0, -1, "", "reclaimable", 1<<30, "")
	slab.TSStart = fixtureDate + "T03:00:01.123456Z" // a gauge's reading time
	want := []counterRowText{
		row("system.cpu.time", 1000, 3, "", "softirq", 0.25, ""),
		// 1499.6 ms and 2.499 ms: interval_ms is rounded, not cut.
		row("spikehunt.interrupts", 1500, 1, "35", "", 1200, "spikehunt.irq.device=eth0-TxRx-0"),
		row("system.network.packet.dropped", 2, -1, "eth0", "receive", 3, "spikehunt.network.operstate=up"),
		row("system.disk.operations", 1000, -1, "sda", "read", 17, ""),
		row("spikehunt.softirqs", 1000, 0, "", "NET_RX", 950, ""),
		row("spikehunt.pressure.stall_time", 1000, -1, "io", "full", 0.002, ""),
		row("spikehunt.network.driver_drops", 1000, -1, "eth1", "rx_missed_errors", 0, "spikehunt.queue=7"),
		row("spikehunt.context_switches", 1000, -1, "", "", 81234, ""),
		slab,
		row("spikehunt.cgroup.pressure.stall_time", 1000, -1, "shop/checkout-7d9/app", "some", 0.3, "spikehunt.pressure.resource=cpu"),
		row("spikehunt.cgroup.memory.events", 1000, -1, "system.slice/backup.service", "oom_kill", 1, ""),
	}
	if diff := cmp.Diff(want, counterRowsIn(t, c)); diff != "" {
		t.Fatalf("rows (-want +got):\n%s", diff)
	}

	c.Reset()
	if n := inputRows(t, c.Input()); n != 0 || c.Rows() != 0 {
		t.Fatalf("after Reset: Rows() = %d, columns hold %d", c.Rows(), n)
	}
	if _, err := c.AppendMetrics(fixturePointsMsg(t, fixtureResource, fixturePoints()[1:2])); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[1:2], counterRowsIn(t, c)); diff != "" {
		t.Fatalf("after Reset and a message (-want +got):\n%s", diff)
	}
}

func TestPointAttributesFillCPUDeviceModeAndAttrs(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(a pcommon.Map)
		want func(row *counterRowText)
	}{
		{"cpu as a string", func(a pcommon.Map) { a.PutStr("cpu.logical_number", "12") },
			func(r *counterRowText) { r.CPU = 12 }},
		{"highest cpu", func(a pcommon.Map) { a.PutInt("cpu.logical_number", math.MaxInt16) },
			func(r *counterRowText) { r.CPU = math.MaxInt16 }},
		// The first key of each list wins; the others are kept in attrs.
		{"two devices", func(a pcommon.Map) {
			a.PutStr("spikehunt.irq", "35")
			a.PutStr("network.interface.name", "eth0")
		}, func(r *counterRowText) { r.Device, r.Attrs = "eth0", "spikehunt.irq=35" }},
		{"two modes", func(a pcommon.Map) {
			a.PutStr("spikehunt.softirq.vector", "NET_RX")
			a.PutStr("cpu.mode", "softirq")
		}, func(r *counterRowText) { r.Mode, r.Attrs = "softirq", "spikehunt.softirq.vector=NET_RX" }},
		{"values of every type as text", func(a pcommon.Map) {
			a.PutInt("n", -42)
			a.PutBool("b", true)
			a.PutDouble("d", 0.5)
			a.PutStr("", "empty key")
			a.PutEmptySlice("s").AppendEmpty().SetStr("x")
			a.PutInt("system.device", 9)
		}, func(r *counterRowText) { r.Device, r.Attrs = "9", `n=-42,b=true,d=0.5,=empty key,s=["x"]` }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := counterRowText{TSStart: fixtureDate + "T03:00:00.123456Z", IntervalMS: 1000, Host: "web-7", Metric: "m", CPU: -1, Value: 1}
			tc.want(&want)
			c := NewCounterRows()
			if _, err := c.AppendMetrics(metricMsg(t, func(ms pmetric.MetricSlice) { tc.edit(validSum(ms, "m").Attributes()) })); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]counterRowText{want}, counterRowsIn(t, c)); diff != "" {
				t.Fatalf("row (-want +got):\n%s", diff)
			}
		})
	}
}

// pdata keeps an attribute key repeated on the wire as often as it comes,
// and its Map API cannot make such a message: build it with the OTLP
// protobuf types.
func TestARepeatedAttributeKeyKeepsItsFirstValue(t *testing.T) {
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	num := func(k string, v int64) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
	}
	few := []*commonpb.KeyValue{
		str("spikehunt.counter", "first"), str("cpu.mode", "user"), num("cpu.logical_number", 2),
		str("spikehunt.counter", "second"), str("cpu.mode", "system"), num("cpu.logical_number", 3),
	}
	// Past manyAttrs the repeats are found another way.
	many := append([]*commonpb.KeyValue(nil), few...)
	var wantMany []string
	for i := range manyAttrs + 4 {
		k := fmt.Sprintf("k%02d", i)
		many = append(many, str(k, "v"))
		wantMany = append(wantMany, k+"=v")
	}
	many = append(many, str("k03", "again"), num("cpu.logical_number", 40000))
	point := func(attrs []*commonpb.KeyValue) *metricspb.NumberDataPoint {
		return &metricspb.NumberDataPoint{
			Attributes:        attrs,
			StartTimeUnixNano: uint64(fixtureEpoch.UnixNano()), TimeUnixNano: uint64(fixtureEpoch.Add(time.Second).UnixNano()),
			Value: &metricspb.NumberDataPoint_AsInt{AsInt: 5},
		}
	}
	msg, err := protobuf.Marshal(&colmetricspb.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("host.name", "web-7"), str("host.name", "web-8")}},
		ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{{
			Name: "m",
			Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{
				AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA,
				DataPoints:             []*metricspb.NumberDataPoint{point(few), point(many)},
			}},
		}}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	c := NewCounterRows()
	if _, err := c.AppendMetrics(msg); err != nil {
		t.Fatal(err)
	}
	row := counterRowText{TSStart: fixtureDate + "T03:00:00.123456Z", IntervalMS: 1000, Host: "web-7", Metric: "m",
		CPU: 2, Mode: "user", Value: 5, Attrs: "spikehunt.counter=first"}
	rowMany := row
	rowMany.Attrs += "," + strings.Join(wantMany, ",")
	if diff := cmp.Diff([]counterRowText{row, rowMany}, counterRowsIn(t, c)); diff != "" {
		t.Fatalf("rows (-want +got):\n%s", diff)
	}
}

func TestOnlySumAndGaugePointsBecomeCounterRows(t *testing.T) {
	msg := metricMsg(t, func(ms pmetric.MetricSlice) {
		h := ms.AppendEmpty()
		h.SetName("histogram")
		h.SetEmptyHistogram().DataPoints().AppendEmpty().SetCount(3)
		e := ms.AppendEmpty()
		e.SetName("exponential histogram")
		e.SetEmptyExponentialHistogram().DataPoints().AppendEmpty().SetCount(3)
		s := ms.AppendEmpty()
		s.SetName("summary")
		s.SetEmptySummary().DataPoints().AppendEmpty().SetCount(3)
		ms.AppendEmpty().SetName("no data")
		// Cumulative and int-valued: still a row, value as a float.
		sum := validSum(ms, "cumulative")
		sum.SetIntValue(42)
		ms.At(ms.Len() - 1).Sum().SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		g := validGauge(ms, "gauge")
		g.SetStartTimestamp(1) // ignored: a gauge has no interval
		g.SetIntValue(-7)
	})
	c := NewCounterRows()
	rows, err := c.AppendMetrics(msg)
	if err != nil || rows != 2 {
		t.Fatalf("AppendMetrics = %d rows, %v; want 2, nil", rows, err)
	}
	got := counterRowsIn(t, c)
	if got[0].Metric != "cumulative" || got[0].Value != 42 || got[0].IntervalMS != 1000 ||
		got[1].Metric != "gauge" || got[1].Value != -7 || got[1].IntervalMS != 0 || got[1].TSStart != fixtureDate+"T03:00:00.123456Z" {
		t.Fatalf("rows %+v", got)
	}
}

func TestAnInvalidPointRejectsItsWholeMessage(t *testing.T) {
	ts := func(t time.Time) pcommon.Timestamp { return pcommon.NewTimestampFromTime(t) }
	y2000 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		gauge   bool
		edit    func(dp pmetric.NumberDataPoint)
		reason  string
		details []string
	}{
		{"sum without start", false, func(dp pmetric.NumberDataPoint) { dp.SetStartTimestamp(0) }, "point", []string{"start 0 (unset)"}},
		{"sum ends before it starts", false, func(dp pmetric.NumberDataPoint) { dp.SetTimestamp(dp.StartTimestamp() - 1) }, "point", []string{"before start"}},
		{"sum starts in 1999", false, func(dp pmetric.NumberDataPoint) { dp.SetStartTimestamp(ts(y2000.Add(-1))) }, "timestamp", []string{"1999-12-31"}},
		{"sum ends after 2200", false, func(dp pmetric.NumberDataPoint) {
			dp.SetTimestamp(ts(time.Date(2200, 1, 1, 0, 0, 0, 1, time.UTC)))
		}, "timestamp", []string{"2200-01-01T00:00:00.000000001Z"}},
		{"sum over 49 days", false, func(dp pmetric.NumberDataPoint) {
			dp.SetTimestamp(dp.StartTimestamp() + pcommon.Timestamp(50*24*time.Hour))
		}, "point", []string{"49 days"}},
		{"gauge without time", true, func(dp pmetric.NumberDataPoint) { dp.SetTimestamp(0) }, "timestamp", []string{"time 0 (unset)"}},
		{"gauge in 2250", true, func(dp pmetric.NumberDataPoint) { dp.SetTimestamp(ts(time.Date(2250, 1, 1, 0, 0, 0, 0, time.UTC))) },
			"timestamp", []string{"2250-01-01"}},
		{"gauge past 2262", true, func(dp pmetric.NumberDataPoint) { dp.SetTimestamp(math.MaxUint64) },
			"timestamp", []string{"18446744073709551615 ns (after 2262)"}},
		{"NaN", false, func(dp pmetric.NumberDataPoint) { dp.SetDoubleValue(math.NaN()) }, "point", []string{"NaN"}},
		{"infinite gauge", true, func(dp pmetric.NumberDataPoint) { dp.SetDoubleValue(math.Inf(-1)) }, "point", []string{"-Inf"}},
		{"no value", false, func(dp pmetric.NumberDataPoint) {
			fresh := pmetric.NewNumberDataPoint()
			fresh.SetStartTimestamp(dp.StartTimestamp())
			fresh.SetTimestamp(dp.Timestamp())
			fresh.CopyTo(dp)
		}, "point", []string{"no value"}},
		{"negative cpu", false, func(dp pmetric.NumberDataPoint) { dp.Attributes().PutInt("cpu.logical_number", -2) }, "point", []string{"cpu.logical_number = -2"}},
		{"cpu over Int16", false, func(dp pmetric.NumberDataPoint) { dp.Attributes().PutInt("cpu.logical_number", 32768) }, "point", []string{"32768"}},
		{"cpu not a number", false, func(dp pmetric.NumberDataPoint) { dp.Attributes().PutStr("cpu.logical_number", "all") }, "point", []string{"all (Str)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := metricMsg(t, func(ms pmetric.MetricSlice) {
				validSum(ms, "good")
				var dp pmetric.NumberDataPoint
				if tc.gauge {
					validGauge(ms, "bad")
					dp = ms.At(1).Gauge().DataPoints().AppendEmpty()
					ms.At(1).Gauge().DataPoints().At(0).CopyTo(dp)
				} else {
					validSum(ms, "bad")
					dp = ms.At(1).Sum().DataPoints().AppendEmpty()
					ms.At(1).Sum().DataPoints().At(0).CopyTo(dp)
				}
				tc.edit(dp)
			})
			c := NewCounterRows()
			if _, err := c.AppendMetrics(fixturePointsMsg(t, fixtureResource, fixturePoints())); err != nil {
				t.Fatal(err)
			}
			before := counterRowsIn(t, c)
			rows, err := c.AppendMetrics(msg)
			if rows != 0 {
				t.Errorf("AppendMetrics = %d rows with an error, want 0", rows)
			}
			decodeErr(t, err, tc.reason, append(tc.details, `point 1 of metric "bad"`)...)
			if diff := cmp.Diff(before, counterRowsIn(t, c)); diff != "" {
				t.Fatalf("the rejected message changed the batch (-before +after):\n%s", diff)
			}
			if rows, err := c.AppendMetrics(fixturePointsMsg(t, fixtureResource, fixturePoints()[:1])); err != nil || rows != 1 || c.Rows() != len(before)+1 {
				t.Fatalf("next message: %d rows, %v; batch %d rows, want %d", rows, err, c.Rows(), len(before)+1)
			}
		})
	}
}

// The tables the rows are for, in the real engine: the column names and
// types of Input must be what the migrations create, LowCardinality keys
// of the Map column included.
func TestRowsInsertIntoTheRealTables(t *testing.T) {
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{Database: st.Database()}); err != nil {
		t.Fatal(err)
	}
	// Recent times: the tables' TTLs drop old days.
	now := time.Now().UTC().Truncate(time.Second).Add(-time.Minute)
	reqs := fixtureRequests()
	for i := range reqs {
		reqs[i].Start = now.Add(reqs[i].Start.Sub(fixtureEpoch))
	}
	r := NewRequestRows()
	if _, _, err := r.AppendTraces(fixtureSpansMsg(t, fixtureResource, reqs)); err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(ctx, "requests", r.Input()); err != nil {
		t.Fatalf("insert requests: %v", err)
	}
	got := selectRows(t, st, `SELECT service, host, hw_class, endpoint, latency_us, status, hex(trace_id), hex(span_id),
		thread_id, weight, toString(ts) FROM requests ORDER BY ts`)
	want := [][]string{
		{"checkout", "web-7", "gen9", "/v1/cart", "1234", "200", strings.Repeat("01", 16), strings.Repeat("11", 8), "4242", "9", stampAt(now, 0)},
		{"billing", "web-7", "gen9", "/v1/pay", "5000", "503", strings.Repeat("00", 16), strings.Repeat("00", 8), "0", "1", stampAt(now, time.Millisecond)},
		{"checkout", "web-7", "gen9", "GET /healthz", "0", "OK", strings.Repeat("02", 16), strings.Repeat("22", 8), "0", "1", stampAt(now, 2*time.Millisecond)},
		{"checkout", "web-7", "gen9", "/v1/export", "4294967295", "ERROR", strings.Repeat("03", 16), strings.Repeat("33", 8), "0", "1", stampAt(now, 3*time.Millisecond)},
		{"checkout", "web-7", "gen9", "/v1/cart", "1000", "UNSET", strings.Repeat("04", 16), strings.Repeat("44", 8), "0", "4294967295", stampAt(now, 4*time.Millisecond)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("requests (-want +got):\n%s", diff)
	}
	// The rollup view ran on the block: weights sum per service.
	if got := selectRows(t, st, "SELECT service, sum(weighted_count) FROM latency_1s GROUP BY service ORDER BY service"); !cmp.Equal(got,
		[][]string{{"billing", "1"}, {"checkout", fmt.Sprint(uint64(9 + 1 + 1 + math.MaxUint32))}}) {
		t.Errorf("latency_1s weights %q", got)
	}

	points := fixturePoints()
	for i := range points {
		points[i].Start = now.Add(points[i].Start.Sub(fixtureEpoch))
		points[i].End = now.Add(points[i].End.Sub(fixtureEpoch))
	}
	c := NewCounterRows()
	if _, err := c.AppendMetrics(fixturePointsMsg(t, fixtureResource, points)); err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(ctx, "counters", c.Input()); err != nil {
		t.Fatalf("insert counters: %v", err)
	}
	got = selectRows(t, st, `SELECT metric, toString(ts_start), interval_ms, host, cpu, device, mode, toString(value), toString(attrs)
		FROM counters WHERE metric IN ('spikehunt.interrupts', 'spikehunt.network.driver_drops', 'spikehunt.memory.slab', 'spikehunt.cgroup.pressure.stall_time') ORDER BY metric`)
	want = [][]string{
		{"spikehunt.cgroup.pressure.stall_time", stampAt(now, 0), "1000", "web-7", "-1", "shop/checkout-7d9/app", "some", "0.3", "{'spikehunt.pressure.resource':'cpu'}"},
		{"spikehunt.interrupts", stampAt(now, 0), "1500", "web-7", "1", "35", "", "1200", "{'spikehunt.irq.device':'eth0-TxRx-0'}"},
		{"spikehunt.memory.slab", stampAt(now, time.Second), "0", "web-7", "-1", "", "reclaimable", "1073741824", "{}"},
		{"spikehunt.network.driver_drops", stampAt(now, 0), "1000", "web-7", "-1", "eth1", "rx_missed_errors", "0", "{'spikehunt.queue':'7'}"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("counters (-want +got):\n%s", diff)
	}
	if got := selectRows(t, st, "SELECT count(), countIf(length(attrs) = 0) FROM counters"); !cmp.Equal(got, [][]string{{"11", "7"}}) {
		t.Errorf("counters: count, rows without attrs = %q, want 11, 7", got)
	}

	// A block in which no row has attrs: the Map's key column is empty.
	c.Reset()
	if _, err := c.AppendMetrics(fixturePointsMsg(t, fixtureResource, points[7:9])); err != nil { // context switches and slab
		t.Fatal(err)
	}
	if err := st.Insert(ctx, "counters", c.Input()); err != nil {
		t.Fatalf("insert counters without attrs: %v", err)
	}
	if got := selectRows(t, st, "SELECT count() FROM counters WHERE metric = 'spikehunt.context_switches'"); !cmp.Equal(got, [][]string{{"2"}}) {
		t.Errorf("spikehunt.context_switches rows %q, want 2", got)
	}
}

func selectRows(t *testing.T, st store.Store, q string) [][]string {
	t.Helper()
	tab, err := store.Select(context.Background(), st, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return tab.Rows
}

// stampAt is base+d as ClickHouse prints a DateTime64(6, 'UTC').
func stampAt(base time.Time, d time.Duration) string {
	return base.Add(d).UTC().Format("2006-01-02 15:04:05.000000")
}

// BenchmarkAppendTraces decodes an agent message of 2000 spans, about
// what one agent exports per second under load.
func BenchmarkAppendTraces(b *testing.B) {
	const spans = 2000
	base := fixtureRequests()
	reqs := make([]telemetry.Request, spans)
	for i := range reqs {
		reqs[i] = base[i%len(base)]
		reqs[i].Service = [...]string{"checkout", "billing", "search", "auth"}[i%4]
		reqs[i].Start = fixtureEpoch.Add(time.Duration(i) * time.Millisecond)
		reqs[i].TraceID[0], reqs[i].SpanID[0] = byte(i), byte(i>>8)
	}
	msg := fixtureSpansMsg(b, fixtureResource, reqs)
	r := NewRequestRows()
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset()
		if rows, _, err := r.AppendTraces(msg); err != nil || rows != spans {
			b.Fatalf("AppendTraces = %d rows, %v", rows, err)
		}
	}
	b.ReportMetric(float64(spans*b.N)/b.Elapsed().Seconds(), "spans/s")
}
