package spanwalk

import "encoding/binary"

// The protobuf wire level of the walk: tags, varints and length-delimited
// fields, each counted in the Tally, and the schema check of the messages
// the walk only validates, refusing what pdata 1.70 refuses. They accept
// and refuse what pdata's own unmarshaler
// (go.opentelemetry.io/collector/pdata/internal/proto) does, quirks
// included: a field number is the tag shifted right by 3 and cut to
// int32, and an unknown group ends at the first non-group field inside
// it.

// Protobuf wire types.
const (
	wireVarint     = 0
	wireI64        = 1
	wireLen        = 2
	wireStartGroup = 3
	wireEndGroup   = 4
	wireI32        = 5
)

// ConsumeVarint reads a varint as pdata does: up to ten bytes, the bits
// past 64 dropped. n < 0: truncated or longer. The agent's request
// pricing (agents/intake's scanTraceRequest) reads with it too.
func ConsumeVarint(b []byte) (v uint64, n int) {
	for shift := uint(0); shift < 64; shift += 7 {
		if n >= len(b) {
			return 0, -1
		}
		c := b[n]
		n++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, n
		}
	}
	return 0, -1
}

// tag reads a field's tag in a message of kind k: pdata cuts the field
// number to int32 and refuses it ≤ 0. Every field of an AnyValue is
// counted. The one-byte tags of every field OTLP defines but a span's
// flags take the inlined path.
func (w *Walker) tag(buf []byte, pos int, k Kind) (field int32, wire int, _ int, _ error) {
	if pos < len(buf) && k != KindAnyValue {
		if t := buf[pos]; t < 0x80 && t >= 8 && plainWire[t&7] {
			return int32(t >> 3), int(t & 7), pos + 1, nil
		}
	}
	return w.tagSlow(buf, pos, k)
}

// plainWire holds the wire types OTLP uses: no groups, no 6 or 7.
var plainWire = [8]bool{wireVarint: true, wireI64: true, wireLen: true, wireI32: true}

func (w *Walker) tagSlow(buf []byte, pos int, k Kind) (field int32, wire int, _ int, _ error) {
	if len(buf)-pos >= 2 && buf[pos] >= 0x80 && buf[pos+1] < 0x80 { // fields 16–2047: a span's flags
		v := uint64(buf[pos]&0x7f) | uint64(buf[pos+1])<<7
		field, wire, pos = int32(v>>3), int(v&7), pos+2
	} else {
		v, n := ConsumeVarint(buf[pos:])
		if n < 0 {
			return 0, 0, 0, ErrRefused
		}
		field, wire, pos = int32(v>>3), int(v&7), pos+n
	}
	if field <= 0 {
		return 0, 0, 0, ErrRefused
	}
	// Wire types 6 and 7 fail every field in pdata, known or not; a group
	// fails every known field, and an unknown one's is skipped.
	if !plainWire[wire] && (w.RefuseGroups || wire != wireStartGroup && wire != wireEndGroup) {
		return 0, 0, 0, ErrRefused
	}
	if k == KindAnyValue {
		w.Tally.AnyValueFields++
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
		return 0, 0, ErrRefused
	}
	v, n := ConsumeVarint(buf[pos:])
	if n < 0 {
		return 0, 0, ErrRefused
	}
	return v, pos + n, nil
}

// fixed64 reads an I64 field's value.
func fixed64(buf []byte, pos, wire int) (uint64, int, error) {
	if wire != wireI64 || len(buf)-pos < 8 {
		return 0, 0, ErrRefused
	}
	return binary.LittleEndian.Uint64(buf[pos:]), pos + 8, nil
}

// message reads a length-delimited field (a message, string or bytes)
// and counts it.
func (w *Walker) message(buf []byte, pos, wire int) ([]byte, int, error) {
	if wire == wireLen && pos < len(buf) && buf[pos] < 0x80 {
		if end := pos + 1 + int(buf[pos]); end <= len(buf) {
			w.Tally.LenFields++
			return buf[pos+1 : end], end, nil
		}
	}
	return w.messageSlow(buf, pos, wire)
}

func (w *Walker) messageSlow(buf []byte, pos, wire int) ([]byte, int, error) {
	if wire != wireLen {
		return nil, 0, ErrRefused
	}
	l, n := ConsumeVarint(buf[pos:])
	if n < 0 || l > uint64(len(buf)-pos-n) {
		return nil, 0, ErrRefused
	}
	pos += n
	w.Tally.LenFields++
	end := pos + int(l)
	return buf[pos:end], end, nil
}

// skip passes over a field the message does not define.
func (w *Walker) skip(buf []byte, pos, wire int) (int, error) {
	var err error
	switch wire {
	case wireVarint:
		_, pos, err = varint(buf, pos, wire)
	case wireI64:
		_, pos, err = fixed64(buf, pos, wire)
	case wireLen:
		_, pos, err = w.message(buf, pos, wire)
	case wireI32:
		if len(buf)-pos < 4 {
			return 0, ErrRefused
		}
		pos += 4
	default:
		return skipGroup(buf, pos, wire)
	}
	return pos, err
}

// skipGroup skips an unknown field's group as pdata's ConsumeUnknown
// does, which returns from a group at the first field inside it that is
// not a group itself; tag lets a group through only without
// RefuseGroups.
func skipGroup(buf []byte, pos, wire int) (int, error) {
	depth := 0
	for pos < len(buf) {
		switch wire {
		case wireVarint:
			_, pos, err := varint(buf, pos, wire)
			return pos, err
		case wireI64:
			_, pos, err := fixed64(buf, pos, wire)
			return pos, err
		case wireLen:
			l, n := ConsumeVarint(buf[pos:])
			if n < 0 || l > uint64(len(buf)-pos-n) {
				return 0, ErrRefused
			}
			return pos + n + int(l), nil
		case wireStartGroup:
			depth++
		case wireEndGroup:
			if depth == 0 {
				return 0, ErrRefused
			}
			depth--
		case wireI32:
			if len(buf)-pos < 4 {
				return 0, ErrRefused
			}
			return pos + 4, nil
		default:
			return 0, ErrRefused
		}
		if depth == 0 {
			return pos, nil
		}
		t, n := ConsumeVarint(buf[pos:])
		if n < 0 || int32(t>>3) <= 0 {
			return 0, ErrRefused
		}
		wire, pos = int(t&7), pos+n
	}
	return 0, ErrRefused
}

// enter counts a message of kind k at depth and refuses what is nested
// too deep.
func (w *Walker) enter(k Kind, depth int) error {
	if depth > w.maxDepth {
		return ErrRefused
	}
	w.Tally.Messages[k]++
	return nil
}

// wireKind is what a field of a message must be on the wire, for the
// messages the walk only checks (wireSchema).
type wireKind uint8

const (
	wireUnknown wireKind = iota // not a field of the message: skipped
	wireIsVarint
	wireIsI64
	wireIsI32
	wireIsBytes   // string or bytes
	wireIsStrings // a repeated string, counted as KindStrings
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
	kind   Kind
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
	wireAnyValue = wireSchema{KindAnyValue, []wireField{none,
		is(wireIsBytes), is(wireIsVarint), is(wireIsVarint), is(wireIsI64), // string, bool, int, double
		msg(&wireArrayValue), msg(&wireKeyValueList), is(wireIsBytes), is(wireIsVarint)}} // array, kvlist, bytes, string_value_strindex
	wireKeyValue = wireSchema{KindKeyValue, []wireField{none, is(wireIsBytes), msg(&wireAnyValue), is(wireIsVarint)}}
	wireArrayValue = wireSchema{KindArrayValue, []wireField{none, msg(&wireAnyValue)}}
	wireKeyValueList = wireSchema{KindKeyValueList, []wireField{none, msg(&wireKeyValue)}}
	wireScope = wireSchema{KindScope, []wireField{none, is(wireIsBytes), is(wireIsBytes), msg(&wireKeyValue), is(wireIsVarint)}}
	wireEntityRef = wireSchema{KindEntityRef, []wireField{none, is(wireIsBytes), is(wireIsBytes), is(wireIsStrings), is(wireIsStrings)}}
	wireEvent = wireSchema{KindEvent, []wireField{none, is(wireIsI64), is(wireIsBytes), msg(&wireKeyValue), is(wireIsVarint)}}
	wireLink = wireSchema{KindLink, []wireField{none, is(wireIsID16), is(wireIsID8), is(wireIsBytes), msg(&wireKeyValue), is(wireIsVarint), is(wireIsI32)}}
}

// check walks buf as a message of schema s at depth: counted, and
// refused where pdata refuses it.
func (w *Walker) check(buf []byte, s *wireSchema, depth int) error {
	if err := w.enter(s.kind, depth); err != nil {
		return err
	}
	for pos := 0; pos < len(buf); {
		field, wire, p, err := w.tag(buf, pos, s.kind)
		if err != nil {
			return err
		}
		if pos, err = w.checkField(buf, p, field, wire, s, depth); err != nil {
			return err
		}
	}
	return nil
}

// checkField checks the value at pos of field of a schema-s message at
// depth and returns the position after it.
func (w *Walker) checkField(buf []byte, pos int, field int32, wire int, s *wireSchema, depth int) (int, error) {
	f := wireField{}
	if int(field) < len(s.fields) {
		f = s.fields[field]
	}
	var err error
	switch f.kind {
	case wireUnknown:
		return w.skip(buf, pos, wire)
	case wireIsVarint:
		_, pos, err = varint(buf, pos, wire)
		return pos, err
	case wireIsI64:
		_, pos, err = fixed64(buf, pos, wire)
		return pos, err
	case wireIsI32:
		if wire != wireI32 {
			return 0, ErrRefused
		}
		return w.skip(buf, pos, wire)
	}
	v, pos, err := w.message(buf, pos, wire)
	if err != nil {
		return 0, err
	}
	switch f.kind {
	case wireIsStrings:
		w.Tally.Messages[KindStrings]++
	case wireIsID16, wireIsID8:
		if n := len(v); n != 0 && n != 16 && f.kind == wireIsID16 || n != 0 && n != 8 && f.kind == wireIsID8 {
			return 0, ErrRefused
		}
	case wireIsMessage:
		err = w.check(v, f.msg, depth+1)
	}
	return pos, err
}
