// The protobuf wire level of the direct span decoder (decode_spans.go):
// tags, varints and length-delimited fields, each priced as
// scanTraceRequest prices it, and the schema check of the messages the
// decoder only validates and prices, refusing what pdata 1.70 refuses.

package intake

import "encoding/binary"

// Protobuf wire types.
const (
	wireVarint = 0
	wireI64    = 1
	wireLen    = 2
	wireI32    = 5
)

// tag reads a field's tag in a message of kind k: pdata cuts the field
// number to int32 and refuses it ≤ 0; a group's wire types back out
// (scanTraceRequest refuses them, pdata skips them loosely). Every field
// of an AnyValue is charged, as scanTraceRequest charges it. The one-byte
// tags of every field OTLP defines but a span's flags take the inlined
// path.
func (d *spanDecoder) tag(buf []byte, pos int, k msgKind) (field int32, wire int, _ int, _ error) {
	if pos < len(buf) && k != kindAnyValue {
		if t := buf[pos]; t < 0x80 && t >= 8 && plainWire[t&7] {
			return int32(t >> 3), int(t & 7), pos + 1, nil
		}
	}
	return d.tagSlow(buf, pos, k)
}

// plainWire holds the wire types OTLP uses: no groups, no 6 or 7.
var plainWire = [8]bool{wireVarint: true, wireI64: true, wireLen: true, wireI32: true}

func (d *spanDecoder) tagSlow(buf []byte, pos int, k msgKind) (field int32, wire int, _ int, _ error) {
	if len(buf)-pos >= 2 && buf[pos] >= 0x80 && buf[pos+1] < 0x80 { // fields 16–2047: a span's flags
		v := uint64(buf[pos]&0x7f) | uint64(buf[pos+1])<<7
		field, wire, pos = int32(v>>3), int(v&7), pos+2
	} else {
		v, n := consumeVarint(buf[pos:])
		if n < 0 {
			return 0, 0, 0, errBackOut
		}
		field, wire, pos = int32(v>>3), int(v&7), pos+n
	}
	if field <= 0 || !plainWire[wire] {
		return 0, 0, 0, errBackOut
	}
	if k == kindAnyValue {
		d.shape.cost += anyValueFieldBytes
	}
	return field, wire, pos, nil
}

// varint reads a varint field's value; wire must say varint.
func varint(buf []byte, pos, wire int) (uint64, int, error) {
	if wire == wireVarint && pos < len(buf) && buf[pos] < 0x80 {
		return uint64(buf[pos]), pos + 1, nil
	}
	return varintSlow(buf, pos, wire)
}

func varintSlow(buf []byte, pos, wire int) (uint64, int, error) {
	if wire != wireVarint {
		return 0, 0, errBackOut
	}
	v, n := consumeVarint(buf[pos:])
	if n < 0 {
		return 0, 0, errBackOut
	}
	return v, pos + n, nil
}

// fixed64 reads an I64 field's value.
func fixed64(buf []byte, pos, wire int) (uint64, int, error) {
	if wire != wireI64 || len(buf)-pos < 8 {
		return 0, 0, errBackOut
	}
	return binary.LittleEndian.Uint64(buf[pos:]), pos + 8, nil
}

// message reads a length-delimited field (a message, string or bytes)
// and charges it as scanTraceRequest does.
func (d *spanDecoder) message(buf []byte, pos, wire int) ([]byte, int, error) {
	if wire == wireLen && pos < len(buf) && buf[pos] < 0x80 {
		if end := pos + 1 + int(buf[pos]); end <= len(buf) {
			d.shape.cost += lenFieldBytes
			return buf[pos+1 : end], end, nil
		}
	}
	return d.messageSlow(buf, pos, wire)
}

func (d *spanDecoder) messageSlow(buf []byte, pos, wire int) ([]byte, int, error) {
	if wire != wireLen {
		return nil, 0, errBackOut
	}
	l, n := consumeVarint(buf[pos:])
	if n < 0 || l > uint64(len(buf)-pos-n) {
		return nil, 0, errBackOut
	}
	pos += n
	d.shape.cost += lenFieldBytes
	end := pos + int(l)
	return buf[pos:end], end, nil
}

// skip passes over a field the message does not define.
func (d *spanDecoder) skip(buf []byte, pos, wire int) (int, error) {
	var err error
	switch wire {
	case wireVarint:
		_, pos, err = varint(buf, pos, wire)
	case wireI64:
		_, pos, err = fixed64(buf, pos, wire)
	case wireLen:
		_, pos, err = d.message(buf, pos, wire)
	case wireI32:
		if len(buf)-pos < 4 {
			return 0, errBackOut
		}
		pos += 4
	}
	return pos, err
}

// enter charges a message of kind k at depth and refuses what is nested
// too deep.
func (d *spanDecoder) enter(k msgKind, depth int) error {
	if depth > maxProtoDepth {
		return errBackOut
	}
	d.shape.cost += decodedBytes[k]
	return nil
}

// wireKind is what a field of a message must be on the wire, for the
// messages the decoder only checks and prices (wireSchema).
type wireKind uint8

const (
	wireUnknown wireKind = iota // not a field of the message: skipped
	wireIsVarint
	wireIsI64
	wireIsI32
	wireIsBytes   // string or bytes
	wireIsStrings // a repeated string, priced as scanTraceRequest prices one
	wireIsID16    // a trace id: empty or 16 bytes
	wireIsID8     // a span id: empty or 8 bytes
	wireIsMessage // a nested message of schema msg
)

type wireField struct {
	kind wireKind
	msg  *wireSchema
}

// wireSchema is a message's fields by number, as pdata 1.70 defines them
// (opentelemetry-proto common.proto, resource.proto and trace.proto);
// numbers past the list are unknown.
type wireSchema struct {
	kind   msgKind
	fields []wireField
}

var (
	wireAnyValue, wireKeyValue, wireArrayValue, wireKeyValueList wireSchema
	wireScope, wireEntityRef, wireEvent, wireLink                wireSchema
)

func init() {
	msg := func(s *wireSchema) wireField { return wireField{wireIsMessage, s} }
	is := func(k wireKind) wireField { return wireField{kind: k} }
	none := wireField{}
	wireAnyValue = wireSchema{kindAnyValue, []wireField{none,
		is(wireIsBytes), is(wireIsVarint), is(wireIsVarint), is(wireIsI64), // string, bool, int, double
		msg(&wireArrayValue), msg(&wireKeyValueList), is(wireIsBytes), is(wireIsVarint)}} // array, kvlist, bytes, string_value_strindex
	wireKeyValue = wireSchema{kindKeyValue, []wireField{none, is(wireIsBytes), msg(&wireAnyValue), is(wireIsVarint)}}
	wireArrayValue = wireSchema{kindArrayValue, []wireField{none, msg(&wireAnyValue)}}
	wireKeyValueList = wireSchema{kindKeyValueList, []wireField{none, msg(&wireKeyValue)}}
	wireScope = wireSchema{kindScope, []wireField{none, is(wireIsBytes), is(wireIsBytes), msg(&wireKeyValue), is(wireIsVarint)}}
	wireEntityRef = wireSchema{kindEntityRef, []wireField{none, is(wireIsBytes), is(wireIsBytes), is(wireIsStrings), is(wireIsStrings)}}
	wireEvent = wireSchema{kindEvent, []wireField{none, is(wireIsI64), is(wireIsBytes), msg(&wireKeyValue), is(wireIsVarint)}}
	wireLink = wireSchema{kindLink, []wireField{none, is(wireIsID16), is(wireIsID8), is(wireIsBytes), msg(&wireKeyValue), is(wireIsVarint), is(wireIsI32)}}
}

// check walks buf as a message of schema s at depth: priced, and refused
// where pdata refuses it.
func (d *spanDecoder) check(buf []byte, s *wireSchema, depth int) error {
	if err := d.enter(s.kind, depth); err != nil {
		return err
	}
	for pos := 0; pos < len(buf); {
		field, wire, p, err := d.tag(buf, pos, s.kind)
		if err != nil {
			return err
		}
		if pos, err = d.checkField(buf, p, field, wire, s, depth); err != nil {
			return err
		}
	}
	return nil
}

// checkField checks the value at pos of field of a schema-s message at
// depth and returns the position after it.
func (d *spanDecoder) checkField(buf []byte, pos int, field int32, wire int, s *wireSchema, depth int) (int, error) {
	f := wireField{}
	if int(field) < len(s.fields) {
		f = s.fields[field]
	}
	var err error
	switch f.kind {
	case wireUnknown:
		return d.skip(buf, pos, wire)
	case wireIsVarint:
		_, pos, err = varint(buf, pos, wire)
		return pos, err
	case wireIsI64:
		_, pos, err = fixed64(buf, pos, wire)
		return pos, err
	case wireIsI32:
		if wire != wireI32 {
			return 0, errBackOut
		}
		return d.skip(buf, pos, wire)
	}
	v, pos, err := d.message(buf, pos, wire)
	if err != nil {
		return 0, err
	}
	switch f.kind {
	case wireIsStrings:
		d.shape.cost += decodedBytes[kindStrings]
	case wireIsID16, wireIsID8:
		if n := len(v); n != 0 && n != 16 && f.kind == wireIsID16 || n != 0 && n != 8 && f.kind == wireIsID8 {
			return 0, errBackOut
		}
	case wireIsMessage:
		err = d.check(v, f.msg, depth+1)
	}
	return pos, err
}
