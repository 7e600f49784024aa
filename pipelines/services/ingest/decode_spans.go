package ingest

import (
	"errors"
	"math"
	"strconv"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/spikehunt/spikehunt/internal/otlpwire/spanwalk"
)

// The direct span decoder: an ExportTraceServiceRequest walked field by
// field (internal/otlpwire/spanwalk) straight into the requests columns,
// without pdata's object tree (a Span, its attribute slice and every
// string of it per span: most of the ingest's CPU and all of its
// garbage).
//
// It is a fast path, not a second authority. It accepts exactly the
// messages the pdata path (unmarshalTraces + decodeRequests) accepts and
// appends the same rows; whenever it meets something that path would
// reject — a malformed field, an id of the wrong length, a span the table
// cannot hold — it backs out and AppendTraces runs the pdata path on the
// message, so a rejection's reason and detail are pdata's by construction.
// The walk takes its zero Options: pdata's proto unmarshaler has no depth
// or span bound, skips an unknown group, and leaves the deprecated
// instrumentation_library_spans out of the spans (they make no rows);
// FuzzSpanDecoderMatchesPdata keeps the two in step.

// spanDecoder decodes messages into a RequestRows' columns: it is the
// walk's sink (Resource, Span). Its scratch is reused from message to
// message.
type spanDecoder struct {
	walk          spanwalk.Walker
	r             *RequestRows // of the message being decoded
	res           rowResource  // of the resource spans being decoded
	rows, skipped int
}

// errRefused is the direct decoder's "let pdata judge" for a span that
// fillRequest rejects (spanwalk.ErrRefused for a malformed message).
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
	defer func() { // they alias msg
		d.walk.Release()
		d.r, d.res = nil, rowResource{}
	}()
	d.r, d.rows, d.skipped = r, 0, 0
	if err := spanwalk.Walk(&d.walk, msg, d); err != nil {
		return 0, 0, err
	}
	return d.rows, d.skipped, nil
}

// Resource takes a resource's columns, as decodeRequests and hostOf read
// them, for the spans that follow.
func (d *spanDecoder) Resource(res *spanwalk.Resource) error {
	rr := rowResource{service: res.Service.Str(), host: res.Host.Str(), hwClass: res.HWClass.Str()}
	if len(rr.service) == 0 {
		rr.service = []byte(unknownService)
	}
	if len(rr.host) == 0 {
		rr.host = res.Node.Str()
	}
	if len(rr.host) == 0 {
		rr.host = []byte(unknownHost)
	}
	rr.service, rr.host, rr.hwClass = capBytes(rr.service, &rr.cut), capBytes(rr.host, &rr.cut), capBytes(rr.hwClass, &rr.cut)
	d.res = rr
	return nil
}

// Span appends the row of a request span of the last resource, and
// counts the other spans as skipped.
func (d *spanDecoder) Span(s *spanwalk.Span) error {
	if !s.IsRequest() {
		d.skipped++
		return nil
	}
	if err := d.r.appendSpan(s, &d.res); err != nil {
		return err
	}
	d.rows++
	return nil
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

// unknownEndpointBytes and friends are the stand-ins as bytes, so that
// looking them up in a dictionary does not allocate.
var unknownEndpointBytes = []byte(unknownEndpoint)

// appendSpan appends the row of request span s, or refuses s as
// fillRequest would reject it (and then appends nothing).
func (r *RequestRows) appendSpan(s *spanwalk.Span, res *rowResource) error {
	start, end := s.Start, s.End
	if start == 0 || end == 0 || start < uint64(earliest) || start > uint64(latest) || end < start {
		return errRefused
	}
	weight := uint32(1)
	if s.Weight.Found {
		w, ok := s.Weight.V.AsInt()
		if !ok || w < 1 || w > math.MaxUint32 {
			return errRefused
		}
		weight = uint32(w)
	}
	endpoint := unknownEndpointBytes
	if v := s.Route.Str(); len(v) > 0 {
		endpoint = v
	} else if len(s.Name) > 0 {
		endpoint = s.Name
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
	r.traceID.Buf = append(r.traceID.Buf, s.TraceID[:]...)
	r.spanID.Buf = append(r.spanID.Buf, s.SpanID[:]...)
	thread := uint32(0)
	if s.Thread.Found {
		if id, ok := s.Thread.V.AsInt(); ok && id >= 0 && id <= math.MaxUint32 {
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
func (r *RequestRows) statusKey(s *spanwalk.Span) uint32 {
	if c, ok := s.HTTPCode(); ok {
		if c >= 0 && c < int64(len(httpCodes)) {
			return r.status.key(httpCodes[c])
		}
		return r.status.key(strconv.FormatInt(c, 10))
	}
	switch s.StatusCode {
	case spanwalk.StatusCodeOK:
		return r.status.key("OK")
	case spanwalk.StatusCodeError:
		return r.status.key("ERROR")
	}
	return r.status.key("UNSET")
}
