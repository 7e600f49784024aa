package store_test

import (
	"time"

	"github.com/ClickHouse/ch-go/proto"
)

// requestsDDL is a requests-shaped table for store tests (the real schema
// lives in internal/schema and has its own tests).
const requestsDDL = `CREATE TABLE IF NOT EXISTS requests (
	ts DateTime64(6, 'UTC') CODEC(Delta, ZSTD),
	service LowCardinality(String), host LowCardinality(String), hw_class LowCardinality(String),
	endpoint LowCardinality(String), latency_us UInt32 CODEC(T64, ZSTD), status UInt16,
	trace_id FixedString(16), span_id FixedString(8), thread_id UInt32, weight UInt32
) ENGINE = MergeTree ORDER BY (service, host, ts)`

// requestsBatch holds reusable columns for requests rows.
type requestsBatch struct {
	ts                               *proto.ColDateTime64
	service, host, hwClass, endpoint *proto.ColLowCardinality[string]
	latency, thread, weight          proto.ColUInt32
	status                           proto.ColUInt16
	traceID                          proto.ColFixedStr
	spanID                           proto.ColFixedStr
}

func newRequestsBatch() *requestsBatch {
	b := &requestsBatch{
		ts:      new(proto.ColDateTime64).WithPrecision(proto.PrecisionMicro),
		service: new(proto.ColStr).LowCardinality(), host: new(proto.ColStr).LowCardinality(),
		hwClass: new(proto.ColStr).LowCardinality(), endpoint: new(proto.ColStr).LowCardinality(),
	}
	b.traceID.SetSize(16)
	b.spanID.SetSize(8)
	return b
}

var zeroTrace = make([]byte, 16)

func (b *requestsBatch) add(ts time.Time, service, host, hw, endpoint string, latencyUs uint32, weight uint32) {
	b.ts.Append(ts)
	b.service.Append(service)
	b.host.Append(host)
	b.hwClass.Append(hw)
	b.endpoint.Append(endpoint)
	b.latency.Append(latencyUs)
	b.status.Append(200)
	b.traceID.Append(zeroTrace)
	b.spanID.Append(zeroTrace[:8])
	b.thread.Append(uint32(latencyUs % 64))
	b.weight.Append(weight)
}

func (b *requestsBatch) reset() {
	for _, c := range b.input() {
		c.Data.(proto.Resettable).Reset()
	}
}

func (b *requestsBatch) rows() int { return b.latency.Rows() }

func (b *requestsBatch) input() proto.Input {
	return proto.Input{
		{Name: "ts", Data: b.ts}, {Name: "service", Data: b.service}, {Name: "host", Data: b.host},
		{Name: "hw_class", Data: b.hwClass}, {Name: "endpoint", Data: b.endpoint},
		{Name: "latency_us", Data: &b.latency}, {Name: "status", Data: &b.status},
		{Name: "trace_id", Data: &b.traceID}, {Name: "span_id", Data: &b.spanID},
		{Name: "thread_id", Data: &b.thread}, {Name: "weight", Data: &b.weight},
	}
}
