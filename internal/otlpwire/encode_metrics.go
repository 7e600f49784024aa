package otlpwire

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// agentService names the agent itself as the resource's service.name on
// kernel counters, which describe the host rather than any app.
const agentService = "spikehunt-agent"

var metricsMarshaler = &pmetric.ProtoMarshaler{}

// EncodeMetrics turns counter deltas into one OTLP export request: a Sum
// with delta temporality per metric name, each point carrying its measured
// interval as start and end. Points whose Start equals End are readings of
// a level (slab bytes, requests in flight) and become a Gauge.
func EncodeMetrics(res telemetry.Resource, points []telemetry.Point) ([]byte, error) {
	return metricsMarshaler.MarshalMetrics(Metrics(res, points))
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
