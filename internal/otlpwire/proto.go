package otlpwire

import (
	"encoding/binary"
	"math/bits"
)

// Protocol buffers wire format, just what the span encoder needs: every
// field is appended in field-number order with its tag, and a nested
// message is written after its size, which the encoder computes first.

const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
)

func tag(field, wire int) uint64 { return uint64(field)<<3 | uint64(wire) }

// varintLen is the encoded size of v.
func varintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// bytesLen is the size of a length-delimited field holding n bytes.
func bytesLen(field, n int) int { return varintLen(tag(field, wireBytes)) + varintLen(uint64(n)) + n }

// appendLen appends the tag and length of a length-delimited field; the n
// bytes of its body follow.
func appendLen(b []byte, field, n int) []byte {
	return appendVarint(appendVarint(b, tag(field, wireBytes)), uint64(n))
}

func appendString(b []byte, field int, s string) []byte {
	return append(appendLen(b, field, len(s)), s...)
}

func appendFixed64(b []byte, field int, v uint64) []byte {
	return binary.LittleEndian.AppendUint64(appendVarint(b, tag(field, wireFixed64)), v)
}

func appendVarintField(b []byte, field int, v uint64) []byte {
	return appendVarint(appendVarint(b, tag(field, wireVarint)), v)
}
