// Package spanwalk reads an OTLP ExportTraceServiceRequest in protobuf
// field by field, without pdata's object tree (a struct per span, per
// attribute and per value, and a string per key: most of an OTLP
// decoder's CPU and all of its garbage). spikehunt's two direct span
// decoders walk with it: the agent's OTLP receivers (agents/intake) and
// the ingest's Kafka consumer (pipelines/services/ingest). Each is a Sink:
// the walk hands it every resource and every span, with the attributes
// spikehunt reads, and the sink keeps what it wants.
//
// The walk checks every field as pdata 1.70's unmarshaler does
// (go.opentelemetry.io/collector/pdata/internal/generated_proto_*.go): a
// known field of the wrong wire type, a truncated field, an id of the
// wrong length. It is a fast path, not a second authority: on anything
// pdata would refuse, and past the bounds its Options set, Walk returns
// ErrRefused (or the sink's error) and the caller judges the message by
// its pdata path. Each caller's differential fuzz test
// (FuzzSpanDecoderMatchesPdata) holds the walk and its sink to that path.
//
// Values alias the message: a sink copies what it keeps past Walk.
package spanwalk

import (
	"errors"
	"math"

	"github.com/spikehunt/spikehunt/internal/otlpattr"
)

// ErrRefused is every reason the walk gives up on a message: the caller's
// reference path judges it again and says why, if it refuses it too.
var ErrRefused = errors.New("otlp: not for the direct decoder")

// Options are what the two callers' reference paths take differently.
// The zero Options walk as pdata's proto unmarshaler does.
type Options struct {
	// MaxDepth refuses messages nested deeper (the request is depth 1);
	// 0 bounds nothing, as pdata, which recurses without a limit.
	MaxDepth int
	// MaxSpans refuses a message with more spans, of any kind; 0 bounds
	// nothing.
	MaxSpans int
	// RefuseGroups refuses a protobuf group in any field, as the agent's
	// pricing walk does; without it an unknown field's group is skipped
	// as pdata skips it (loosely: it ends at the first field inside it
	// that is not a group).
	RefuseGroups bool
	// MigrateLegacy walks a ResourceSpans' instrumentation_library_spans
	// (OTLP before 0.15) as its scope spans when it has none, as
	// ptraceotlp's export request does; otherwise they are checked, not
	// passed on, as pdata's proto unmarshaler leaves them.
	MigrateLegacy bool
}

// Kind is a message type of ExportTraceServiceRequest
// (opentelemetry/proto/collector/trace/v1/trace_service.proto and the
// messages it holds).
type Kind uint8

const (
	KindNone Kind = iota
	KindRequest
	KindResourceSpans
	KindResource
	KindEntityRef
	KindScopeSpans
	KindScope
	KindSpan
	KindEvent
	KindLink
	KindStatus
	KindKeyValue
	KindAnyValue
	KindArrayValue
	KindKeyValueList
	KindStrings // a repeated string of an entity ref, not walked
	NumKinds
)

// Tally counts what a decoder of the message allocates per message and
// per field, so that a caller can price it as it prices a message it has
// not decoded yet; the walk itself allocates nothing.
type Tally struct {
	Messages       [NumKinds]int64 // the messages of each kind walked (KindStrings: the strings)
	LenFields      int64           // length-delimited fields: strings, bytes and messages
	AnyValueFields int64           // fields of attribute values, each boxed by pdata
	Spans          int             // spans of any kind
}

// Attribute keys the walk reads: what the agent's encoder
// (internal/otlpwire) writes, and what other OTel instrumentations put
// the same facts under.
const (
	AttrServiceName      = "service.name"
	AttrHostName         = "host.name"
	AttrNodeName         = "k8s.node.name"
	AttrHWClass          = "spikehunt.hw_class"
	AttrHTTPRoute        = "http.route"
	AttrHTTPStatus       = "http.response.status_code"
	AttrHTTPStatusLegacy = "http.status_code" // semconv before 1.21
	AttrThreadID         = "thread.id"
	AttrWeight           = "spikehunt.weight"
)

// OTLP enum values (trace.proto) that decide a span's fate.
const (
	SpanKindUnspecified = 0
	SpanKindServer      = 2
	StatusCodeOK        = 1
	StatusCodeError     = 2
)

// Resource is a ResourceSpans' resource: its attributes spikehunt reads,
// each looked up as pcommon.Map.Get does.
type Resource struct {
	Service, Host, Node, HWClass otlpattr.First
}

// Span is one Span as the walk reads it: the fields a request needs.
// Scalars that repeat take the last value, and a repeated status merges,
// as in pdata.
type Span struct {
	TraceID    [16]byte
	SpanID     [8]byte
	HasParent  bool // a parent span id other than all zeros
	Name       []byte
	Kind       int32
	Start, End uint64
	StatusCode int32

	Route, Weight, Thread        otlpattr.First
	HTTPStatus, HTTPStatusLegacy otlpattr.First
}

// IsRequest says whether the span is a request: a SERVER span, or a root
// span (no parent) of kind UNSPECIFIED, which apps that time their own
// handlers without the semantic conventions often leave the kind unset.
func (s *Span) IsRequest() bool {
	switch s.Kind {
	case SpanKindServer:
		return true
	case SpanKindUnspecified:
		return !s.HasParent
	}
	return false
}

// HTTPCode is the span's HTTP status code: the first of its two
// attributes that holds an int or a decimal string.
func (s *Span) HTTPCode() (int64, bool) {
	for _, a := range [...]*otlpattr.First{&s.HTTPStatus, &s.HTTPStatusLegacy} {
		if !a.Found {
			continue
		}
		if c, ok := a.V.AsInt(); ok {
			return c, true
		}
	}
	return 0, false
}

// Sink is what a decoder does with the walk's findings. The pointers are
// the walker's scratch, valid until the method returns; the bytes they
// hold alias the message. An error from either ends the walk, and Walk
// returns it.
type Sink interface {
	// Resource begins a ResourceSpans, before any of its spans: the
	// resource may follow the spans on the wire, so it is read first.
	Resource(r *Resource) error
	// Span is one span of the ResourceSpans last begun, in the order of
	// the message.
	Span(s *Span) error
}

// Walker is a walk's scratch, reused from message to message; one serves
// one goroutine. Set Options before Walk.
type Walker struct {
	Options
	Tally Tally // of the last walk

	maxDepth, maxSpans int
	resource           Resource
	span               Span
	scopes             [][]byte // the current resource spans' scope_spans (2)
	legacy             [][]byte // and its instrumentation_library_spans (1000)
}

// Release drops the walker's references into the last message, so that a
// pooled walker does not keep it alive.
func (w *Walker) Release() {
	clear(w.scopes[:cap(w.scopes)])
	clear(w.legacy[:cap(w.legacy)])
	w.scopes, w.legacy = w.scopes[:0], w.legacy[:0]
	w.resource, w.span = Resource{}, Span{}
}

// Walk walks msg, an ExportTraceServiceRequest, into s: on nil every
// field passed the checks and s had every resource and every span it
// would get from pdata's decoding of msg, in order; w.Tally counts msg.
// On error s may have had some of them: it must be able to forget them.
//
// The sink's methods are called once per resource and once per span,
// never per field: Go compiles a generic function once per GC shape, and
// all pointer sinks share one, so a call to the sink is an indirect call
// and stays out of the walk's inner loops.
func Walk[S Sink](w *Walker, msg []byte, s S) error {
	w.Tally = Tally{}
	w.maxDepth, w.maxSpans = w.MaxDepth, w.MaxSpans
	if w.maxDepth <= 0 {
		w.maxDepth = math.MaxInt
	}
	if w.maxSpans <= 0 {
		w.maxSpans = math.MaxInt
	}
	w.Tally.Messages[KindRequest]++
	for pos := 0; pos < len(msg); {
		field, wire, p, err := w.tag(msg, pos, KindRequest)
		if err != nil {
			return err
		}
		if field == 1 { // resource_spans
			var v []byte
			if v, p, err = w.message(msg, p, wire); err != nil {
				return err
			}
			if err := resourceSpans(w, v, s); err != nil {
				return err
			}
		} else if p, err = w.skip(msg, p, wire); err != nil {
			return err
		}
		pos = p
	}
	return nil
}

// deprecatedScopeSpans is ResourceSpans' instrumentation_library_spans of
// OTLP before 0.15, which pdata still decodes.
const deprecatedScopeSpans = 1000

// resourceSpans walks a ResourceSpans (depth 2). Its resource may come
// after its spans on the wire, so the first loop reads the resource and
// gathers the scope spans, and the spans are walked after it.
func resourceSpans[S Sink](w *Walker, buf []byte, s S) error {
	if err := w.enter(KindResourceSpans, 2); err != nil {
		return err
	}
	w.resource = Resource{}
	w.scopes, w.legacy = w.scopes[:0], w.legacy[:0]
	for pos := 0; pos < len(buf); {
		field, wire, p, err := w.tag(buf, pos, KindResourceSpans)
		if err != nil {
			return err
		}
		switch field {
		case 1, 2, 3, deprecatedScopeSpans: // resource, scope_spans, schema_url, instrumentation_library_spans
			var v []byte
			if v, p, err = w.message(buf, p, wire); err != nil {
				return err
			}
			switch field {
			case 1:
				err = w.decodeResource(v)
			case 2:
				w.scopes = append(w.scopes, v)
			case deprecatedScopeSpans:
				w.legacy = append(w.legacy, v)
			}
			if err != nil {
				return err
			}
		default:
			if p, err = w.skip(buf, p, wire); err != nil {
				return err
			}
		}
		pos = p
	}
	emit, drop := w.scopes, w.legacy
	if w.MigrateLegacy && len(emit) == 0 {
		emit, drop = drop, nil
	}
	if err := s.Resource(&w.resource); err != nil {
		return err
	}
	for _, sc := range emit {
		if err := scopeSpans(w, sc, s, true); err != nil {
			return err
		}
	}
	for _, sc := range drop {
		if err := scopeSpans(w, sc, s, false); err != nil {
			return err
		}
	}
	return nil
}

// scopeSpans walks a ScopeSpans (depth 3); with pass false its spans are
// checked and counted but not passed to s (pdata drops them).
func scopeSpans[S Sink](w *Walker, buf []byte, s S, pass bool) error {
	if err := w.enter(KindScopeSpans, 3); err != nil {
		return err
	}
	for pos := 0; pos < len(buf); {
		field, wire, p, err := w.tag(buf, pos, KindScopeSpans)
		if err != nil {
			return err
		}
		switch field {
		case 1, 2, 3: // scope, spans, schema_url
			var v []byte
			if v, p, err = w.message(buf, p, wire); err != nil {
				return err
			}
			switch field {
			case 1:
				err = w.check(v, &wireScope, 4)
			case 2:
				if w.Tally.Spans++; w.Tally.Spans > w.maxSpans {
					return ErrRefused
				}
				if err = w.decodeSpan(v); err == nil && pass {
					err = s.Span(&w.span)
				}
			}
			if err != nil {
				return err
			}
		default:
			if p, err = w.skip(buf, p, wire); err != nil {
				return err
			}
		}
		pos = p
	}
	return nil
}

// decodeResource reads a Resource (depth 3) into w.resource; a repeated
// resource field merges into the one before, as in pdata.
func (w *Walker) decodeResource(buf []byte) error {
	if err := w.enter(KindResource, 3); err != nil {
		return err
	}
	r := &w.resource
	for pos := 0; pos < len(buf); {
		field, wire, p, err := w.tag(buf, pos, KindResource)
		if err != nil {
			return err
		}
		switch field {
		case 1: // attributes
			var v []byte
			if v, p, err = w.message(buf, p, wire); err != nil {
				return err
			}
			var val otlpattr.Value
			key, err := w.keyValue(v, 4, &val)
			if err != nil {
				return err
			}
			switch string(key) {
			case AttrServiceName:
				r.Service.Offer(val)
			case AttrHostName:
				r.Host.Offer(val)
			case AttrNodeName:
				r.Node.Offer(val)
			case AttrHWClass:
				r.HWClass.Offer(val)
			}
		case 2: // dropped_attributes_count
			_, p, err = varint(buf, p, wire)
		case 3: // entity_refs
			var v []byte
			if v, p, err = w.message(buf, p, wire); err == nil {
				err = w.check(v, &wireEntityRef, 4)
			}
		default:
			p, err = w.skip(buf, p, wire)
		}
		if err != nil {
			return err
		}
		pos = p
	}
	return nil
}

// decodeSpan reads a Span (depth 4) into w.span.
func (w *Walker) decodeSpan(buf []byte) error {
	if err := w.enter(KindSpan, 4); err != nil {
		return err
	}
	s := &w.span
	*s = Span{}
	var parent [8]byte
	for pos := 0; pos < len(buf); {
		field, wire, p, err := w.tag(buf, pos, KindSpan)
		if err != nil {
			return err
		}
		var v []byte
		var n uint64
		switch field {
		case 1: // trace_id
			if v, p, err = w.message(buf, p, wire); err == nil {
				err = setID(s.TraceID[:], v)
			}
		case 2: // span_id
			if v, p, err = w.message(buf, p, wire); err == nil {
				err = setID(s.SpanID[:], v)
			}
		case 4: // parent_span_id
			if v, p, err = w.message(buf, p, wire); err == nil {
				err = setID(parent[:], v)
			}
		case 3: // trace_state
			_, p, err = w.message(buf, p, wire)
		case 5: // name
			s.Name, p, err = w.message(buf, p, wire)
		case 6: // kind
			n, p, err = varint(buf, p, wire)
			s.Kind = int32(n)
		case 7: // start_time_unix_nano
			s.Start, p, err = fixed64(buf, p, wire)
		case 8: // end_time_unix_nano
			s.End, p, err = fixed64(buf, p, wire)
		case 9: // attributes
			if v, p, err = w.message(buf, p, wire); err != nil {
				return err
			}
			var val otlpattr.Value
			key, err := w.keyValue(v, 5, &val)
			if err != nil {
				return err
			}
			switch string(key) {
			case AttrHTTPRoute:
				s.Route.Offer(val)
			case AttrWeight:
				s.Weight.Offer(val)
			case AttrThreadID:
				s.Thread.Offer(val)
			case AttrHTTPStatus:
				s.HTTPStatus.Offer(val)
			case AttrHTTPStatusLegacy:
				s.HTTPStatusLegacy.Offer(val)
			}
		case 10, 12, 14: // dropped attributes, events, links counts
			_, p, err = varint(buf, p, wire)
		case 11: // events
			if v, p, err = w.message(buf, p, wire); err == nil {
				err = w.check(v, &wireEvent, 5)
			}
		case 13: // links
			if v, p, err = w.message(buf, p, wire); err == nil {
				err = w.check(v, &wireLink, 5)
			}
		case 15: // status
			if v, p, err = w.message(buf, p, wire); err == nil {
				err = w.decodeStatus(v)
			}
		case 16: // flags
			if wire != wireI32 {
				return ErrRefused
			}
			p, err = w.skip(buf, p, wire)
		default:
			p, err = w.skip(buf, p, wire)
		}
		if err != nil {
			return err
		}
		pos = p
	}
	s.HasParent = parent != [8]byte{}
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
		return ErrRefused
	}
	return nil
}

// decodeStatus applies a Status (depth 5) to w.span.
func (w *Walker) decodeStatus(buf []byte) error {
	if err := w.enter(KindStatus, 5); err != nil {
		return err
	}
	for pos := 0; pos < len(buf); {
		field, wire, p, err := w.tag(buf, pos, KindStatus)
		if err != nil {
			return err
		}
		switch field {
		case 2: // message
			_, p, err = w.message(buf, p, wire)
		case 3: // code
			var n uint64
			n, p, err = varint(buf, p, wire)
			w.span.StatusCode = int32(n)
		default:
			p, err = w.skip(buf, p, wire)
		}
		if err != nil {
			return err
		}
		pos = p
	}
	return nil
}

// keyValue reads a KeyValue at depth: its key (the last key field, as in
// pdata) and its value into v, which must be zero. key aliases buf.
func (w *Walker) keyValue(buf []byte, depth int, v *otlpattr.Value) (key []byte, err error) {
	if key = w.plainKeyValue(buf, depth, v); key != nil {
		return key, nil
	}
	return w.keyValueSlow(buf, depth, v)
}

// plainKeyValue is keyValue's fast path for the KeyValue every SDK
// writes: its key, then its value holding one string or one int, each
// field once and shorter than 128 bytes. It counts what keyValue and
// anyValue count for it; anything else (nil, v untouched) takes the
// general path, which judges it from the start.
func (w *Walker) plainKeyValue(buf []byte, depth int, v *otlpattr.Value) []byte {
	// 0x0a: field 1 (key), length-delimited; 0x12: field 2 (value).
	if depth+1 > w.maxDepth || len(buf) < 4 || buf[0] != 0x0a || buf[1] >= 0x80 {
		return nil
	}
	kEnd := 2 + int(buf[1])
	if kEnd+4 > len(buf) || buf[kEnd] != 0x12 || buf[kEnd+1] >= 0x80 || kEnd+2+int(buf[kEnd+1]) != len(buf) {
		return nil
	}
	val := buf[kEnd+2:]
	// The key and the value are two length-delimited fields, the value's
	// one field an AnyValue field, and both messages are entered.
	switch val[0] {
	case 0x0a: // string_value
		if val[1] >= 0x80 || 2+int(val[1]) != len(val) {
			return nil
		}
		v.Kind, v.Str = otlpattr.Str, val[2:]
		w.Tally.LenFields += 3
	case 0x18: // int_value
		n, l := ConsumeVarint(val[1:])
		if l < 0 || 1+l != len(val) {
			return nil
		}
		v.Kind, v.Num = otlpattr.Int, int64(n)
		w.Tally.LenFields += 2
	default:
		return nil
	}
	w.Tally.AnyValueFields++
	w.Tally.Messages[KindKeyValue]++
	w.Tally.Messages[KindAnyValue]++
	return buf[2:kEnd]
}

// keyValueSlow is keyValue for any encoding.
func (w *Walker) keyValueSlow(buf []byte, depth int, v *otlpattr.Value) (key []byte, err error) {
	if err := w.enter(KindKeyValue, depth); err != nil {
		return nil, err
	}
	for pos := 0; pos < len(buf); {
		field, wire, p, err := w.tag(buf, pos, KindKeyValue)
		if err != nil {
			return nil, err
		}
		switch field {
		case 1: // key
			key, p, err = w.message(buf, p, wire)
		case 2: // value; a repeated one merges into the one before
			var m []byte
			if m, p, err = w.message(buf, p, wire); err == nil {
				err = w.anyValue(m, v, depth+1)
			}
		case 3: // key_strindex
			_, p, err = varint(buf, p, wire)
		default:
			p, err = w.skip(buf, p, wire)
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
func (w *Walker) anyValue(buf []byte, v *otlpattr.Value, depth int) error {
	if err := w.enter(KindAnyValue, depth); err != nil {
		return err
	}
	for pos := 0; pos < len(buf); {
		field, wire, p, err := w.tag(buf, pos, KindAnyValue)
		if err != nil {
			return err
		}
		switch field {
		case 1: // string_value
			var s []byte
			if s, p, err = w.message(buf, p, wire); err == nil {
				*v = otlpattr.Value{Kind: otlpattr.Str, Str: s}
			}
		case 3: // int_value
			var n uint64
			if n, p, err = varint(buf, p, wire); err == nil {
				*v = otlpattr.Value{Kind: otlpattr.Int, Num: int64(n)}
			}
		default: // bool, double, array, kvlist, bytes, string_value_strindex: checked, not read
			p, err = w.checkField(buf, p, field, wire, &wireAnyValue, depth)
			if field <= 8 {
				*v = otlpattr.Value{Kind: otlpattr.Other}
			}
		}
		if err != nil {
			return err
		}
		pos = p
	}
	return nil
}
