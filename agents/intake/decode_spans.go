package intake

import (
	"errors"
	"math"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/spikehunt/spikehunt/internal/otlpattr"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// The direct decoder: an ExportTraceServiceRequest in protobuf walked
// once, field by field, into the request spans the agent keeps, without
// pdata's object tree (a struct per span, per attribute and per value, and
// a string per key: most of the OTLP intake's CPU and all of its garbage).
//
// The same walk prices the request as scanTraceRequest does (same span
// count, same cost) and checks every field as pdata 1.70's unmarshaler
// does (go.opentelemetry.io/collector/pdata/internal/generated_proto_*.go):
// a known field of the wrong wire type, a truncated field, an id of the
// wrong length. It is a fast path, not a second authority: on anything
// that scanTraceRequest or pdata would refuse, and on what it does not
// handle (groups, nesting past maxProtoDepth, more than
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
type spanDecoder struct {
	shape    requestShape
	tally    spanTally // the spans that are not kept, and why
	services [][]byte  // per resource spans, cleaned; unknownService when unnamed
	spans    []pendingSpan

	maxSpans int
	window   spanWindow
	hold     *budgetHold // charged before spans grows
	scopes   [][]byte    // the current resource spans' scope_spans (2)
	legacy   [][]byte    // and its instrumentation_library_spans (1000)
	span     wireSpan
}

var spanDecoders = sync.Pool{New: func() any { return new(spanDecoder) }}

// maxPooledSpans: a decoder whose scratch grew past this is left to the
// GC, so the pool keeps no memory the budget does not see for long.
const maxPooledSpans = 2048

func getSpanDecoder() *spanDecoder { return spanDecoders.Get().(*spanDecoder) }

func putSpanDecoder(d *spanDecoder) {
	clear(d.spans)
	clear(d.services)
	clear(d.scopes[:cap(d.scopes)])
	clear(d.legacy[:cap(d.legacy)])
	d.spans, d.services = d.spans[:0], d.services[:0]
	d.hold, d.span = nil, wireSpan{}
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
	d.shape = requestShape{cost: int64(len(msg))}
	d.tally, d.window, d.maxSpans, d.hold = spanTally{}, w, maxSpans, hold
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
	d.shape.cost += decodedBytes[kindRequest]
	for pos := 0; pos < len(msg); {
		field, wire, p, err := d.tag(msg, pos, kindRequest)
		if err != nil {
			return err
		}
		if field == 1 { // resource_spans
			var v []byte
			if v, p, err = d.message(msg, p, wire); err != nil {
				return err
			}
			if err := d.resourceSpans(v); err != nil {
				return err
			}
		} else if p, err = d.skip(msg, p, wire); err != nil {
			return err
		}
		pos = p
	}
	d.shape.cost = max(d.shape.cost, d.scratchBytes())
	return nil
}

// resourceSpans decodes a ResourceSpans (depth 2). Its resource may come
// after its spans on the wire, so the first loop reads the resource and
// gathers the scope spans, and the spans are decoded after it.
func (d *spanDecoder) resourceSpans(buf []byte) error {
	if err := d.enter(kindResourceSpans, 2); err != nil {
		return err
	}
	var service otlpattr.First
	d.scopes, d.legacy = d.scopes[:0], d.legacy[:0]
	for pos := 0; pos < len(buf); {
		field, wire, p, err := d.tag(buf, pos, kindResourceSpans)
		if err != nil {
			return err
		}
		switch field {
		case 1, 2, 3, deprecatedScopeSpans: // resource, scope_spans, schema_url, instrumentation_library_spans
			var v []byte
			if v, p, err = d.message(buf, p, wire); err != nil {
				return err
			}
			switch field {
			case 1:
				err = d.resource(v, &service)
			case 2:
				d.scopes = append(d.scopes, v)
			case deprecatedScopeSpans:
				d.legacy = append(d.legacy, v)
			}
			if err != nil {
				return err
			}
		default:
			if p, err = d.skip(buf, p, wire); err != nil {
				return err
			}
		}
		pos = p
	}
	// ptraceotlp moves instrumentation_library_spans (OTLP before 0.15)
	// to scope_spans when there are none, and drops them otherwise.
	emit, drop := d.scopes, d.legacy
	if len(emit) == 0 {
		emit, drop = drop, nil
	}
	res := int32(len(d.services))
	svc := unknownServiceBytes
	if v := service.Str(); len(v) > 0 {
		svc = cleanNameBytes(v)
	}
	d.services = append(d.services, svc)
	for _, sc := range emit {
		if err := d.scopeSpans(sc, res, true); err != nil {
			return err
		}
	}
	for _, sc := range drop {
		if err := d.scopeSpans(sc, res, false); err != nil {
			return err
		}
	}
	return nil
}

// resource decodes a Resource (depth 3) for its service.name; a repeated
// resource field merges into the one before, as in pdata.
func (d *spanDecoder) resource(buf []byte, service *otlpattr.First) error {
	if err := d.enter(kindResource, 3); err != nil {
		return err
	}
	for pos := 0; pos < len(buf); {
		field, wire, p, err := d.tag(buf, pos, kindResource)
		if err != nil {
			return err
		}
		switch field {
		case 1: // attributes
			var v []byte
			if v, p, err = d.message(buf, p, wire); err != nil {
				return err
			}
			var val otlpattr.Value
			key, err := d.keyValue(v, 4, &val)
			if err != nil {
				return err
			}
			if string(key) == attrServiceName {
				service.Offer(val)
			}
		case 2: // dropped_attributes_count
			_, p, err = varint(buf, p, wire)
		case 3: // entity_refs
			var v []byte
			if v, p, err = d.message(buf, p, wire); err == nil {
				err = d.check(v, &wireEntityRef, 4)
			}
		default:
			p, err = d.skip(buf, p, wire)
		}
		if err != nil {
			return err
		}
		pos = p
	}
	return nil
}

// scopeSpans decodes a ScopeSpans (depth 3) of resource res; with keep
// false its spans are checked and counted but not kept (pdata drops them).
func (d *spanDecoder) scopeSpans(buf []byte, res int32, keep bool) error {
	if err := d.enter(kindScopeSpans, 3); err != nil {
		return err
	}
	for pos := 0; pos < len(buf); {
		field, wire, p, err := d.tag(buf, pos, kindScopeSpans)
		if err != nil {
			return err
		}
		switch field {
		case 1, 2, 3: // scope, spans, schema_url
			var v []byte
			if v, p, err = d.message(buf, p, wire); err != nil {
				return err
			}
			switch field {
			case 1:
				err = d.check(v, &wireScope, 4)
			case 2:
				if d.shape.spans++; d.shape.spans > d.maxSpans {
					return errBackOut // the reference path refuses it, counted
				}
				if err = d.span.decode(d, v); err == nil && keep {
					err = d.keep(res)
				}
			}
			if err != nil {
				return err
			}
		default:
			if p, err = d.skip(buf, p, wire); err != nil {
				return err
			}
		}
		pos = p
	}
	return nil
}

// keep files d.span, of resource res, as requestSpans would: ignored
// when it is not a request, invalid, or kept for consumeDecoded (its
// scratch paid for from the hold first).
func (d *spanDecoder) keep(res int32) error {
	s := &d.span
	if s.kind != spanKindServer && (s.kind != spanKindUnspecified || s.hasParent) {
		d.tally.ignored++
		return nil
	}
	if f, bad := d.window.fault(s.start, s.end, s.traceID, s.spanID); bad {
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
	ep := s.name
	if v := s.route.Str(); len(v) > 0 {
		ep = v
	}
	if len(ep) == 0 {
		ep = unknownEndpointBytes
	}
	p := pendingSpan{
		start: s.start, end: s.end, traceID: s.traceID, spanID: s.spanID,
		resource: res, status: s.status(), endpoint: cleanNameBytes(ep),
	}
	if s.thread.Found {
		if id, ok := s.thread.V.AsInt(); ok && id >= 0 && id <= math.MaxUint32 {
			p.thread = uint32(id)
		}
	}
	d.spans = append(d.spans, p)
	return nil
}

// OTLP enum values (trace.proto) that decide a span's fate.
const (
	spanKindUnspecified = 0
	spanKindServer      = 2
	statusCodeOK        = 1
	statusCodeError     = 2
)

// wireSpan is one Span as the walk reads it: the fields a request needs,
// aliasing the message.
type wireSpan struct {
	traceID                [16]byte
	spanID                 [8]byte
	hasParent              bool // a parent span id other than all zeros
	name                   []byte
	kind                   int32
	start, end             uint64
	statusCode             int32
	route, thread          otlpattr.First
	httpStatus, httpLegacy otlpattr.First
}

// decode reads a Span (depth 4). Scalars that repeat take the last
// value, and a repeated status merges, as in pdata.
func (s *wireSpan) decode(d *spanDecoder, buf []byte) error {
	if err := d.enter(kindSpan, 4); err != nil {
		return err
	}
	*s = wireSpan{}
	var parent [8]byte
	for pos := 0; pos < len(buf); {
		field, wire, p, err := d.tag(buf, pos, kindSpan)
		if err != nil {
			return err
		}
		var v []byte
		var n uint64
		switch field {
		case 1: // trace_id
			if v, p, err = d.message(buf, p, wire); err == nil {
				err = setID(s.traceID[:], v)
			}
		case 2: // span_id
			if v, p, err = d.message(buf, p, wire); err == nil {
				err = setID(s.spanID[:], v)
			}
		case 4: // parent_span_id
			if v, p, err = d.message(buf, p, wire); err == nil {
				err = setID(parent[:], v)
			}
		case 3: // trace_state
			_, p, err = d.message(buf, p, wire)
		case 5: // name
			s.name, p, err = d.message(buf, p, wire)
		case 6: // kind
			n, p, err = varint(buf, p, wire)
			s.kind = int32(n)
		case 7: // start_time_unix_nano
			s.start, p, err = fixed64(buf, p, wire)
		case 8: // end_time_unix_nano
			s.end, p, err = fixed64(buf, p, wire)
		case 9: // attributes
			if v, p, err = d.message(buf, p, wire); err != nil {
				return err
			}
			var val otlpattr.Value
			key, err := d.keyValue(v, 5, &val)
			if err != nil {
				return err
			}
			switch string(key) {
			case attrHTTPRoute:
				s.route.Offer(val)
			case attrThreadID:
				s.thread.Offer(val)
			case attrHTTPStatus:
				s.httpStatus.Offer(val)
			case attrHTTPStatusLegacy:
				s.httpLegacy.Offer(val)
			}
		case 10, 12, 14: // dropped attributes, events, links counts
			_, p, err = varint(buf, p, wire)
		case 11: // events
			if v, p, err = d.message(buf, p, wire); err == nil {
				err = d.check(v, &wireEvent, 5)
			}
		case 13: // links
			if v, p, err = d.message(buf, p, wire); err == nil {
				err = d.check(v, &wireLink, 5)
			}
		case 15: // status
			if v, p, err = d.message(buf, p, wire); err == nil {
				err = s.decodeStatus(d, v)
			}
		case 16: // flags
			if wire != wireI32 {
				return errBackOut
			}
			p, err = d.skip(buf, p, wire)
		default:
			p, err = d.skip(buf, p, wire)
		}
		if err != nil {
			return err
		}
		pos = p
	}
	s.hasParent = parent != [8]byte{}
	return nil
}

// setID copies an id field: pdata takes it empty (all zeros) or of
// exactly its length.
func setID(id, v []byte) error {
	switch len(v) {
	case 0:
		clear(id)
	case len(id):
		copy(id, v)
	default:
		return errBackOut
	}
	return nil
}

// decodeStatus applies a Status (depth 5).
func (s *wireSpan) decodeStatus(d *spanDecoder, buf []byte) error {
	if err := d.enter(kindStatus, 5); err != nil {
		return err
	}
	for pos := 0; pos < len(buf); {
		field, wire, p, err := d.tag(buf, pos, kindStatus)
		if err != nil {
			return err
		}
		switch field {
		case 2: // message
			_, p, err = d.message(buf, p, wire)
		case 3: // code
			var n uint64
			n, p, err = varint(buf, p, wire)
			s.statusCode = int32(n)
		default:
			p, err = d.skip(buf, p, wire)
		}
		if err != nil {
			return err
		}
		pos = p
	}
	return nil
}

// status is spanStatus for a decoded span.
func (s *wireSpan) status() string {
	for _, a := range [...]*otlpattr.First{&s.httpStatus, &s.httpLegacy} {
		if !a.Found {
			continue
		}
		switch a.V.Kind {
		case otlpattr.Int:
			return statusText(a.V.Num)
		case otlpattr.Str:
			if c, ok := otlpattr.ParseDecimal(a.V.Str); ok {
				return statusText(c)
			}
		}
	}
	switch s.statusCode {
	case statusCodeOK:
		return "OK"
	case statusCodeError:
		return "ERROR"
	}
	return "UNSET"
}

// keyValue decodes a KeyValue at depth: its key (the last key field, as
// in pdata) and its value into v, which must be zero. key aliases buf.
func (d *spanDecoder) keyValue(buf []byte, depth int, v *otlpattr.Value) (key []byte, err error) {
	if key = d.plainKeyValue(buf, depth, v); key != nil {
		return key, nil
	}
	return d.keyValueSlow(buf, depth, v)
}

// plainKeyValue is keyValue's fast path for the KeyValue every SDK
// writes: its key, then its value holding one string or one int, each
// field once and shorter than 128 bytes. It charges what keyValue and
// anyValue charge for it; anything else (nil, v untouched) takes the
// general path, which judges it from the start.
func (d *spanDecoder) plainKeyValue(buf []byte, depth int, v *otlpattr.Value) []byte {
	// 0x0a: field 1 (key), length-delimited; 0x12: field 2 (value).
	if depth+1 > maxProtoDepth || len(buf) < 4 || buf[0] != 0x0a || buf[1] >= 0x80 {
		return nil
	}
	kEnd := 2 + int(buf[1])
	if kEnd+4 > len(buf) || buf[kEnd] != 0x12 || buf[kEnd+1] >= 0x80 || kEnd+2+int(buf[kEnd+1]) != len(buf) {
		return nil
	}
	val := buf[kEnd+2:]
	// The key and the value are two length-delimited fields, the value's
	// one field an AnyValue field, and both messages are entered.
	const cost = 2*lenFieldBytes + anyValueFieldBytes
	switch val[0] {
	case 0x0a: // string_value
		if val[1] >= 0x80 || 2+int(val[1]) != len(val) {
			return nil
		}
		v.Kind, v.Str = otlpattr.Str, val[2:]
		d.shape.cost += cost + lenFieldBytes + decodedBytes[kindKeyValue] + decodedBytes[kindAnyValue]
	case 0x18: // int_value
		n, l := consumeVarint(val[1:])
		if l < 0 || 1+l != len(val) {
			return nil
		}
		v.Kind, v.Num = otlpattr.Int, int64(n)
		d.shape.cost += cost + decodedBytes[kindKeyValue] + decodedBytes[kindAnyValue]
	default:
		return nil
	}
	return buf[2:kEnd]
}

// keyValueSlow is keyValue for any encoding.
func (d *spanDecoder) keyValueSlow(buf []byte, depth int, v *otlpattr.Value) (key []byte, err error) {
	if err := d.enter(kindKeyValue, depth); err != nil {
		return nil, err
	}
	for pos := 0; pos < len(buf); {
		field, wire, p, err := d.tag(buf, pos, kindKeyValue)
		if err != nil {
			return nil, err
		}
		switch field {
		case 1: // key
			key, p, err = d.message(buf, p, wire)
		case 2: // value; a repeated one merges into the one before
			var m []byte
			if m, p, err = d.message(buf, p, wire); err == nil {
				err = d.anyValue(m, v, depth+1)
			}
		case 3: // key_strindex
			_, p, err = varint(buf, p, wire)
		default:
			p, err = d.skip(buf, p, wire)
		}
		if err != nil {
			return nil, err
		}
		pos = p
	}
	if key == nil {
		key = buf[:0] // a KeyValue without its key: the key is empty
	}
	return key, nil
}

// anyValue applies an AnyValue at depth to v: the last of its oneof
// fields wins.
func (d *spanDecoder) anyValue(buf []byte, v *otlpattr.Value, depth int) error {
	if err := d.enter(kindAnyValue, depth); err != nil {
		return err
	}
	for pos := 0; pos < len(buf); {
		field, wire, p, err := d.tag(buf, pos, kindAnyValue)
		if err != nil {
			return err
		}
		switch field {
		case 1: // string_value
			var s []byte
			if s, p, err = d.message(buf, p, wire); err == nil {
				*v = otlpattr.Value{Kind: otlpattr.Str, Str: s}
			}
		case 3: // int_value
			var n uint64
			if n, p, err = varint(buf, p, wire); err == nil {
				*v = otlpattr.Value{Kind: otlpattr.Int, Num: int64(n)}
			}
		default: // bool, double, array, kvlist, bytes, string_value_strindex: checked, not read
			p, err = d.checkField(buf, p, field, wire, &wireAnyValue, depth)
			if field <= 8 {
				*v = otlpattr.Value{}
			}
		}
		if err != nil {
			return err
		}
		pos = p
	}
	return nil
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
