package ingest

import (
	"fmt"
	"math"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Point attributes that have a column of their own. The agent's samplers
// (agents/collect) give each point at most one of each kind; when several
// are present the first in these lists wins and the rest go to attrs.
const attrCPU = "cpu.logical_number"

var (
	// deviceKeys name what a counter is about: a NIC, a disk, an IRQ line,
	// a workload's cgroup (before the resource of its pressure points), the
	// resource a pressure stall is on (cpu, memory, io).
	deviceKeys = [...]string{"network.interface.name", "system.device", "spikehunt.irq", "spikehunt.cgroup", "spikehunt.pressure.resource"}
	// modeKeys name which of a device's or CPU's counters it is.
	modeKeys = [...]string{
		"cpu.mode", "network.io.direction", "disk.io.direction",
		"spikehunt.softirq.vector", "spikehunt.pressure.kind", "spikehunt.memory.slab.kind",
		"spikehunt.cgroup.memory.event",
		// The driver's own name of an ethtool counter (rx_pause, rx_missed_errors):
		// without it, two counters of one NIC would be one series.
		"spikehunt.counter",
		// The agent's own figures (internal/telemetry/self.go): why requests
		// were dropped, which signal's export requests were sent.
		"spikehunt.drop.reason", "spikehunt.signal",
	}
)

// noCPU is the cpu column of counters that are not per CPU.
const noCPU = -1

// CounterRows accumulates rows of the counters table, column by column. It
// is not safe for concurrent use.
type CounterRows struct {
	tsStart                    *proto.ColDateTime64
	interval                   proto.ColUInt32
	host, metric, device, mode *proto.ColLowCardinality[string]
	cpu                        proto.ColInt16
	value                      proto.ColFloat64
	attrs                      *proto.ColMap[string, string]
	input                      proto.Input

	// One message's rows and their attrs until all proved valid; kept to
	// reuse their memory from message to message.
	pending   []counterRow
	pendingKV []proto.KV[string, string]
	// window bounds the rows' times; refused counts the rows of the last
	// message it left out (see window.go).
	window  timeWindow
	refused int
	// capped counts what the attribute limits cut from the rows of the
	// last message appended (attr_limits.go).
	capped Capped
	// seen finds repeated keys among a point's many attributes (see repeated).
	seen map[string]struct{}
}

// counterRow is one row of counters, decoded but not yet appended.
type counterRow struct {
	tsStart                    proto.DateTime64
	interval                   uint32
	host, metric, device, mode string
	cpu                        int16
	value                      float64
	attrsFrom, attrsTo         int    // its attrs in pendingKV
	capped                     Capped // what the limits cut from it
}

// NewCounterRows returns an empty batch.
func NewCounterRows() *CounterRows {
	lc := func() *proto.ColLowCardinality[string] { return new(proto.ColStr).LowCardinality() }
	c := &CounterRows{
		tsStart: new(proto.ColDateTime64).WithPrecision(proto.PrecisionMicro).WithLocation(time.UTC),
		host:    lc(), metric: lc(), device: lc(), mode: lc(),
		attrs: proto.NewMap[string, string](lc(), new(proto.ColStr)),
	}
	c.input = proto.Input{
		{Name: "ts_start", Data: c.tsStart},
		{Name: "interval_ms", Data: &c.interval},
		{Name: "host", Data: c.host},
		{Name: "metric", Data: c.metric},
		{Name: "cpu", Data: &c.cpu},
		{Name: "device", Data: c.device},
		{Name: "mode", Data: c.mode},
		{Name: "value", Data: &c.value},
		{Name: "attrs", Data: c.attrs},
	}
	return c
}

// AppendMetrics decodes one message, an ExportMetricsServiceRequest, and
// appends a row per data point of its Sum and Gauge metrics; other metric
// types (histograms, summaries) have no place in the table and are left
// out without a count. It is all or nothing, like AppendTraces, and its
// error is a *DecodeError.
func (c *CounterRows) AppendMetrics(msg []byte) (rows int, err error) {
	c.refused, c.capped = 0, Capped{}
	md, err := unmarshalMetrics(msg)
	if err != nil {
		return 0, err
	}
	c.pending, c.pendingKV = c.pending[:0], c.pendingKV[:0]
	if err := c.decode(md); err != nil {
		return 0, err
	}
	for i := range c.pending {
		if !c.window.holds(c.pending[i].tsStart) {
			c.refused++
			continue
		}
		c.append(&c.pending[i])
		c.capped.add(c.pending[i].capped)
	}
	rows = len(c.pending) - c.refused
	clear(c.pending) // drop the message's strings; the columns hold their own references
	clear(c.pendingKV)
	return rows, nil
}

// SetWindow makes the batch leave out rows outside w (window.go).
func (c *CounterRows) SetWindow(w timeWindow) { c.window = w }

// Refused is how many rows of the last message appended were outside
// the window, and so left out.
func (c *CounterRows) Refused() int { return c.refused }

// Capped is what the attribute limits (attr_limits.go) cut from the rows
// of the last message appended.
func (c *CounterRows) Capped() Capped { return c.capped }

// Rows is how many rows the batch holds.
func (c *CounterRows) Rows() int { return c.tsStart.Rows() }

// Input is the batch as an insert block, its columns named as in the
// counters table. It stays valid, and grows, as messages are appended.
func (c *CounterRows) Input() proto.Input { return c.input }

// Reset empties the batch and keeps its memory for the next one.
func (c *CounterRows) Reset() { c.input.Reset() }

// appendOwn appends one row of a component's own figures (SelfCounters):
// no CPU, no attrs.
func (c *CounterRows) appendOwn(ts time.Time, intervalMS uint32, host, metric, device, mode string, value float64) {
	c.tsStart.Append(ts)
	c.interval.Append(intervalMS)
	c.host.Append(host)
	c.metric.Append(metric)
	c.cpu.Append(noCPU)
	c.device.Append(device)
	c.mode.Append(mode)
	c.value.Append(value)
	c.attrs.AppendKV(nil)
}

func (c *CounterRows) append(row *counterRow) {
	c.tsStart.AppendRaw(row.tsStart)
	c.interval.Append(row.interval)
	c.host.Append(row.host)
	c.metric.Append(row.metric)
	c.cpu.Append(row.cpu)
	c.device.Append(row.device)
	c.mode.Append(row.mode)
	c.value.Append(row.value)
	c.attrs.AppendKV(c.pendingKV[row.attrsFrom:row.attrsTo])
}

// decode fills pending with a row per Sum and Gauge point of md, or
// returns the first point that is not fit for the table.
func (c *CounterRows) decode(md pmetric.Metrics) *DecodeError {
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		host := hostOf(rms.At(i).Resource().Attributes())
		sms := rms.At(i).ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				m := ms.At(k)
				var points pmetric.NumberDataPointSlice
				switch m.Type() {
				case pmetric.MetricTypeSum:
					points = m.Sum().DataPoints()
				case pmetric.MetricTypeGauge:
					points = m.Gauge().DataPoints()
				default:
					continue
				}
				for p := range points.Len() {
					if err := c.decodePoint(host, m, points.At(p)); err != nil {
						err.Detail = fmt.Sprintf("point %d of metric %q: %s", p, m.Name(), err.Detail)
						return err
					}
				}
			}
		}
	}
	return nil
}

// decodePoint appends dp's row to pending.
func (c *CounterRows) decodePoint(host string, m pmetric.Metric, dp pmetric.NumberDataPoint) *DecodeError {
	row := counterRow{host: host, metric: m.Name(), cpu: noCPU}
	if m.Type() == pmetric.MetricTypeSum {
		var err *DecodeError
		if row.tsStart, row.interval, err = interval(dp.StartTimestamp(), dp.Timestamp()); err != nil {
			return err
		}
	} else {
		// A gauge is a reading at one instant: interval_ms stays 0.
		ts := dp.Timestamp()
		if !plausible(ts) {
			return reject(badTimestamp, "time %s is not between 2000 and 2200: is the clock of the exporting host set?", stamp(ts))
		}
		row.tsStart = micros(ts)
	}
	switch dp.ValueType() {
	case pmetric.NumberDataPointValueTypeInt:
		row.value = float64(dp.IntValue())
	case pmetric.NumberDataPointValueTypeDouble:
		row.value = dp.DoubleValue()
	default:
		return reject(badPoint, "the point has no value")
	}
	if math.IsNaN(row.value) || math.IsInf(row.value, 0) {
		// One NaN would turn every sum and rate over its series into NaN.
		return reject(badPoint, "value %v: a counter delta or gauge reading is a finite number", row.value)
	}
	a := dp.Attributes()
	if v, ok := a.Get(attrCPU); ok {
		n, ok := intValue(v)
		if !ok || n < 0 || n > math.MaxInt16 {
			return reject(badPoint, "%s = %s (%s), want a CPU number from 0 to %d", attrCPU, v.AsString(), v.Type(), math.MaxInt16)
		}
		row.cpu = int16(n)
	}
	deviceKey, device, hasDevice := firstOf(a, deviceKeys[:])
	modeKey, mode, hasMode := firstOf(a, modeKeys[:])
	row.host = capString(row.host, &row.capped.ValueTooLong)
	row.device = capString(device.AsString(), &row.capped.ValueTooLong)
	row.mode = capString(mode.AsString(), &row.capped.ValueTooLong)
	row.attrsFrom = len(c.pendingKV)
	many := c.startPoint(a.Len())
	for k, v := range a.All() {
		switch {
		case k == attrCPU || hasDevice && k == deviceKey || hasMode && k == modeKey:
			continue // in a column of its own, repeats too
		case len(k) > MaxAttrKeyBytes:
			row.capped.KeyTooLong++
		case c.repeated(k, row.attrsFrom, many):
		case len(c.pendingKV)-row.attrsFrom >= MaxPointAttrs:
			row.capped.TooMany++
		default:
			c.pendingKV = append(c.pendingKV, proto.KV[string, string]{Key: k, Value: capString(v.AsString(), &row.capped.ValueTooLong)})
		}
	}
	row.attrsTo = len(c.pendingKV)
	c.pending = append(c.pending, row)
	return nil
}

// interval checks a Sum point's times and returns its start and length. A
// delta without its start is a number without a rate: the table divides
// by interval_ms, never by the nominal sampling period.
func interval(start, end pcommon.Timestamp) (proto.DateTime64, uint32, *DecodeError) {
	switch {
	case start == 0:
		return 0, 0, reject(badPoint, "start 0 (unset), time %s: a Sum point needs the start of the interval its delta covers", stamp(end))
	case !plausible(start) || !plausible(end):
		return 0, 0, reject(badTimestamp, "start %s, time %s: not between 2000 and 2200: is the clock of the exporting host set?", stamp(start), stamp(end))
	case end < start:
		return 0, 0, reject(badPoint, "time %s before start %s", stamp(end), stamp(start))
	}
	ms := (end - start + 500_000) / 1_000_000 // rounded
	if ms > math.MaxUint32 {
		return 0, 0, reject(badPoint, "start %s, time %s: an interval of over 49 days is no counter delta", stamp(start), stamp(end))
	}
	return micros(start), uint32(ms), nil
}

// firstOf is the first of keys present in a, and its value as Get reads it.
func firstOf(a pcommon.Map, keys []string) (string, pcommon.Value, bool) {
	for _, k := range keys {
		if v, ok := a.Get(k); ok {
			return k, v, true
		}
	}
	return "", pcommon.NewValueEmpty(), false
}

// A Map decoded from the wire keeps repeated keys. Get reads the first,
// and so does a row: repeats are dropped. A handful of attributes, the
// usual case, are searched in place; a point with many gets a set, so
// that a hostile message cannot make the decoder quadratic.
const manyAttrs = 16

// startPoint prepares repeated for a point of n attributes and tells
// whether to use the set.
func (c *CounterRows) startPoint(n int) (many bool) {
	if n <= manyAttrs {
		return false
	}
	if c.seen == nil {
		c.seen = make(map[string]struct{}, n)
	}
	clear(c.seen)
	return true
}

// repeated tells whether the current point, whose attrs start at
// pendingKV[from], had k already, and records it.
func (c *CounterRows) repeated(k string, from int, many bool) bool {
	if many {
		if _, ok := c.seen[k]; ok {
			return true
		}
		c.seen[k] = struct{}{}
		return false
	}
	for _, kv := range c.pendingKV[from:] {
		if kv.Key == k {
			return true
		}
	}
	return false
}
