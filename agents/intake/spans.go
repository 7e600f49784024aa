package intake

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// Which spans are requests, and how a span becomes a telemetry.Request.
//
// A request is a SERVER span, or a root span (no parent) of kind
// UNSPECIFIED: apps that time their own handlers without the semconv often
// leave the kind unset. Client, internal, producer and consumer spans, and
// unspecified spans with a parent, are valid but not requests; they are
// counted as ignored.

const (
	attrServiceName      = "service.name"
	attrHTTPRoute        = "http.route"
	attrHTTPStatus       = "http.response.status_code"
	attrHTTPStatusLegacy = "http.status_code"
	attrThreadID         = "thread.id"

	// unknownService is what OTel SDKs report without service.name.
	unknownService = "unknown_service"
	// unknownEndpoint stands in for an empty span name.
	unknownEndpoint = "unknown"
	// maxNameBytes bounds service and endpoint names (cut at a rune).
	maxNameBytes = 256
)

// spanFault is why a request span was rejected; its string is the drop
// reason.
type spanFault uint8

const (
	faultTimestamp spanFault = iota // start or end missing
	faultDuration                   // end ≤ start
	faultTraceID                    // all-zero trace id
	faultSpanID                     // all-zero span id
	faultTooOld                     // started before the window
	faultInFuture                   // ends after the window
	numFaults
)

var faultReasons = [numFaults]string{"timestamp", "duration", "trace_id", "span_id", "too_old", "in_future"}

// spanWindow is the span times the intake takes, in unix ns: a request
// span must start at or after oldest and end at or before newest
// (max_span_age and max_span_ahead around the receive time). Spans far
// from the agent's clock would be exported and make the ingest's insert
// write one ClickHouse partition per day they span.
type spanWindow struct{ oldest, newest uint64 }

func newSpanWindow(now time.Time, age, ahead time.Duration) spanWindow {
	return spanWindow{oldest: uint64(max(now.Add(-age).UnixNano(), 0)), newest: uint64(now.Add(ahead).UnixNano())}
}

// spanTally counts what requestSpans did not emit.
type spanTally struct {
	ignored int
	invalid [numFaults]int
}

func (t *spanTally) rejected() int {
	n := 0
	for _, c := range t.invalid {
		n += c
	}
	return n
}

// requestSpans calls emit for each request span of td within w, in order.
// emit gets the service and endpoint names apart from r (classify caps
// them) and must not keep r. Pure: no clock, no I/O.
func requestSpans(td ptrace.Traces, w spanWindow, emit func(svc, ep string, r *telemetry.Request)) spanTally {
	var t spanTally
	var r telemetry.Request
	rss := td.ResourceSpans()
	for i := range rss.Len() {
		rs := rss.At(i)
		svc := unknownService
		if v, ok := rs.Resource().Attributes().Get(attrServiceName); ok && v.Str() != "" {
			svc = cleanName(v.Str())
		}
		sss := rs.ScopeSpans()
		for j := range sss.Len() {
			spans := sss.At(j).Spans()
			for k := range spans.Len() {
				s := spans.At(k)
				kind := s.Kind()
				if kind != ptrace.SpanKindServer && (kind != ptrace.SpanKindUnspecified || !s.ParentSpanID().IsEmpty()) {
					t.ignored++
					continue
				}
				if f, bad := spanToRequest(s, w, &r); bad {
					t.invalid[f]++
					continue
				}
				ep := s.Name()
				if v, ok := s.Attributes().Get(attrHTTPRoute); ok && v.Type() == pcommon.ValueTypeStr && v.Str() != "" {
					ep = v.Str()
				}
				if ep == "" {
					ep = unknownEndpoint
				}
				emit(svc, cleanName(ep), &r)
			}
		}
	}
	return t
}

// fault is why a request span with these times and ids is rejected, if
// it is.
func (w spanWindow) fault(start, end uint64, traceID [16]byte, spanID [8]byte) (spanFault, bool) {
	switch {
	case start == 0 || end == 0:
		return faultTimestamp, true
	case end <= start || end-start > 1<<63-1:
		return faultDuration, true
	case start < w.oldest:
		return faultTooOld, true
	case end > w.newest:
		return faultInFuture, true
	case traceID == [16]byte{}:
		return faultTraceID, true
	case spanID == [8]byte{}:
		return faultSpanID, true
	}
	return 0, false
}

// spanToRequest fills r from s, all but the names and the weight.
func spanToRequest(s ptrace.Span, w spanWindow, r *telemetry.Request) (spanFault, bool) {
	start, end := s.StartTimestamp(), s.EndTimestamp()
	if f, bad := w.fault(uint64(start), uint64(end), s.TraceID(), s.SpanID()); bad {
		return f, true
	}
	*r = telemetry.Request{
		Start:    start.AsTime(),
		Duration: time.Duration(end - start),
		Status:   spanStatus(s),
		TraceID:  s.TraceID(),
		SpanID:   s.SpanID(),
	}
	if v, ok := s.Attributes().Get(attrThreadID); ok {
		if id, ok := attrUint32(v); ok {
			r.ThreadID = id
		}
	}
	return 0, false
}

// spanStatus is the HTTP status code when the span has one, else the span
// status code.
func spanStatus(s ptrace.Span) string {
	a := s.Attributes()
	for _, key := range [...]string{attrHTTPStatus, attrHTTPStatusLegacy} {
		if v, ok := a.Get(key); ok {
			switch v.Type() {
			case pcommon.ValueTypeInt:
				return statusText(v.Int())
			case pcommon.ValueTypeStr:
				// Some instrumentations put the code in a string.
				if c, err := strconv.ParseInt(v.Str(), 10, 64); err == nil {
					return statusText(c)
				}
			}
		}
	}
	switch s.Status().Code() {
	case ptrace.StatusCodeOk:
		return "OK"
	case ptrace.StatusCodeError:
		return "ERROR"
	default:
		return "UNSET"
	}
}

// statusCodes holds "100" … "599" so that a span's status costs no garbage.
var statusCodes = func() (t [600]string) {
	for c := 100; c < len(t); c++ {
		t[c] = strconv.Itoa(c)
	}
	return t
}()

func statusText(c int64) string {
	if c >= 100 && c < int64(len(statusCodes)) {
		return statusCodes[c]
	}
	return strconv.FormatInt(c, 10)
}

// attrUint32 reads a thread id given as an int or as a decimal string.
func attrUint32(v pcommon.Value) (uint32, bool) {
	var n int64
	switch v.Type() {
	case pcommon.ValueTypeInt:
		n = v.Int()
	case pcommon.ValueTypeStr:
		var err error
		if n, err = strconv.ParseInt(v.Str(), 10, 64); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	if n < 0 || n > 1<<32-1 {
		return 0, false
	}
	return uint32(n), true
}

// cleanName makes a name from the wire safe to export: valid UTF-8 (proto
// strings must be) and at most maxNameBytes. Allocates only when it has
// to change the name.
func cleanName(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= maxNameBytes {
		return s
	}
	cut := maxNameBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
