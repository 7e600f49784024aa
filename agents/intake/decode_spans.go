package intake

import (
	"errors"
	"math"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/spikehunt/spikehunt/internal/otlpwire/spanwalk"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// The direct decoder: an ExportTraceServiceRequest in protobuf walked
// once, field by field (internal/otlpwire/spanwalk), into the request
// spans the agent keeps, without pdata's object tree (a struct per span,
// per attribute and per value, and a string per key: most of the OTLP
// intake's CPU and all of its garbage).
//
// The same walk prices the request as scanTraceRequest does (same span
// count, same cost: the walk counts what scanTraceRequest charges, and
// requestCost prices the counts) and checks every field as pdata 1.70's
// unmarshaler does. It is a fast path, not a second authority: on
// anything that scanTraceRequest or pdata would refuse, and on what it
// does not handle (groups, nesting past maxProtoDepth, more than
// max_spans_per_request spans), it backs out having emitted nothing, and
// the receiver runs the reference path on the message (scanTraceRequest,
// then ptraceotlp), whose answer and drop reason are then the client's.
// FuzzSpanDecoderMatchesPdata holds the two paths to the same requests,
// tallies and shapes.
//
// Spans are not classified during the walk: a message may turn out
// malformed after its first spans, and classifying moves the sampler and
// the cardinality caps, which cannot be undone. The walk judges each
// request span against the window of the receive time and keeps the valid
// ones (pendingSpan) in the decoder's scratch, charged to the request's
// budget hold before it grows; consumeDecoded classifies them once the
// whole message has passed.

// errBackOut is every reason the direct decoder gives up on a message.
// It is never shown: the reference path judges the message again.
var errBackOut = errors.New("otlp: not for the direct decoder")

// pendingSpan is a valid request span as the walk found it: what
// spanToRequest and the endpoint take from it.
type pendingSpan struct {
	start, end uint64
	traceID    [16]byte
	spanID     [8]byte
	thread     uint32
	resource   int32  // index into spanDecoder.services
	status     string // spanStatus's answer
	endpoint   []byte // cleaned; aliases the message unless cleanName had to change it
}

// fill sets r as spanToRequest would, all but the names and the weight.
func (p *pendingSpan) fill(r *telemetry.Request) {
	*r = telemetry.Request{
		Start:    pcommon.Timestamp(p.start).AsTime(),
		Duration: time.Duration(p.end - p.start),
		Status:   p.status,
		TraceID:  p.traceID,
		SpanID:   p.spanID,
		ThreadID: p.thread,
	}
}

const pendingSpanBytes = int64(unsafe.Sizeof(pendingSpan{}))

// spanDecoder decodes one message at a time; spanDecoders pools them.
// After decode, services and spans alias the message: the caller must be
// done with them (consumeDecoded) before the message's buffer is reused,
// and put the decoder back with putSpanDecoder, which drops the aliases.
// It is the walk's sink (Resource, Span).
type spanDecoder struct {
	shape    requestShape
	tally    spanTally // the spans that are not kept, and why
	services [][]byte  // per resource spans, cleaned; unknownService when unnamed
	spans    []pendingSpan

	window spanWindow
	hold   *budgetHold // charged before spans grows
	walk   spanwalk.Walker
}

// The walk takes what scanTraceRequest takes (no groups, no nesting past
// maxProtoDepth) and moves instrumentation_library_spans to scope_spans
// as ptraceotlp does.
var spanDecoders = sync.Pool{New: func() any {
	d := new(spanDecoder)
	d.walk.Options = spanwalk.Options{MaxDepth: maxProtoDepth, RefuseGroups: true, MigrateLegacy: true}
	return d
}}

// maxPooledSpans: a decoder whose scratch grew past this is left to the
// GC, so the pool keeps no memory the budget does not see for long.
const maxPooledSpans = 2048

func getSpanDecoder() *spanDecoder { return spanDecoders.Get().(*spanDecoder) }

func putSpanDecoder(d *spanDecoder) {
	clear(d.spans)
	clear(d.services)
	d.walk.Release()
	d.spans, d.services = d.spans[:0], d.services[:0]
	d.hold = nil
	if cap(d.spans) > maxPooledSpans {
		return
	}
	spanDecoders.Put(d)
}

// scratchBytes is what the decoder's span scratch holds.
func (d *spanDecoder) scratchBytes() int64 { return int64(cap(d.spans)) * pendingSpanBytes }

// decode walks msg, received when w was the window. On nil, d.shape is
// msg's shape (as scanTraceRequest gives it, its cost raised to the
// scratch when that is more), d.tally what requestSpans would count, and
// d.spans the request spans it would emit, in its order. On errBackOut
// nothing is decided: judge msg by the reference path. hold pays for the
// scratch; it holds more afterwards either way, until the caller resizes
// it.
func (d *spanDecoder) decode(msg []byte, w spanWindow, maxSpans int, hold *budgetHold) (err error) {
	d.shape = requestShape{}
	d.tally, d.window, d.hold = spanTally{}, w, hold
	d.spans, d.services = d.spans[:0], d.services[:0]
	if !hold.grow(d.scratchBytes()) {
		return errBackOut
	}
	defer func() {
		if recover() != nil { // a bug here must cost the fast path, not the agent
			err = errBackOut
		}
		if err != nil {
			d.spans, d.services = d.spans[:0], d.services[:0]
		}
	}()
	d.walk.MaxSpans = maxSpans
	if err := spanwalk.Walk(&d.walk, msg, d); err != nil {
		return errBackOut
	}
	d.shape = requestShape{spans: d.walk.Tally.Spans, cost: max(requestCost(len(msg), &d.walk.Tally), d.scratchBytes())}
	return nil
}

// requestCost is what scanTraceRequest charges for a message of n bytes
// that the walk counted t of.
func requestCost(n int, t *spanwalk.Tally) int64 {
	c := int64(n) + t.LenFields*lenFieldBytes + t.AnyValueFields*anyValueFieldBytes
	for k, m := range t.Messages {
		c += m * decodedBytes[k]
	}
	return c
}

// Resource files a resource spans' service name; its spans refer to it
// by index.
func (d *spanDecoder) Resource(r *spanwalk.Resource) error {
	svc := unknownServiceBytes
	if v := r.Service.Str(); len(v) > 0 {
		svc = cleanNameBytes(v)
	}
	d.services = append(d.services, svc)
	return nil
}

// Span files s, of the last resource, as requestSpans would: ignored
// when it is not a request, invalid, or kept for consumeDecoded (its
// scratch paid for from the hold first).
func (d *spanDecoder) Span(s *spanwalk.Span) error {
	if !s.IsRequest() {
		d.tally.ignored++
		return nil
	}
	if f, bad := d.window.fault(s.Start, s.End, s.TraceID, s.SpanID); bad {
		d.tally.invalid[f]++
		return nil
	}
	if len(d.spans) == cap(d.spans) {
		n := max(64, 2*cap(d.spans))
		if !d.hold.grow(int64(n-cap(d.spans)) * pendingSpanBytes) {
			return errBackOut
		}
		grown := make([]pendingSpan, len(d.spans), n)
		copy(grown, d.spans)
		clear(d.spans)
		d.spans = grown
	}
	ep := s.Name
	if v := s.Route.Str(); len(v) > 0 {
		ep = v
	}
	if len(ep) == 0 {
		ep = unknownEndpointBytes
	}
	p := pendingSpan{
		start: s.Start, end: s.End, traceID: s.TraceID, spanID: s.SpanID,
		resource: int32(len(d.services) - 1), status: decodedStatus(s), endpoint: cleanNameBytes(ep),
	}
	if s.Thread.Found {
		if id, ok := s.Thread.V.AsInt(); ok && id >= 0 && id <= math.MaxUint32 {
			p.thread = uint32(id)
		}
	}
	d.spans = append(d.spans, p)
	return nil
}

// decodedStatus is spanStatus for a walked span.
func decodedStatus(s *spanwalk.Span) string {
	if c, ok := s.HTTPCode(); ok {
		return statusText(c)
	}
	switch s.StatusCode {
	case spanwalk.StatusCodeOK:
		return "OK"
	case spanwalk.StatusCodeError:
		return "ERROR"
	}
	return "UNSET"
}

// unknownServiceBytes and unknownEndpointBytes are the stand-ins as
// bytes: classify's lookups with them make no garbage.
var (
	unknownServiceBytes  = []byte(unknownService)
	unknownEndpointBytes = []byte(unknownEndpoint)
)

// cleanNameBytes is cleanName for a name still in the message. It
// allocates only for invalid UTF-8.
func cleanNameBytes(b []byte) []byte {
	if !utf8.Valid(b) {
		return []byte(cleanName(string(b)))
	}
	return cutName(b)
}
