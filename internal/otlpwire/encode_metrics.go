package otlpwire

import (
	"math"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// agentService names the agent itself as the resource's service.name on
// kernel counters, which describe the host rather than any app.
const agentService = "spikehunt-agent"

// EncodeMetrics turns counter deltas into one OTLP export request: a Sum
// with delta temporality per metric name, each point carrying its measured
// interval as start and end. Points whose Start equals End are readings of
// a level (slab bytes, requests in flight) and become a Gauge.
//
// It writes protobuf straight from the points: the message Metrics builds
// as pdata (TestEncodeMetricsMatchesPdata holds the two together), without
// pdata's objects for each point, which cost several times the encoding
// on a node whose cgroups add hundreds of points a second. A point's
// attribute keys are distinct, as the samplers make them (pdata would
// keep the last of two alike, this encoder both). Field numbers
// are those of opentelemetry-proto (metrics/v1/metrics.proto,
// collector/metrics/v1/metrics_service.proto).
func EncodeMetrics(res telemetry.Resource, points []telemetry.Point) ([]byte, error) {
	g := groupMetrics(points)
	scope := bytesLen(1, scopeNameLen) // InstrumentationScope{name}
	scopeMetrics := bytesLen(1, scope)
	for i := range g.metrics {
		scopeMetrics += bytesLen(2, g.metricSize(points, i))
	}
	resource := resourceSize(res, agentService)
	body := bytesLen(1, resource) + bytesLen(2, scopeMetrics)
	b := make([]byte, 0, bytesLen(1, body))
	// ExportMetricsServiceRequest.resource_metrics = 1
	b = appendLen(b, 1, body)
	// ResourceMetrics.resource = 1, scope_metrics = 2; ScopeMetrics.scope = 1
	b = appendResource(appendLen(b, 1, resource), res, agentService)
	b = appendLen(b, 2, scopeMetrics)
	b = appendString(appendLen(b, 1, scope), 1, scopeName)
	for i := range g.metrics {
		// ScopeMetrics.metrics = 2
		b = g.appendMetric(appendLen(b, 2, g.metricSize(points, i)), points, i)
	}
	return b, nil
}

// metricGroups are points grouped into metrics by name and kind (a Sum or
// a Gauge), in order of first appearance, as Metrics groups them.
type metricGroups struct {
	metrics []metricGroup
	next    []int // per point, the next point of its metric, -1 after the last
	sizes   []int // per point, the size of its NumberDataPoint
}

type metricGroup struct {
	first, last int // its first and last point
	gauge       bool
	dataPoints  int // the size of its data points, each with its tag and length
}

func groupMetrics(points []telemetry.Point) metricGroups {
	type key struct {
		name  string
		gauge bool
	}
	g := metricGroups{next: make([]int, len(points)), sizes: make([]int, len(points))}
	index := map[key]int{}
	cur := -1
	for i := range points {
		p := &points[i]
		gauge := p.IsGauge()
		// A sampler emits a metric's points one after the other: most
		// points belong to the metric of the point before.
		if cur < 0 || g.metrics[cur].gauge != gauge || points[g.metrics[cur].first].Metric != p.Metric {
			k := key{p.Metric, gauge}
			j, ok := index[k]
			if !ok {
				j = len(g.metrics)
				index[k] = j
				g.metrics = append(g.metrics, metricGroup{first: i, last: i, gauge: gauge})
			}
			cur = j
		}
		m := &g.metrics[cur]
		if m.last != i {
			g.next[m.last] = i
			m.last = i
		}
		g.next[i] = -1
		g.sizes[i] = dataPointSize(p, gauge)
		m.dataPoints += bytesLen(1, g.sizes[i])
	}
	return g
}

// Sum{data_points = 1, aggregation_temporality = 2 (DELTA),
// is_monotonic = 3 (true)}, as a Sum's body after its points.
const sumTrailer = 4

// metricSize is the size of metric i's Metric message.
func (g *metricGroups) metricSize(points []telemetry.Point, i int) int {
	m := &g.metrics[i]
	p := &points[m.first]
	n := stringFieldSize(1, p.Metric) + stringFieldSize(3, p.Unit)
	if m.gauge {
		return n + bytesLen(5, m.dataPoints) // Metric.gauge = 5
	}
	return n + bytesLen(7, m.dataPoints+sumTrailer) // Metric.sum = 7
}

// appendMetric appends metric i's Metric{name = 1, unit = 3, gauge = 5 |
// sum = 7}.
func (g *metricGroups) appendMetric(b []byte, points []telemetry.Point, i int) []byte {
	m := &g.metrics[i]
	p := &points[m.first]
	b = appendStringField(b, 1, p.Metric)
	b = appendStringField(b, 3, p.Unit)
	if m.gauge {
		b = appendLen(b, 5, m.dataPoints)
	} else {
		b = appendLen(b, 7, m.dataPoints+sumTrailer)
	}
	for j := m.first; j >= 0; j = g.next[j] {
		// Gauge.data_points = 1, Sum.data_points = 1
		b = appendDataPoint(appendLen(b, 1, g.sizes[j]), &points[j], m.gauge)
	}
	if !m.gauge {
		b = appendVarintField(b, 2, uint64(pmetric.AggregationTemporalityDelta))
		b = appendVarintField(b, 3, 1)
	}
	return b
}

// dataPointSize is the size of appendDataPoint's output for p.
func dataPointSize(p *telemetry.Point, gauge bool) int {
	n := 9 // as_double
	if !gauge && p.Start.UnixNano() != 0 {
		n += 9
	}
	if p.End.UnixNano() != 0 {
		n += 9
	}
	for _, a := range p.Attrs {
		switch v := a.Value.(type) {
		case string:
			n += bytesLen(7, strAttrSize(a.Key, v))
		case int64:
			n += bytesLen(7, intAttrSize(a.Key, v))
		case int:
			n += bytesLen(7, intAttrSize(a.Key, int64(v)))
		}
	}
	return n
}

// appendDataPoint appends p as a NumberDataPoint{start_time_unix_nano = 2
// (not on a gauge), time_unix_nano = 3, as_double = 4, attributes = 7}.
// A zero timestamp is left out, as proto3 leaves out a zero field, and so
// is an attribute whose value is neither a string nor an integer, as
// Metrics leaves it out.
func appendDataPoint(b []byte, p *telemetry.Point, gauge bool) []byte {
	if start := p.Start.UnixNano(); !gauge && start != 0 {
		b = appendFixed64(b, 2, uint64(start))
	}
	if end := p.End.UnixNano(); end != 0 {
		b = appendFixed64(b, 3, uint64(end))
	}
	b = appendFixed64(b, 4, math.Float64bits(p.Value))
	for _, a := range p.Attrs {
		switch v := a.Value.(type) {
		case string:
			b = appendStrAttr(b, 7, a.Key, v)
		case int64:
			b = appendIntAttr(b, 7, a.Key, v)
		case int:
			b = appendIntAttr(b, 7, a.Key, int64(v))
		}
	}
	return b
}

// stringFieldSize and appendStringField are for a string field that
// proto3 leaves out when empty.
func stringFieldSize(field int, s string) int {
	if s == "" {
		return 0
	}
	return bytesLen(field, len(s))
}

func appendStringField(b []byte, field int, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(b, field, s)
}

// Metrics builds the pdata form of EncodeMetrics.
func Metrics(res telemetry.Resource, points []telemetry.Point) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	putResource(rm.Resource().Attributes(), res)
	rm.Resource().Attributes().PutStr(attrServiceName, agentService)
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName(scopeName)
	type key struct {
		name  string
		gauge bool
	}
	byName := map[key]pmetric.NumberDataPointSlice{}
	for i := range points {
		p := &points[i]
		gauge := p.IsGauge()
		k := key{p.Metric, gauge}
		dps, ok := byName[k]
		if !ok {
			m := sm.Metrics().AppendEmpty()
			m.SetName(p.Metric)
			m.SetUnit(p.Unit)
			if gauge {
				dps = m.SetEmptyGauge().DataPoints()
			} else {
				sum := m.SetEmptySum()
				sum.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
				sum.SetIsMonotonic(true)
				dps = sum.DataPoints()
			}
			byName[k] = dps
		}
		dp := dps.AppendEmpty()
		if !gauge {
			dp.SetStartTimestamp(pcommon.NewTimestampFromTime(p.Start))
		}
		dp.SetTimestamp(pcommon.NewTimestampFromTime(p.End))
		dp.SetDoubleValue(p.Value)
		a := dp.Attributes()
		a.EnsureCapacity(len(p.Attrs))
		for _, at := range p.Attrs {
			switch v := at.Value.(type) {
			case string:
				a.PutStr(at.Key, v)
			case int64:
				a.PutInt(at.Key, v)
			case int:
				a.PutInt(at.Key, int64(v))
			}
		}
	}
	return md
}
