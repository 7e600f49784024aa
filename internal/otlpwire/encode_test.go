package otlpwire

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

var res = telemetry.Resource{HostName: "node-7", NodeName: "node-7", HWClass: "gen5"}

// The bytes decode with the OTLP protobuf definitions themselves (not
// pdata), as ExportTraceServiceRequest: what the Collector's kafka exporter
// writes with encoding otlp_proto and what the ingest reads.
func TestEncodeSpansIsAnOTLPExportRequest(t *testing.T) {
	start := testenv.RecentDay().Add(3 * time.Hour)
	reqs := []telemetry.Request{
		{Service: "billy", Endpoint: "/get", Start: start, Duration: 1200 * time.Millisecond, Status: "503",
			TraceID: [16]byte{1, 2, 3}, SpanID: [8]byte{4}, ThreadID: 21560, Weight: 1},
		{Service: "billy", Endpoint: "/put", Start: start, Duration: 4 * time.Millisecond, Status: "OK", Weight: 10},
		{Service: "checkout", Endpoint: "/pay", Start: start, Duration: time.Millisecond, Status: "UNSET"},
	}
	b, err := EncodeSpans(res, reqs)
	if err != nil {
		t.Fatal(err)
	}
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	if len(req.ResourceSpans) != 2 {
		t.Fatalf("%d resource spans, want one per service", len(req.ResourceSpans))
	}
	rs := req.ResourceSpans[0]
	got := map[string]string{}
	for _, kv := range rs.Resource.Attributes {
		got[kv.Key] = kv.Value.GetStringValue()
	}
	want := map[string]string{"service.name": "billy", "host.name": "node-7", "k8s.node.name": "node-7", "spikehunt.hw_class": "gen5"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("resource %s = %q, want %q", k, got[k], v)
		}
	}
	s := rs.ScopeSpans[0].Spans[0]
	if s.Name != "/get" || s.Kind != tracepb.Span_SPAN_KIND_SERVER || s.EndTimeUnixNano-s.StartTimeUnixNano != uint64(1200*time.Millisecond) {
		t.Errorf("span %s kind %v duration %d", s.Name, s.Kind, s.EndTimeUnixNano-s.StartTimeUnixNano)
	}
	if s.Status.Code != tracepb.Status_STATUS_CODE_ERROR || s.TraceId[0] != 1 || s.SpanId[0] != 4 {
		t.Errorf("status %v trace %x span %x", s.Status.Code, s.TraceId, s.SpanId)
	}
	ints := map[string]int64{}
	for _, kv := range s.Attributes {
		ints[kv.Key] = kv.Value.GetIntValue()
	}
	if ints["thread.id"] != 21560 || ints["spikehunt.weight"] != 1 || ints["http.response.status_code"] != 503 {
		t.Errorf("attributes %v", ints)
	}
	if w := rs.ScopeSpans[0].Spans[1].Attributes; w[len(w)-1].Value.GetIntValue() != 10 && w[0].Value.GetIntValue() != 10 {
		t.Errorf("sampled span's weight: %v", w)
	}
}

func TestEncodeMetricsCarriesTheMeasuredInterval(t *testing.T) {
	t0 := testenv.RecentDay().Add(3 * time.Hour)
	t1 := t0.Add(2500 * time.Millisecond) // a late tick
	pts := []telemetry.Point{
		{Metric: "system.cpu.time", Unit: "s", Start: t0, End: t1, Value: 2.5,
			Attrs: []telemetry.Attr{telemetry.Int("cpu.logical_number", 4), telemetry.Str("cpu.mode", "softirq")}},
		{Metric: "system.cpu.time", Unit: "s", Start: t0, End: t1, Value: 0.01,
			Attrs: []telemetry.Attr{telemetry.Int("cpu.logical_number", 5), telemetry.Str("cpu.mode", "softirq")}},
		{Metric: "spikehunt.memory.slab", Unit: "By", Start: t1, End: t1, Value: 1 << 20},
	}
	b, err := EncodeMetrics(res, pts)
	if err != nil {
		t.Fatal(err)
	}
	var req colmetrics.ExportMetricsServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	ms := req.ResourceMetrics[0].ScopeMetrics[0].Metrics
	if len(ms) != 2 {
		t.Fatalf("%d metrics, want 2", len(ms))
	}
	sum := ms[0].GetSum()
	if sum == nil || sum.AggregationTemporality != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA || len(sum.DataPoints) != 2 {
		t.Fatalf("system.cpu.time: %v", ms[0])
	}
	dp := sum.DataPoints[0]
	if dp.TimeUnixNano-dp.StartTimeUnixNano != uint64(2500*time.Millisecond) || dp.GetAsDouble() != 2.5 {
		t.Fatalf("data point interval %d value %v", dp.TimeUnixNano-dp.StartTimeUnixNano, dp.GetAsDouble())
	}
	if ms[1].GetGauge() == nil {
		t.Fatalf("slab is not a gauge: %v", ms[1])
	}
}

// EncodeSpans writes protobuf by hand; over random requests it must mean
// exactly what pdata's marshaling of Traces means, field by field.
func TestEncodeSpansMatchesPdata(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	statuses := []string{"200", "404", "503", "OK", "ERROR", "UNSET", "weird", "-1"}
	services := []string{"billy", "checkout", strings.Repeat("s", 200)}
	start := testenv.RecentDay().Add(3 * time.Hour)
	for round := range 50 {
		reqs := make([]telemetry.Request, rng.IntN(300))
		for i := range reqs {
			r := &reqs[i]
			r.Service = services[rng.IntN(len(services))]
			r.Endpoint = "/v1/" + strings.Repeat("x", rng.IntN(300))
			r.Start = start.Add(time.Duration(rng.Int64N(int64(time.Hour))))
			r.Duration = time.Duration(rng.Int64N(int64(2 * time.Second)))
			r.Status = statuses[rng.IntN(len(statuses))]
			if rng.IntN(3) > 0 {
				binary.LittleEndian.PutUint64(r.TraceID[:], rng.Uint64())
				binary.LittleEndian.PutUint64(r.SpanID[:], rng.Uint64())
			}
			r.ThreadID = uint32(rng.IntN(3)) * rng.Uint32()
			r.Weight = uint32(rng.IntN(3)) * uint32(rng.IntN(1000))
		}
		resource := res
		if round%2 == 1 {
			resource = telemetry.Resource{HostName: "node-8"}
		}
		got, err := EncodeSpans(resource, reqs)
		if err != nil {
			t.Fatal(err)
		}
		want, err := tracesMarshaler.MarshalTraces(Traces(resource, reqs))
		if err != nil {
			t.Fatal(err)
		}
		var g, w coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(got, &g); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := proto.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		// pdata writes an empty Status message where the hand encoder
		// writes none; both mean STATUS_CODE_UNSET.
		for _, r := range [2]*coltrace.ExportTraceServiceRequest{&g, &w} {
			for _, rs := range r.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						if s.Status != nil && s.Status.Code == 0 && s.Status.Message == "" {
							s.Status = nil
						}
					}
				}
			}
		}
		if !proto.Equal(&g, &w) {
			t.Fatalf("round %d (%d requests): the hand encoding differs from pdata's", round, len(reqs))
		}
	}
}

// EncodeMetrics writes protobuf by hand; over random points it must mean
// exactly what pdata's marshaling of Metrics means, field by field.
func TestEncodeMetricsMatchesPdata(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	names := []string{"system.cpu.time", "spikehunt.cgroup.cpu.usage", "spikehunt.memory.slab", strings.Repeat("m", 200)}
	units := []string{"s", "{period}", "By", ""}
	keys := []string{"cpu.logical_number", "cpu.mode", "spikehunt.cgroup", strings.Repeat("k", 150)}
	start := testenv.RecentDay().Add(3 * time.Hour)
	marshaler := &pmetric.ProtoMarshaler{}
	for round := range 50 {
		pts := make([]telemetry.Point, rng.IntN(600))
		for i := range pts {
			p := &pts[i]
			m := rng.IntN(len(names))
			p.Metric, p.Unit = names[m], units[m]
			p.Start = start.Add(time.Duration(rng.Int64N(int64(time.Hour))))
			p.End = p.Start.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
			switch rng.IntN(5) {
			case 0:
				p.End = p.Start // a gauge
			case 1:
				p.Start = time.Unix(0, 0) // a zero timestamp, left out
			}
			p.Value = []float64{0, rng.Float64() * 1e9, -1, math.Inf(1)}[rng.IntN(4)]
			for k, key := range keys {
				switch rng.IntN(5) {
				case 0:
					p.Attrs = append(p.Attrs, telemetry.Str(key, strings.Repeat("v", rng.IntN(200))))
				case 1:
					p.Attrs = append(p.Attrs, telemetry.Int(key, rng.Int64N(1<<40)-1<<39))
				case 2:
					p.Attrs = append(p.Attrs, telemetry.Attr{Key: key, Value: k - 2}) // an int
				case 3:
					p.Attrs = append(p.Attrs, telemetry.Attr{Key: key, Value: 1.5}) // neither: left out
				}
			}
		}
		resource := res
		if round%2 == 1 {
			resource = telemetry.Resource{HostName: "node-8"}
		}
		got, err := EncodeMetrics(resource, pts)
		if err != nil {
			t.Fatal(err)
		}
		want, err := marshaler.MarshalMetrics(Metrics(resource, pts))
		if err != nil {
			t.Fatal(err)
		}
		var g, w colmetrics.ExportMetricsServiceRequest
		if err := proto.Unmarshal(got, &g); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := proto.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&g, &w) {
			t.Fatalf("round %d (%d points): the hand encoding differs from pdata's", round, len(pts))
		}
	}
}

// BenchmarkEncodeMetrics encodes what one sampling pass of a node with
// 200 cgroups (v2) sends: 50 reported cgroups of 11 series, the "other"
// series and 300 host series, by hand and through pdata alternately in one
// run, and reports both and their ratio.
func BenchmarkEncodeMetrics(b *testing.B) {
	t0 := testenv.RecentDay().Add(3 * time.Hour)
	t1 := t0.Add(time.Second)
	var pts []telemetry.Point
	for c := range 50 {
		cg := telemetry.Str("spikehunt.cgroup", fmt.Sprintf("default/web-%d/app", c))
		pts = append(pts, telemetry.Point{Metric: "spikehunt.cgroup.cpu.limit", Unit: "{cpu}", Start: t1, End: t1, Value: 0.5, Attrs: []telemetry.Attr{cg}})
		for _, m := range []string{"spikehunt.cgroup.cpu.usage", "spikehunt.cgroup.cpu.periods", "spikehunt.cgroup.cpu.throttled_periods", "spikehunt.cgroup.cpu.throttled_time"} {
			pts = append(pts, telemetry.Point{Metric: m, Unit: "s", Start: t0, End: t1, Value: float64(c), Attrs: []telemetry.Attr{cg}})
		}
		for _, kind := range []string{"some", "full"} {
			pts = append(pts, telemetry.Point{Metric: "spikehunt.cgroup.pressure.stall_time", Unit: "s", Start: t0, End: t1, Value: 0.001,
				Attrs: []telemetry.Attr{cg, telemetry.Str("spikehunt.pressure.resource", "cpu"), telemetry.Str("spikehunt.pressure.kind", kind)}})
		}
		for _, ev := range []string{"high", "max", "oom", "oom_kill"} {
			pts = append(pts, telemetry.Point{Metric: "spikehunt.cgroup.memory.events", Unit: "{event}", Start: t0, End: t1,
				Attrs: []telemetry.Attr{cg, telemetry.Str("spikehunt.cgroup.memory.event", ev)}})
		}
	}
	pts = append(pts, telemetry.Point{Metric: "spikehunt.cgroup.cpu.usage", Unit: "s", Start: t0, End: t1, Value: 3, Attrs: []telemetry.Attr{telemetry.Str("spikehunt.cgroup", "other")}})
	for i := range 300 {
		pts = append(pts, telemetry.Point{Metric: fmt.Sprintf("system.host.metric_%d", i%30), Unit: "{packet}", Start: t0, End: t1, Value: float64(i),
			Attrs: []telemetry.Attr{telemetry.Int("cpu.logical_number", int64(i%8)), telemetry.Str("network.interface.name", "eth0")}})
	}
	marshaler := &pmetric.ProtoMarshaler{}
	var direct, viaPdata time.Duration
	b.ReportAllocs()
	for b.Loop() {
		began := time.Now()
		if _, err := EncodeMetrics(res, pts); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if _, err := marshaler.MarshalMetrics(Metrics(res, pts)); err != nil {
			b.Fatal(err)
		}
		direct, viaPdata = direct+mid.Sub(began), viaPdata+time.Since(mid)
	}
	n := float64(b.N)
	b.ReportMetric(float64(direct.Microseconds())/n, fmt.Sprintf("otlpwire.encode_metrics_%d_points_us:µs", len(pts)))
	b.ReportMetric(float64(viaPdata.Microseconds())/n, fmt.Sprintf("otlpwire.encode_metrics_%d_points_pdata_us:µs", len(pts)))
	b.ReportMetric(float64(direct)/float64(viaPdata), "otlpwire.encode_metrics_ratio_to_pdata:x")
}
