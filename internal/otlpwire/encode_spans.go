package otlpwire

import (
	"strconv"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// SpanEncoder writes an ExportTraceServiceRequest straight from requests,
// without building pdata first: the agent encodes every kept request, and
// pdata's per-span objects cost more than the encoding itself. Its scratch
// slices are reused from call to call; one encoder serves one goroutine.
//
// Field numbers are those of opentelemetry-proto (trace/v1/trace.proto,
// common/v1/common.proto, resource/v1/resource.proto,
// collector/trace/v1/trace_service.proto).
type SpanEncoder struct {
	services []string // distinct services, in order of first appearance
	group    []int    // per request, its index in services
	sizes    []int    // per request, its Span's size
}

// Span status codes and kind (trace.proto).
const (
	statusUnset  = 0
	statusOK     = 1
	statusError  = 2
	spanServer   = 2
	scopeNameLen = len(scopeName)
)

// Append appends the export request for reqs to dst.
func (e *SpanEncoder) Append(dst []byte, res telemetry.Resource, reqs []telemetry.Request) []byte {
	e.services, e.group, e.sizes = e.services[:0], e.group[:0], e.sizes[:0]
	for i := range reqs {
		g := -1
		for j, s := range e.services {
			if s == reqs[i].Service {
				g = j
				break
			}
		}
		if g < 0 {
			g = len(e.services)
			e.services = append(e.services, reqs[i].Service)
		}
		e.group = append(e.group, g)
		e.sizes = append(e.sizes, spanSize(&reqs[i]))
	}
	scope := bytesLen(1, scopeNameLen) // InstrumentationScope{name}
	for g, svc := range e.services {
		resource := resourceSize(res, svc)
		scopeSpans := bytesLen(1, scope)
		for i := range reqs {
			if e.group[i] == g {
				scopeSpans += bytesLen(2, e.sizes[i])
			}
		}
		// ExportTraceServiceRequest.resource_spans = 1
		dst = appendLen(dst, 1, bytesLen(1, resource)+bytesLen(2, scopeSpans))
		// ResourceSpans.resource = 1
		dst = appendResource(appendLen(dst, 1, resource), res, svc)
		// ResourceSpans.scope_spans = 2; ScopeSpans.scope = 1
		dst = appendLen(dst, 2, scopeSpans)
		dst = appendString(appendLen(dst, 1, scope), 1, scopeName)
		for i := range reqs {
			if e.group[i] == g {
				// ScopeSpans.spans = 2
				dst = appendSpan(appendLen(dst, 2, e.sizes[i]), &reqs[i])
			}
		}
	}
	return dst
}

// The resource's attributes: host.name, k8s.node.name and
// spikehunt.hw_class when set, then service.name.
func resourceSize(res telemetry.Resource, svc string) int {
	n := bytesLen(1, strAttrSize(attrServiceName, svc))
	for _, a := range resourceAttrs(res) {
		if a[1] != "" {
			n += bytesLen(1, strAttrSize(a[0], a[1]))
		}
	}
	return n
}

func appendResource(b []byte, res telemetry.Resource, svc string) []byte {
	for _, a := range resourceAttrs(res) {
		if a[1] != "" {
			b = appendStrAttr(b, 1, a[0], a[1]) // Resource.attributes = 1
		}
	}
	return appendStrAttr(b, 1, attrServiceName, svc)
}

func resourceAttrs(res telemetry.Resource) [3][2]string {
	return [3][2]string{{attrHostName, res.HostName}, {attrNodeName, res.NodeName}, {attrHWClass, res.HWClass}}
}

// KeyValue{key = 1, value = 2}; AnyValue{string_value = 1, int_value = 3}.
func strAttrSize(k, v string) int { return bytesLen(1, len(k)) + bytesLen(2, bytesLen(1, len(v))) }

func intAttrSize(k string, v int64) int {
	return bytesLen(1, len(k)) + bytesLen(2, 1+varintLen(uint64(v)))
}

func appendStrAttr(b []byte, field int, k, v string) []byte {
	b = appendLen(b, field, strAttrSize(k, v))
	b = appendString(b, 1, k)
	return appendString(appendLen(b, 2, bytesLen(1, len(v))), 1, v)
}

func appendIntAttr(b []byte, field int, k string, v int64) []byte {
	b = appendLen(b, field, intAttrSize(k, v))
	b = appendString(b, 1, k)
	return appendVarintField(appendLen(b, 2, 1+varintLen(uint64(v))), 3, uint64(v))
}

// spanStatus maps the agent's status as setStatus does: an HTTP code is
// the http.response.status_code attribute (5xx an error); OK and ERROR
// are the span status.
func spanStatus(status string) (code int, httpCode int64, isHTTP bool) {
	if c, err := strconv.Atoi(status); err == nil {
		if c >= 500 {
			return statusError, int64(c), true
		}
		return statusUnset, int64(c), true
	}
	switch status {
	case "OK":
		return statusOK, 0, false
	case "ERROR":
		return statusError, 0, false
	}
	return statusUnset, 0, false
}

func weight(r *telemetry.Request) int64 {
	if r.Weight == 0 {
		return 1
	}
	return int64(r.Weight)
}

// spanSize is the size of appendSpan's output for r.
func spanSize(r *telemetry.Request) int {
	n := 0
	if r.TraceID != ([16]byte{}) {
		n += bytesLen(1, 16)
	}
	if r.SpanID != ([8]byte{}) {
		n += bytesLen(2, 8)
	}
	n += bytesLen(5, len(r.Endpoint)) + 2 // name, kind
	if start := r.Start.UnixNano(); start != 0 {
		n += 9
	}
	if end := r.Start.Add(r.Duration).UnixNano(); end != 0 {
		n += 9
	}
	if r.ThreadID != 0 {
		n += bytesLen(9, intAttrSize(attrThreadID, int64(r.ThreadID)))
	}
	n += bytesLen(9, intAttrSize(attrWeight, weight(r)))
	code, httpCode, isHTTP := spanStatus(r.Status)
	if isHTTP {
		n += bytesLen(9, intAttrSize(attrHTTPStatus, httpCode))
	}
	if code != statusUnset {
		n += bytesLen(15, 2) // Status{code = 3}
	}
	return n
}

// appendSpan appends r as a Span's fields.
func appendSpan(b []byte, r *telemetry.Request) []byte {
	if r.TraceID != ([16]byte{}) {
		b = append(appendLen(b, 1, 16), r.TraceID[:]...)
	}
	if r.SpanID != ([8]byte{}) {
		b = append(appendLen(b, 2, 8), r.SpanID[:]...)
	}
	b = appendString(b, 5, r.Endpoint)
	b = appendVarintField(b, 6, spanServer)
	if start := r.Start.UnixNano(); start != 0 {
		b = appendFixed64(b, 7, uint64(start))
	}
	if end := r.Start.Add(r.Duration).UnixNano(); end != 0 {
		b = appendFixed64(b, 8, uint64(end))
	}
	if r.ThreadID != 0 {
		b = appendIntAttr(b, 9, attrThreadID, int64(r.ThreadID))
	}
	b = appendIntAttr(b, 9, attrWeight, weight(r))
	code, httpCode, isHTTP := spanStatus(r.Status)
	if isHTTP {
		b = appendIntAttr(b, 9, attrHTTPStatus, httpCode)
	}
	if code != statusUnset {
		b = appendVarintField(appendLen(b, 15, 2), 3, uint64(code))
	}
	return b
}
