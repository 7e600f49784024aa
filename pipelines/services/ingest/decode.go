package ingest

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// What the decoders share: the rejection error, the protobuf step, the
// timestamp bounds and the resource attributes every row carries.

// DecodeError is why a message cannot be ingested; it goes to the
// dead-letter topic with Reason in a header. Retrying such a message can
// never succeed, which is what sets it apart from a failed insert.
type DecodeError struct {
	Reason string // metric/header label: "protobuf", "timestamp", "span", "point"
	Detail string // one human sentence, e.g. "span 3 of service billy: end 2026-… before start …"
}

func (e *DecodeError) Error() string {
	return "ingest: message rejected (" + e.Reason + "): " + e.Detail
}

// Reasons, a closed set so that they can label a metric.
const (
	badProtobuf  = "protobuf"  // not the OTLP request the topic carries
	badTimestamp = "timestamp" // missing, inverted or implausible times
	badSpan      = "span"      // a request span the table cannot hold
	badPoint     = "point"     // a data point the table cannot hold
)

func reject(reason, format string, args ...any) *DecodeError {
	return &DecodeError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Plausible times. A zero or garbage timestamp would land in a partition
// of its own (PARTITION BY toDate) and expire at once or never; the bounds
// also keep every nanosecond count below 2^63, so differences cannot wrap.
var (
	earliest = pcommon.NewTimestampFromTime(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	latest   = pcommon.NewTimestampFromTime(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC))
)

func plausible(t pcommon.Timestamp) bool { return t >= earliest && t <= latest }

// stamp renders a timestamp for a Detail. 0 is what OTLP sends for unset;
// past 2262 a time.Time no longer holds the nanoseconds.
func stamp(t pcommon.Timestamp) string {
	switch {
	case t == 0:
		return "0 (unset)"
	case t > math.MaxInt64:
		return strconv.FormatUint(uint64(t), 10) + " ns (after 2262)"
	}
	return t.AsTime().Format(time.RFC3339Nano)
}

// micros is t as DateTime64(6): ClickHouse keeps microseconds.
func micros(t pcommon.Timestamp) proto.DateTime64 { return proto.DateTime64(t / 1000) }

// Resource attribute keys, as agents/export writes them.
const (
	attrServiceName = "service.name"
	attrHostName    = "host.name"
	attrNodeName    = "k8s.node.name"
	attrHWClass     = "spikehunt.hw_class"
)

// Stand-ins for missing names. unknown_service is what OTel SDKs report
// without service.name; an empty host would put every such row on one
// shard under a key nobody can filter on.
const (
	unknownService = "unknown_service"
	unknownHost    = "unknown"
)

// hostOf is the host a resource describes: host.name, else the Kubernetes
// node name (an agent on a node without a hostname override), else unknown.
func hostOf(res pcommon.Map) string {
	for _, k := range [...]string{attrHostName, attrNodeName} {
		if v, ok := res.Get(k); ok && v.Str() != "" {
			return v.Str()
		}
	}
	return unknownHost
}

// strAttr is the string attribute k, or "" when absent or not a string.
func strAttr(m pcommon.Map, k string) string {
	v, ok := m.Get(k)
	if !ok {
		return ""
	}
	return v.Str()
}

// unmarshalTraces decodes an ExportTraceServiceRequest. pdata is fed
// bytes straight off Kafka: should it panic on some input, the panic
// becomes a rejection, as otherwise the consumer would crash, restart at
// the same offset and crash again.
func unmarshalTraces(msg []byte) (td ptrace.Traces, err error) {
	defer recoverProtobuf("ExportTraceServiceRequest", &err)
	var u ptrace.ProtoUnmarshaler
	td, err = u.UnmarshalTraces(msg)
	if err != nil {
		return td, reject(badProtobuf, "not an OTLP ExportTraceServiceRequest (%v): check that the exporter writes encoding otlp_proto and that only spans go to this topic", err)
	}
	return td, nil
}

// unmarshalMetrics is unmarshalTraces for ExportMetricsServiceRequest.
func unmarshalMetrics(msg []byte) (md pmetric.Metrics, err error) {
	defer recoverProtobuf("ExportMetricsServiceRequest", &err)
	var u pmetric.ProtoUnmarshaler
	md, err = u.UnmarshalMetrics(msg)
	if err != nil {
		return md, reject(badProtobuf, "not an OTLP ExportMetricsServiceRequest (%v): check that the exporter writes encoding otlp_proto and that only metrics go to this topic", err)
	}
	return md, nil
}

func recoverProtobuf(what string, err *error) {
	if p := recover(); p != nil {
		*err = reject(badProtobuf, "the OTLP decoder failed on this %s (%v): keep the message and report it as a decoder bug", what, p)
	}
}
