package otlpwire

import (
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// Resource attribute keys (docs/design.md §3).
const (
	attrServiceName = "service.name"
	attrHostName    = "host.name"
	attrNodeName    = "k8s.node.name"
	attrHWClass     = "spikehunt.hw_class"
	attrThreadID    = "thread.id"
	attrWeight      = "spikehunt.weight"
	attrHTTPStatus  = "http.response.status_code"
)

// tracesMarshaler writes what the OTel Collector's kafka exporter writes
// with encoding otlp_proto: an ExportTraceServiceRequest in protobuf.
var tracesMarshaler = &ptrace.ProtoMarshaler{}

// EncodeSpans turns requests into one OTLP export request: a ResourceSpans
// per service, each request a SERVER span named by its endpoint. Requests
// without a trace id have none on the wire (the line protocol may carry
// none); the ingest accepts them. The bytes decode to what Traces builds.
func EncodeSpans(res telemetry.Resource, reqs []telemetry.Request) ([]byte, error) {
	var e SpanEncoder
	return e.Append(nil, res, reqs), nil
}

// Traces builds the pdata form of EncodeSpans.
func Traces(res telemetry.Resource, reqs []telemetry.Request) ptrace.Traces {
	td := ptrace.NewTraces()
	byService := map[string]ptrace.SpanSlice{}
	for i := range reqs {
		r := &reqs[i]
		spans, ok := byService[r.Service]
		if !ok {
			rs := td.ResourceSpans().AppendEmpty()
			putResource(rs.Resource().Attributes(), res)
			rs.Resource().Attributes().PutStr(attrServiceName, r.Service)
			ss := rs.ScopeSpans().AppendEmpty()
			ss.Scope().SetName(scopeName)
			spans = ss.Spans()
			byService[r.Service] = spans
		}
		s := spans.AppendEmpty()
		s.SetName(r.Endpoint)
		s.SetKind(ptrace.SpanKindServer)
		s.SetTraceID(pcommon.TraceID(r.TraceID))
		s.SetSpanID(pcommon.SpanID(r.SpanID))
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(r.Start))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(r.Start.Add(r.Duration)))
		a := s.Attributes()
		a.EnsureCapacity(3)
		if r.ThreadID != 0 {
			a.PutInt(attrThreadID, int64(r.ThreadID))
		}
		w := r.Weight
		if w == 0 {
			w = 1
		}
		a.PutInt(attrWeight, int64(w))
		setStatus(s, a, r.Status)
	}
	return td
}

// setStatus maps the agent's status to OTLP: an HTTP code goes to
// http.response.status_code (5xx is an error, as the HTTP semconv says for
// servers); OK/ERROR/UNSET go to the span status.
func setStatus(s ptrace.Span, a pcommon.Map, status string) {
	if code, err := strconv.Atoi(status); err == nil {
		a.PutInt(attrHTTPStatus, int64(code))
		if code >= 500 {
			s.Status().SetCode(ptrace.StatusCodeError)
		}
		return
	}
	switch status {
	case "OK":
		s.Status().SetCode(ptrace.StatusCodeOk)
	case "ERROR":
		s.Status().SetCode(ptrace.StatusCodeError)
	}
}

func putResource(m pcommon.Map, res telemetry.Resource) {
	m.EnsureCapacity(4)
	if res.HostName != "" {
		m.PutStr(attrHostName, res.HostName)
	}
	if res.NodeName != "" {
		m.PutStr(attrNodeName, res.NodeName)
	}
	if res.HWClass != "" {
		m.PutStr(attrHWClass, res.HWClass)
	}
}

const scopeName = "github.com/spikehunt/spikehunt/agents"
