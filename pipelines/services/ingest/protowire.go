package ingest

import (
	"encoding/binary"
	"errors"
)

// Protobuf wire primitives for the direct span decoder (decode_spans.go).
//
// They accept and refuse exactly what pdata's own unmarshaler does
// (go.opentelemetry.io/collector/pdata/internal/proto), quirks included:
// a field number is the tag shifted right by 3 and cut to int32, and an
// unknown group ends at the first non-group field inside it. The direct
// decoder promises to accept nothing that pdata refuses; the differential
// fuzz test (FuzzSpanDecoderMatchesPdata) holds it to that. An error here
// only says "not for the fast path": the rejection itself, reason and
// detail, is always pdata's.

// Wire types.
const (
	wireVarint     = 0
	wireI64        = 1
	wireLen        = 2
	wireStartGroup = 3
	wireEndGroup   = 4
	wireI32        = 5
)

// errWire is every wire error: callers never show it, they re-decode
// the message with pdata for the rejection's words.
var errWire = errors.New("protobuf: malformed")

// consumeVarint reads a varint at pos: its value and the position after it.
func consumeVarint(buf []byte, pos int) (uint64, int, error) {
	// The common one-byte case first: tags, kinds, small lengths.
	if pos < len(buf) && buf[pos] < 0x80 {
		return uint64(buf[pos]), pos + 1, nil
	}
	var num uint64
	for shift := uint(0); ; shift += 7 {
		if shift >= 64 || pos >= len(buf) {
			return 0, 0, errWire
		}
		b := buf[pos]
		pos++
		num |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return num, pos, nil
		}
	}
}

// consumeTag reads a field's tag: field number (pdata's int32 cut of
// tag>>3, refused when ≤ 0) and wire type.
func consumeTag(buf []byte, pos int) (field int32, wire int, _ int, _ error) {
	tag, pos, err := consumeVarint(buf, pos)
	if err != nil {
		return 0, 0, 0, err
	}
	field = int32(tag >> 3)
	if field <= 0 {
		return 0, 0, 0, errWire
	}
	return field, int(tag & 7), pos, nil
}

// consumeLen reads a length-delimited field at pos and returns its
// content's bounds [start, end); end is the position after it.
func consumeLen(buf []byte, pos int) (start, end int, _ error) {
	n, pos, err := consumeVarint(buf, pos)
	if err != nil {
		return 0, 0, err
	}
	length := int(n)
	if length < 0 {
		return 0, 0, errWire
	}
	end = pos + length
	if end < 0 || end > len(buf) {
		return 0, 0, errWire
	}
	return pos, end, nil
}

// consumeFixed64 reads an I64 field's value.
func consumeFixed64(buf []byte, pos int) (uint64, int, error) {
	if pos+8 < pos || pos+8 > len(buf) {
		return 0, 0, errWire
	}
	return binary.LittleEndian.Uint64(buf[pos:]), pos + 8, nil
}

// consumeFixed32 reads an I32 field's value.
func consumeFixed32(buf []byte, pos int) (uint32, int, error) {
	if pos+4 < pos || pos+4 > len(buf) {
		return 0, 0, errWire
	}
	return binary.LittleEndian.Uint32(buf[pos:]), pos + 4, nil
}

// consumeUnknown skips the value of a field the message does not define,
// as pdata's ConsumeUnknown does, which returns from a group at the first
// field inside it that is not a group itself.
func consumeUnknown(buf []byte, pos, wire int) (int, error) {
	var err error
	depth := 0
	for pos < len(buf) {
		switch wire {
		case wireVarint:
			_, pos, err = consumeVarint(buf, pos)
			return pos, err
		case wireI64:
			_, pos, err = consumeFixed64(buf, pos)
			return pos, err
		case wireLen:
			_, pos, err = consumeLen(buf, pos)
			return pos, err
		case wireStartGroup:
			depth++
		case wireEndGroup:
			if depth == 0 {
				return 0, errWire
			}
			depth--
		case wireI32:
			_, pos, err = consumeFixed32(buf, pos)
			return pos, err
		default:
			return 0, errWire
		}
		if depth == 0 {
			return pos, nil
		}
		_, wire, pos, err = consumeTag(buf, pos)
		if err != nil {
			return 0, err
		}
	}
	return 0, errWire
}

// pbKind is what a field of a message must be on the wire, for the
// messages the decoder only checks (pbSchema).
type pbKind uint8

const (
	pbUnknown pbKind = iota // not a field of the message: skipped as pdata skips it
	pbVarint
	pbI64
	pbI32
	pbBytes   // string or bytes: any content
	pbID16    // a trace id: empty or 16 bytes
	pbID8     // a span id: empty or 8 bytes
	pbMessage // a nested message, checked against pbField.msg
)

type pbField struct {
	kind pbKind
	msg  *pbSchema
}

// pbSchema lists a message's fields by number, as pdata 1.70 defines
// them; field numbers past the list are unknown.
type pbSchema struct {
	fields []pbField
}

// Schemas of the messages whose content the requests table does not use
// but which pdata decodes, and so refuses when malformed.
var (
	pbAnyValue, pbKeyValue, pbArrayValue, pbKeyValueList pbSchema
	pbInstrumentationScope, pbEntityRef, pbSpanEvent     pbSchema
	pbSpanLink                                           pbSchema
)

func init() {
	msg := func(s *pbSchema) pbField { return pbField{pbMessage, s} }
	scalar := func(k pbKind) pbField { return pbField{kind: k} }
	none := pbField{}
	// common/v1/common.proto
	pbAnyValue.fields = []pbField{none,
		scalar(pbBytes), scalar(pbVarint), scalar(pbVarint), scalar(pbI64), // string, bool, int, double
		msg(&pbArrayValue), msg(&pbKeyValueList), scalar(pbBytes), scalar(pbVarint)} // array, kvlist, bytes, string_value_strindex
	pbKeyValue.fields = []pbField{none, scalar(pbBytes), msg(&pbAnyValue), scalar(pbVarint)} // key, value, key_strindex
	pbArrayValue.fields = []pbField{none, msg(&pbAnyValue)}
	pbKeyValueList.fields = []pbField{none, msg(&pbKeyValue)}
	pbInstrumentationScope.fields = []pbField{none, scalar(pbBytes), scalar(pbBytes), msg(&pbKeyValue), scalar(pbVarint)}
	pbEntityRef.fields = []pbField{none, scalar(pbBytes), scalar(pbBytes), scalar(pbBytes), scalar(pbBytes)}
	// trace/v1/trace.proto
	pbSpanEvent.fields = []pbField{none, scalar(pbI64), scalar(pbBytes), msg(&pbKeyValue), scalar(pbVarint)}
	pbSpanLink.fields = []pbField{none, scalar(pbID16), scalar(pbID8), scalar(pbBytes), msg(&pbKeyValue), scalar(pbVarint), scalar(pbI32)}
}

// checkMessage walks buf as a message of schema s, refusing what pdata
// refuses: a malformed field, a known field of the wrong wire type, an id
// of the wrong length. Nested messages recurse, as in pdata.
func checkMessage(buf []byte, s *pbSchema) error {
	for pos := 0; pos < len(buf); {
		var err error
		if pos, err = checkField(buf, pos, s); err != nil {
			return err
		}
	}
	return nil
}

// checkField checks the one field at pos against s and returns the
// position after it.
func checkField(buf []byte, pos int, s *pbSchema) (int, error) {
	field, wire, p, err := consumeTag(buf, pos)
	if err != nil {
		return 0, err
	}
	if err := checkFieldValue(buf, field, wire, &p, s); err != nil {
		return 0, err
	}
	return p, nil
}

// checkFieldValue checks the value of field, at *pos, against s, and moves
// *pos past it.
func checkFieldValue(buf []byte, field int32, wire int, pos *int, s *pbSchema) error {
	f := pbField{}
	if int(field) < len(s.fields) {
		f = s.fields[field]
	}
	var err error
	p := *pos
	switch f.kind {
	case pbUnknown:
		p, err = consumeUnknown(buf, p, wire)
	case pbVarint:
		if wire != wireVarint {
			return errWire
		}
		_, p, err = consumeVarint(buf, p)
	case pbI64:
		if wire != wireI64 {
			return errWire
		}
		_, p, err = consumeFixed64(buf, p)
	case pbI32:
		if wire != wireI32 {
			return errWire
		}
		_, p, err = consumeFixed32(buf, p)
	default: // length-delimited
		if wire != wireLen {
			return errWire
		}
		var start int
		if start, p, err = consumeLen(buf, p); err != nil {
			return err
		}
		switch n := p - start; f.kind {
		case pbID16:
			if n != 0 && n != 16 {
				return errWire
			}
		case pbID8:
			if n != 0 && n != 8 {
				return errWire
			}
		case pbMessage:
			err = checkMessage(buf[start:p], f.msg)
		}
	}
	*pos = p
	return err
}
