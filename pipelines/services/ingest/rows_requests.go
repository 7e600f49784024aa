package ingest

import (
	"encoding/hex"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Span attribute keys: what agents/export writes, plus what other OTel
// instrumentations put the same facts under.
const (
	attrHTTPRoute        = "http.route"
	attrHTTPStatus       = "http.response.status_code"
	attrHTTPStatusLegacy = "http.status_code" // semconv before 1.21
	attrThreadID         = "thread.id"
	attrWeight           = "spikehunt.weight"
)

// unknownEndpoint stands in for a span without route or name.
const unknownEndpoint = "unknown"

// RequestRows accumulates rows of the requests table, column by column, so
// that a batch goes to ClickHouse as one block without another copy. It is
// not safe for concurrent use.
type RequestRows struct {
	ts                                       *proto.ColDateTime64
	service, host, hwClass, endpoint, status *lowCardStrings
	latency, thread, weight                  proto.ColUInt32
	traceID, spanID                          proto.ColFixedStr
	input                                    proto.Input

	direct spanDecoder
	// window bounds the rows' times; refused counts the rows of the last
	// message it left out (see window.go).
	window  timeWindow
	refused int
	// capped counts what the attribute limits cut from the rows of the
	// last message appended (attr_limits.go).
	capped Capped
	// pending holds one message's rows on the pdata path until all of
	// them proved valid; kept to reuse its memory from message to message.
	pending []requestRow
}

// requestRow is one row of requests, decoded but not yet appended.
type requestRow struct {
	ts                                       proto.DateTime64
	service, host, hwClass, endpoint, status string
	latency, thread, weight                  uint32
	traceID                                  [16]byte
	spanID                                   [8]byte
}

// NewRequestRows returns an empty batch.
func NewRequestRows() *RequestRows {
	r := &RequestRows{
		ts:      new(proto.ColDateTime64).WithPrecision(proto.PrecisionMicro).WithLocation(time.UTC),
		service: newLowCardStrings(), host: newLowCardStrings(), hwClass: newLowCardStrings(),
		endpoint: newLowCardStrings(), status: newLowCardStrings(),
	}
	r.traceID.SetSize(16)
	r.spanID.SetSize(8)
	r.input = proto.Input{
		{Name: "ts", Data: r.ts},
		{Name: "service", Data: r.service},
		{Name: "host", Data: r.host},
		{Name: "hw_class", Data: r.hwClass},
		{Name: "endpoint", Data: r.endpoint},
		{Name: "latency_us", Data: &r.latency},
		{Name: "status", Data: r.status},
		{Name: "trace_id", Data: &r.traceID},
		{Name: "span_id", Data: &r.spanID},
		{Name: "thread_id", Data: &r.thread},
		{Name: "weight", Data: &r.weight},
	}
	return r
}

// AppendTraces decodes one message, an ExportTraceServiceRequest, and
// appends its request spans. It is all or nothing: on error nothing of msg
// is appended, so that the message can go to the dead-letter topic whole
// without half of it also in the table. rows is how many rows it appended,
// skipped how many spans it left out because they are not requests
// (client, internal, … spans; see isRequest). The error is a *DecodeError.
// The batch copies what it keeps: msg is the caller's again on return.
//
// Messages go through the direct decoder (decode_spans.go); one it will
// not take is decoded again through pdata (appendTracesPdata), the
// reference, which then accepts it or says why not.
//
// Rows outside the batch's window (SetWindow) are left out and counted by
// Refused; the rest of the message is appended.
func (r *RequestRows) AppendTraces(msg []byte) (rows, skipped int, err error) {
	r.refused, r.capped = 0, Capped{}
	mark := r.mark()
	if rows, skipped, err := r.direct.appendDirect(r, msg); err == nil {
		if !r.window.on || r.allWithin(mark.rows) {
			return rows, skipped, nil
		}
		// Rare: take the message again on the pdata path, which
		// filters row by row before appending.
		r.truncate(mark)
		return r.appendTracesPdata(msg)
	}
	rows, skipped, err = r.appendTracesPdata(msg)
	if err == nil {
		pdataFallbacks.Add(1)
	}
	return rows, skipped, err
}

// SetWindow makes the batch leave out rows outside w (window.go).
func (r *RequestRows) SetWindow(w timeWindow) { r.window = w }

// Refused is how many rows of the last message appended were outside
// the window, and so left out.
func (r *RequestRows) Refused() int { return r.refused }

// Capped is what the attribute limits (attr_limits.go) cut from the rows
// of the last message appended: values cut to MaxValueBytes.
func (r *RequestRows) Capped() Capped { return r.capped }

func (r *RequestRows) allWithin(from int) bool {
	for _, ts := range r.ts.Data[from:] {
		if !r.window.holds(ts) {
			return false
		}
	}
	return true
}

// pdataFallbacks counts the messages the direct decoder left to pdata
// and pdata then accepted. Their rows are right, only slower to get; a
// count that grows is a gap in decode_spans.go worth reporting
// (spikehunt_ingest_span_decoder_fallbacks_total).
var pdataFallbacks atomic.Uint64

// appendTracesPdata is AppendTraces through pdata: slower, allocating a
// Span object per span, and the reference the direct decoder is tested
// against.
func (r *RequestRows) appendTracesPdata(msg []byte) (rows, skipped int, err error) {
	td, err := unmarshalTraces(msg)
	if err != nil {
		return 0, 0, err
	}
	pending, skipped, derr := decodeRequests(td, r.pending[:0])
	r.pending = pending
	if derr != nil {
		return 0, 0, derr
	}
	r.refused, r.capped = 0, Capped{}
	for i := range pending {
		if !r.window.holds(pending[i].ts) {
			r.refused++
			continue
		}
		r.append(&pending[i])
	}
	clear(pending) // drop the message's strings; the columns hold their own references
	return len(pending) - r.refused, skipped, nil
}

// Rows is how many rows the batch holds.
func (r *RequestRows) Rows() int { return r.ts.Rows() }

// Input is the batch as an insert block, its columns named as in the
// requests table. It stays valid, and grows, as messages are appended.
func (r *RequestRows) Input() proto.Input { return r.input }

// Reset empties the batch and keeps its memory for the next one.
func (r *RequestRows) Reset() { r.input.Reset() }

// rowsMark is how far the batch's columns and dictionaries reached.
type rowsMark struct{ rows, service, host, hwClass, endpoint, status int }

func (r *RequestRows) mark() rowsMark {
	return rowsMark{r.Rows(), len(r.service.dict), len(r.host.dict), len(r.hwClass.dict), len(r.endpoint.dict), len(r.status.dict)}
}

// truncate takes the batch back to m, undoing a message half appended.
func (r *RequestRows) truncate(m rowsMark) {
	r.ts.Data = r.ts.Data[:m.rows]
	r.service.truncate(m.rows, m.service)
	r.host.truncate(m.rows, m.host)
	r.hwClass.truncate(m.rows, m.hwClass)
	r.endpoint.truncate(m.rows, m.endpoint)
	r.status.truncate(m.rows, m.status)
	r.latency = r.latency[:m.rows]
	r.thread = r.thread[:m.rows]
	r.weight = r.weight[:m.rows]
	r.traceID.Buf = r.traceID.Buf[:m.rows*16]
	r.spanID.Buf = r.spanID.Buf[:m.rows*8]
}

func (r *RequestRows) append(row *requestRow) {
	cut := &r.capped.ValueTooLong
	row.service, row.host, row.hwClass = capString(row.service, cut), capString(row.host, cut), capString(row.hwClass, cut)
	row.endpoint = capString(row.endpoint, cut)
	r.ts.AppendRaw(row.ts)
	r.service.Append(row.service)
	r.host.Append(row.host)
	r.hwClass.Append(row.hwClass)
	r.endpoint.Append(row.endpoint)
	r.latency.Append(row.latency)
	r.status.Append(row.status)
	r.traceID.Append(row.traceID[:])
	r.spanID.Append(row.spanID[:])
	r.thread.Append(row.thread)
	r.weight.Append(row.weight)
}

// decodeRequests appends to dst a row for each request span of td, or
// returns the first span that is not fit for the table.
func decodeRequests(td ptrace.Traces, dst []requestRow) (_ []requestRow, skipped int, _ *DecodeError) {
	n := 0 // span index in the message, for Details
	rss := td.ResourceSpans()
	for i := range rss.Len() {
		res := rss.At(i).Resource().Attributes()
		service := strAttr(res, attrServiceName)
		if service == "" {
			service = unknownService
		}
		host, hwClass := hostOf(res), strAttr(res, attrHWClass)
		sss := rss.At(i).ScopeSpans()
		for j := range sss.Len() {
			spans := sss.At(j).Spans()
			for k := range spans.Len() {
				s := spans.At(k)
				n++
				if !isRequest(s) {
					skipped++
					continue
				}
				dst = append(dst, requestRow{service: service, host: host, hwClass: hwClass})
				if err := fillRequest(&dst[len(dst)-1], s); err != nil {
					err.Detail = spanName(n-1, service, s) + ": " + err.Detail
					return dst, skipped, err
				}
			}
		}
	}
	return dst, skipped, nil
}

// isRequest tells request spans from the rest as the agent's intake does:
// SERVER spans, and root spans of kind UNSPECIFIED (apps that time their
// own handlers often leave the kind unset). A span with a parent and no
// kind is a step inside some request, not one.
func isRequest(s ptrace.Span) bool {
	switch s.Kind() {
	case ptrace.SpanKindServer:
		return true
	case ptrace.SpanKindUnspecified:
		return s.ParentSpanID().IsEmpty()
	}
	return false
}

// fillRequest fills the span's own columns of row.
func fillRequest(row *requestRow, s ptrace.Span) *DecodeError {
	start, end := s.StartTimestamp(), s.EndTimestamp()
	switch {
	case start == 0 || end == 0:
		return reject(badTimestamp, "start %s, end %s: a request span needs both", stamp(start), stamp(end))
	case !plausible(start):
		return reject(badTimestamp, "start %s is not between 2000 and 2200: is the clock of the exporting host set?", stamp(start))
	case end < start:
		return reject(badTimestamp, "end %s before start %s", stamp(end), stamp(start))
	}
	a := s.Attributes()
	weight := uint32(1)
	if v, ok := a.Get(attrWeight); ok {
		w, ok := intValue(v)
		if !ok || w < 1 || w > math.MaxUint32 {
			return reject(badSpan, "%s = %s (%s), want an integer from 1 to %d: 1/sampling rate, as the agent writes it", attrWeight, v.AsString(), v.Type(), uint32(math.MaxUint32))
		}
		weight = uint32(w)
	}
	row.ts = micros(start)
	row.latency = uint32(min((end-start)/1000, math.MaxUint32)) // 71 minutes; longer requests read as that
	row.endpoint = endpointOf(s)
	row.status = statusOf(s)
	row.traceID = s.TraceID()
	row.spanID = s.SpanID()
	row.thread = threadOf(a)
	row.weight = weight
	return nil
}

// endpointOf is the route the request matched, else the span name, which
// instrumentations without http.route fill with the route or operation.
func endpointOf(s ptrace.Span) string {
	if v, ok := s.Attributes().Get(attrHTTPRoute); ok && v.Type() == pcommon.ValueTypeStr && v.Str() != "" {
		return v.Str()
	}
	if s.Name() != "" {
		return s.Name()
	}
	return unknownEndpoint
}

// statusOf is the HTTP status code as text when the span has one, else the
// span status: which of the two a row holds stays visible ("503" vs
// "ERROR").
func statusOf(s ptrace.Span) string {
	a := s.Attributes()
	for _, k := range [...]string{attrHTTPStatus, attrHTTPStatusLegacy} {
		if v, ok := a.Get(k); ok {
			if c, ok := intValue(v); ok {
				return codeText(c)
			}
		}
	}
	switch s.Status().Code() {
	case ptrace.StatusCodeOk:
		return "OK"
	case ptrace.StatusCodeError:
		return "ERROR"
	}
	return "UNSET"
}

// threadOf is the thread.id attribute, 0 when absent or not a thread id:
// the column is a hint for drill-downs, not worth rejecting a span over.
func threadOf(a pcommon.Map) uint32 {
	if v, ok := a.Get(attrThreadID); ok {
		if id, ok := intValue(v); ok && id >= 0 && id <= math.MaxUint32 {
			return uint32(id)
		}
	}
	return 0
}

// intValue reads an int attribute, or a string of decimal digits: some
// instrumentations send status codes and thread ids as strings.
func intValue(v pcommon.Value) (int64, bool) {
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return v.Int(), true
	case pcommon.ValueTypeStr:
		n, err := strconv.ParseInt(v.Str(), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// httpCodes holds "0" … "599", so that the status of a typical span
// costs no allocation.
var httpCodes = func() (t [600]string) {
	for i := range t {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

func codeText(c int64) string {
	if c >= 0 && c < int64(len(httpCodes)) {
		return httpCodes[c]
	}
	return strconv.FormatInt(c, 10)
}

// spanName names span n of the message for a Detail.
func spanName(n int, service string, s ptrace.Span) string {
	name := "span " + strconv.Itoa(n) + " of service " + strconv.Quote(service)
	if id := s.SpanID(); !id.IsEmpty() {
		name += " (span id " + hex.EncodeToString(id[:]) + ")"
	}
	return name
}
