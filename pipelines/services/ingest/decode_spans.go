package ingest

import (
	"errors"
	"math"
	"strconv"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/spikehunt/spikehunt/internal/otlpattr"
)

// The direct span decoder: an ExportTraceServiceRequest walked field by
// field straight into the requests columns, without pdata's object tree
// (a Span, its attribute slice and every string of it per span: most of
// the ingest's CPU and all of its garbage).
//
// It is a fast path, not a second authority. It accepts exactly the
// messages the pdata path (unmarshalTraces + decodeRequests) accepts and
// appends the same rows; whenever it meets something that path would
// reject — a malformed field, an id of the wrong length, a span the table
// cannot hold — it backs out and AppendTraces runs the pdata path on the
// message, so a rejection's reason and detail are pdata's by construction.
// Field numbers are those of opentelemetry-proto, as pdata 1.70 decodes
// them (decode.go's reference); FuzzSpanDecoderMatchesPdata keeps the two
// in step.

// foldAnyValue applies one AnyValue message to v. A KeyValue whose value
// field repeats merges the messages, as pdata does: the last of the oneof
// fields across all of them wins.
func foldAnyValue(buf []byte, v *otlpattr.Value) error {
	for pos := 0; pos < len(buf); {
		field, wire, p, err := consumeTag(buf, pos)
		if err != nil {
			return err
		}
		switch field {
		case 1: // string_value
			if wire != wireLen {
				return errWire
			}
			var start int
			if start, p, err = consumeLen(buf, p); err != nil {
				return err
			}
			*v = otlpattr.Value{Kind: otlpattr.Str, Str: buf[start:p]}
		case 3: // int_value
			if wire != wireVarint {
				return errWire
			}
			var n uint64
			if n, p, err = consumeVarint(buf, p); err != nil {
				return err
			}
			*v = otlpattr.Value{Kind: otlpattr.Int, Num: int64(n)}
		default:
			// bool, double, array, kvlist, bytes, string_value_strindex
			// (which pcommon types as empty): checked, not kept.
			end, err := checkField(buf, pos, &pbAnyValue)
			if err != nil {
				return err
			}
			if field >= 1 && field <= 8 {
				*v = otlpattr.Value{Kind: otlpattr.Other}
			}
			p = end
		}
		pos = p
	}
	return nil
}

// decodeKeyValue decodes a KeyValue: its key (the last key field, as in
// pdata) and value. key aliases buf.
func decodeKeyValue(buf []byte) (key []byte, v otlpattr.Value, err error) {
	for pos := 0; pos < len(buf); {
		field, wire, p, err := consumeTag(buf, pos)
		if err != nil {
			return nil, v, err
		}
		switch field {
		case 1: // key
			if wire != wireLen {
				return nil, v, errWire
			}
			var start int
			if start, p, err = consumeLen(buf, p); err != nil {
				return nil, v, err
			}
			key = buf[start:p]
		case 2: // value
			if wire != wireLen {
				return nil, v, errWire
			}
			var start int
			if start, p, err = consumeLen(buf, p); err != nil {
				return nil, v, err
			}
			if err := foldAnyValue(buf[start:p], &v); err != nil {
				return nil, v, err
			}
		default: // key_strindex, unknown
			if err := checkFieldValue(buf, field, wire, &p, &pbKeyValue); err != nil {
				return nil, v, err
			}
		}
		pos = p
	}
	return key, v, nil
}

// spanResource is what the rows take from a resource.
type spanResource struct {
	service, host, node, hwClass otlpattr.First
}

func (r *spanResource) decode(buf []byte) error {
	for pos := 0; pos < len(buf); {
		field, wire, p, err := consumeTag(buf, pos)
		if err != nil {
			return err
		}
		switch field {
		case 1: // attributes
			if wire != wireLen {
				return errWire
			}
			var start int
			if start, p, err = consumeLen(buf, p); err != nil {
				return err
			}
			key, v, err := decodeKeyValue(buf[start:p])
			if err != nil {
				return err
			}
			switch string(key) {
			case attrServiceName:
				r.service.Offer(v)
			case attrHostName:
				r.host.Offer(v)
			case attrNodeName:
				r.node.Offer(v)
			case attrHWClass:
				r.hwClass.Offer(v)
			}
		case 2: // dropped_attributes_count
			if wire != wireVarint {
				return errWire
			}
			if _, p, err = consumeVarint(buf, p); err != nil {
				return err
			}
		case 3: // entity_refs
			if wire != wireLen {
				return errWire
			}
			var start int
			if start, p, err = consumeLen(buf, p); err != nil {
				return err
			}
			if err := checkMessage(buf[start:p], &pbEntityRef); err != nil {
				return err
			}
		default:
			if p, err = consumeUnknown(buf, p, wire); err != nil {
				return err
			}
		}
		pos = p
	}
	return nil
}

// span is one decoded Span, the fields the requests table reads.
type span struct {
	traceID                [16]byte
	spanID                 [8]byte
	hasParent              bool // a parent span id other than all zeros
	name                   []byte
	kind                   int32
	start, end             uint64
	statusCode             int32
	route, weight, thread  otlpattr.First
	httpStatus, httpLegacy otlpattr.First
}

// decodeID reads an id field: empty (all zeros) or exactly len(id) bytes.
func decodeID(buf []byte, pos int, id []byte) (int, error) {
	start, end, err := consumeLen(buf, pos)
	if err != nil {
		return 0, err
	}
	switch end - start {
	case 0:
		clear(id)
	case len(id):
		copy(id, buf[start:end])
	default:
		return 0, errWire
	}
	return end, nil
}

func (s *span) decode(buf []byte) error {
	*s = span{}
	var parent [8]byte
	for pos := 0; pos < len(buf); {
		field, wire, p, err := consumeTag(buf, pos)
		if err != nil {
			return err
		}
		// Scalars repeat as in pdata: the last one wins.
		switch field {
		case 1, 2, 4: // trace_id, span_id, parent_span_id
			if wire != wireLen {
				return errWire
			}
			id := s.traceID[:]
			switch field {
			case 2:
				id = s.spanID[:]
			case 4:
				id = parent[:]
			}
			if p, err = decodeID(buf, p, id); err != nil {
				return err
			}
		case 5: // name
			if wire != wireLen {
				return errWire
			}
			var start int
			if start, p, err = consumeLen(buf, p); err != nil {
				return err
			}
			s.name = buf[start:p]
		case 6: // kind
			if wire != wireVarint {
				return errWire
			}
			var n uint64
			if n, p, err = consumeVarint(buf, p); err != nil {
				return err
			}
			s.kind = int32(n)
		case 7, 8: // start_time_unix_nano, end_time_unix_nano
			if wire != wireI64 {
				return errWire
			}
			var t uint64
			if t, p, err = consumeFixed64(buf, p); err != nil {
				return err
			}
			if field == 7 {
				s.start = t
			} else {
				s.end = t
			}
		case 9: // attributes
			if wire != wireLen {
				return errWire
			}
			var start int
			if start, p, err = consumeLen(buf, p); err != nil {
				return err
			}
			key, v, err := decodeKeyValue(buf[start:p])
			if err != nil {
				return err
			}
			switch string(key) {
			case attrHTTPRoute:
				s.route.Offer(v)
			case attrWeight:
				s.weight.Offer(v)
			case attrThreadID:
				s.thread.Offer(v)
			case attrHTTPStatus:
				s.httpStatus.Offer(v)
			case attrHTTPStatusLegacy:
				s.httpLegacy.Offer(v)
			}
		case 15: // status
			if wire != wireLen {
				return errWire
			}
			var start int
			if start, p, err = consumeLen(buf, p); err != nil {
				return err
			}
			if err := s.decodeStatus(buf[start:p]); err != nil {
				return err
			}
		case 3: // trace_state
			if wire != wireLen {
				return errWire
			}
			if _, p, err = consumeLen(buf, p); err != nil {
				return err
			}
		case 10, 12, 14: // dropped attributes, events, links counts
			if wire != wireVarint {
				return errWire
			}
			if _, p, err = consumeVarint(buf, p); err != nil {
				return err
			}
		case 11, 13: // events, links
			if wire != wireLen {
				return errWire
			}
			var start int
			if start, p, err = consumeLen(buf, p); err != nil {
				return err
			}
			schema := &pbSpanEvent
			if field == 13 {
				schema = &pbSpanLink
			}
			if err := checkMessage(buf[start:p], schema); err != nil {
				return err
			}
		case 16: // flags
			if wire != wireI32 {
				return errWire
			}
			if _, p, err = consumeFixed32(buf, p); err != nil {
				return err
			}
		default:
			if p, err = consumeUnknown(buf, p, wire); err != nil {
				return err
			}
		}
		pos = p
	}
	s.hasParent = parent != [8]byte{}
	return nil
}

// decodeStatus applies a Status message; a repeated status field merges
// into the one before, as in pdata.
func (s *span) decodeStatus(buf []byte) error {
	for pos := 0; pos < len(buf); {
		field, wire, p, err := consumeTag(buf, pos)
		if err != nil {
			return err
		}
		switch field {
		case 2: // message
			if wire != wireLen {
				return errWire
			}
			if _, p, err = consumeLen(buf, p); err != nil {
				return err
			}
		case 3: // code
			if wire != wireVarint {
				return errWire
			}
			var n uint64
			if n, p, err = consumeVarint(buf, p); err != nil {
				return err
			}
			s.statusCode = int32(n)
		default:
			if p, err = consumeUnknown(buf, p, wire); err != nil {
				return err
			}
		}
		pos = p
	}
	return nil
}

// OTLP enum values (trace.proto) that the rows depend on.
const (
	spanKindUnspecified = 0
	spanKindServer      = 2
	statusCodeOK        = 1
	statusCodeError     = 2
)

// isRequest is isRequest (rows_requests.go) for a decoded span.
func (s *span) isRequest() bool {
	switch s.kind {
	case spanKindServer:
		return true
	case spanKindUnspecified:
		return !s.hasParent
	}
	return false
}

// spanDecoder decodes messages into a RequestRows' columns. Its scratch
// is reused from message to message.
type spanDecoder struct {
	span   span
	scopes [][]byte // the scope_spans of the resource being decoded
}

// errRefused is the direct decoder's "let pdata judge" for a span that
// fillRequest rejects (errWire for a malformed message).
var errRefused = errors.New("span refused: the pdata path says why")

// appendDirect decodes msg into r's columns. On error r is as it was
// before the call and the caller must judge msg by the pdata path. The
// columns copy what they keep: msg is the caller's again on return.
func (d *spanDecoder) appendDirect(r *RequestRows, msg []byte) (rows, skipped int, err error) {
	mark := r.mark()
	r.capped = Capped{}
	defer func() {
		if p := recover(); p != nil {
			err = errRefused
		}
		if err != nil {
			r.truncate(mark)
			rows, skipped = 0, 0
		}
	}()
	defer func() { d.span = span{} }() // it aliases msg
	for pos := 0; pos < len(msg); {
		field, wire, p, err := consumeTag(msg, pos)
		if err != nil {
			return 0, 0, err
		}
		if field == 1 { // resource_spans
			if wire != wireLen {
				return 0, 0, errWire
			}
			var start int
			if start, p, err = consumeLen(msg, p); err != nil {
				return 0, 0, err
			}
			n, s, err := d.resourceSpans(r, msg[start:p])
			if err != nil {
				return 0, 0, err
			}
			rows, skipped = rows+n, skipped+s
		} else if p, err = consumeUnknown(msg, p, wire); err != nil {
			return 0, 0, err
		}
		pos = p
	}
	return rows, skipped, nil
}

// resourceSpans decodes one ResourceSpans. Its resource may follow its
// spans on the wire, so a first pass reads the resource and checks the
// other fields, and a second one decodes the spans.
func (d *spanDecoder) resourceSpans(r *RequestRows, buf []byte) (rows, skipped int, err error) {
	var res spanResource
	d.scopes = d.scopes[:0]
	for pos := 0; pos < len(buf); {
		field, wire, p, err := consumeTag(buf, pos)
		if err != nil {
			return 0, 0, err
		}
		switch field {
		case 1, 2, 3, 1000: // resource, scope_spans, schema_url, deprecated scope_spans
			if wire != wireLen {
				return 0, 0, errWire
			}
			var start int
			if start, p, err = consumeLen(buf, p); err != nil {
				return 0, 0, err
			}
			switch field {
			case 1:
				err = res.decode(buf[start:p])
			case 2:
				d.scopes = append(d.scopes, buf[start:p])
			case 1000:
				// pdata decodes these (InstrumentationLibrarySpans, OTLP
				// before 0.15) and so refuses them malformed, but its
				// proto unmarshaler never moves them to scope_spans: they
				// make no rows.
				_, _, err = d.scopeSpans(nil, buf[start:p], nil)
			}
			if err != nil {
				return 0, 0, err
			}
		default:
			if p, err = consumeUnknown(buf, p, wire); err != nil {
				return 0, 0, err
			}
		}
		pos = p
	}
	// The resource's columns, as decodeRequests and hostOf read them.
	rr := rowResource{service: res.service.Str(), host: res.host.Str(), hwClass: res.hwClass.Str()}
	if len(rr.service) == 0 {
		rr.service = []byte(unknownService)
	}
	if len(rr.host) == 0 {
		rr.host = res.node.Str()
	}
	if len(rr.host) == 0 {
		rr.host = []byte(unknownHost)
	}
	rr.service, rr.host, rr.hwClass = capBytes(rr.service, &rr.cut), capBytes(rr.host, &rr.cut), capBytes(rr.hwClass, &rr.cut)
	for _, sc := range d.scopes {
		n, s, err := d.scopeSpans(r, sc, &rr)
		if err != nil {
			return 0, 0, err
		}
		rows, skipped = rows+n, skipped+s
	}
	clear(d.scopes) // they alias msg, which is the caller's again on return
	return rows, skipped, nil
}

// rowResource is a resource's values for its rows, and their keys in the
// batch's dictionaries once a row needs them: a resource without request
// spans adds nothing to the dictionaries.
type rowResource struct {
	service, host, hwClass []byte
	keyed                  bool
	serviceKey, hostKey    uint32
	hwClassKey             uint32
	cut                    int // of the three, how many were cut to MaxValueBytes
}

// scopeSpans decodes a ScopeSpans into rows of r for resource res; with r
// nil it only checks it.
func (d *spanDecoder) scopeSpans(r *RequestRows, buf []byte, res *rowResource) (rows, skipped int, err error) {
	for pos := 0; pos < len(buf); {
		field, wire, p, err := consumeTag(buf, pos)
		if err != nil {
			return 0, 0, err
		}
		switch field {
		case 1, 2, 3: // scope, spans, schema_url
			if wire != wireLen {
				return 0, 0, errWire
			}
			var start int
			if start, p, err = consumeLen(buf, p); err != nil {
				return 0, 0, err
			}
			switch field {
			case 1:
				err = checkMessage(buf[start:p], &pbInstrumentationScope)
			case 2:
				s := &d.span
				if err = s.decode(buf[start:p]); err != nil || r == nil {
					break
				}
				if !s.isRequest() {
					skipped++
					break
				}
				if err = r.appendSpan(s, res); err == nil {
					rows++
				}
			}
			if err != nil {
				return 0, 0, err
			}
		default:
			if p, err = consumeUnknown(buf, p, wire); err != nil {
				return 0, 0, err
			}
		}
		pos = p
	}
	return rows, skipped, nil
}

// unknownEndpointBytes and friends are the stand-ins as bytes, so that
// looking them up in a dictionary does not allocate.
var unknownEndpointBytes = []byte(unknownEndpoint)

// appendSpan appends the row of request span s, or refuses s as
// fillRequest would reject it (and then appends nothing).
func (r *RequestRows) appendSpan(s *span, res *rowResource) error {
	start, end := s.start, s.end
	if start == 0 || end == 0 || start < uint64(earliest) || start > uint64(latest) || end < start {
		return errRefused
	}
	weight := uint32(1)
	if s.weight.Found {
		w, ok := s.weight.V.AsInt()
		if !ok || w < 1 || w > math.MaxUint32 {
			return errRefused
		}
		weight = uint32(w)
	}
	endpoint := unknownEndpointBytes
	if v := s.route.Str(); len(v) > 0 {
		endpoint = v
	} else if len(s.name) > 0 {
		endpoint = s.name
	}
	cut := res.cut
	if len(endpoint) > MaxValueBytes { // checked here: the usual path makes no call
		endpoint = endpoint[:cappedLen(endpoint)]
		cut++
	}
	if !res.keyed {
		res.serviceKey, res.hostKey, res.hwClassKey = r.service.keyBytes(res.service), r.host.keyBytes(res.host), r.hwClass.keyBytes(res.hwClass)
		res.keyed = true
	}
	r.ts.Data = append(r.ts.Data, proto.DateTime64(start/1000))
	r.service.appendKey(res.serviceKey)
	r.host.appendKey(res.hostKey)
	r.hwClass.appendKey(res.hwClassKey)
	r.endpoint.appendKey(r.endpoint.keyBytes(endpoint))
	r.latency = append(r.latency, uint32(min((end-start)/1000, math.MaxUint32)))
	r.status.appendKey(r.statusKey(s))
	r.traceID.Buf = append(r.traceID.Buf, s.traceID[:]...)
	r.spanID.Buf = append(r.spanID.Buf, s.spanID[:]...)
	thread := uint32(0)
	if s.thread.Found {
		if id, ok := s.thread.V.AsInt(); ok && id >= 0 && id <= math.MaxUint32 {
			thread = uint32(id)
		}
	}
	r.thread = append(r.thread, thread)
	r.weight = append(r.weight, weight)
	if cut != 0 {
		r.capped.ValueTooLong += cut
	}
	return nil
}

// statusKey is statusOf for a decoded span, as a key of the status column.
func (r *RequestRows) statusKey(s *span) uint32 {
	for _, a := range [...]*otlpattr.First{&s.httpStatus, &s.httpLegacy} {
		if !a.Found {
			continue
		}
		if c, ok := a.V.AsInt(); ok {
			if c >= 0 && c < int64(len(httpCodes)) {
				return r.status.key(httpCodes[c])
			}
			return r.status.key(strconv.FormatInt(c, 10))
		}
	}
	switch s.statusCode {
	case statusCodeOK:
		return r.status.key("OK")
	case statusCodeError:
		return r.status.key("ERROR")
	}
	return r.status.key("UNSET")
}
