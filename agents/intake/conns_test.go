package intake

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// frame is an HTTP/2 frame header for typ with flags and a payload of n
// zero bytes.
func frame(typ, flags byte, n int) []byte {
	h := []byte{byte(n >> 16), byte(n >> 8), byte(n), typ, flags, 0, 0, 0, 1}
	return append(h, make([]byte, n)...)
}

// guardWhole is headerGuard's scan over b at once, as a frame-by-frame
// reference: whether every header block stays within
// maxHeaderGuardBytes.
func guardWhole(b []byte) bool {
	if len(b) < len(http2Preface) {
		return true
	}
	b = b[len(http2Preface):]
	var block int64
	for len(b) >= 9 {
		n := int64(binary.BigEndian.Uint32(append([]byte{0}, b[:3]...)))
		typ, flags := b[3], b[4]
		switch typ {
		case 0x1:
			block = n
		case 0x9:
			block += n
		}
		if block > maxHeaderGuardBytes {
			return false
		}
		if (typ == 0x1 || typ == 0x9) && flags&0x4 != 0 {
			block = 0
		}
		b = b[9:]
		if int64(len(b)) < n {
			return true
		}
		b = b[n:]
	}
	return true
}

func TestHeaderGuard(t *testing.T) {
	pre := []byte(http2Preface)
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"a small header block", concat(pre, frame(0x4, 0, 6), frame(0x1, 0x4, 200), frame(0x0, 0x1, 1000)), true},
		{"continuations within the limit", concat(pre, frame(0x1, 0, 4000), frame(0x9, 0, 4000), frame(0x9, 0x4, 4000)), true},
		{"continuations past the limit", concat(pre, frame(0x1, 0, 16000), frame(0x9, 0, 16000)), false},
		{"one block after another, each within", concat(pre, frame(0x1, 0x4, 12000), frame(0x1, 0x4, 12000)), true},
		{"large data frames are not headers", concat(pre, frame(0x1, 0x4, 100), frame(0x0, 0, 1<<16)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, chunk := range []int{1, 7, 9, 4096, len(tc.in)} {
				g := &headerGuard{skip: int64(len(http2Preface))}
				ok := true
				for b := tc.in; len(b) > 0 && ok; {
					k := min(chunk, len(b))
					ok = g.scan(b[:k])
					b = b[k:]
				}
				if ok != tc.ok {
					t.Errorf("in chunks of %d: %v, want %v", chunk, ok, tc.ok)
				}
			}
		})
	}
}

func concat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// FuzzHeaderGuard holds the streaming scan to the whole-input reference,
// however the bytes are split across reads.
func FuzzHeaderGuard(f *testing.F) {
	pre := []byte(http2Preface)
	f.Add(concat(pre, frame(0x1, 0, 16000), frame(0x9, 0, 16000)), uint8(7))
	f.Add(concat(pre, frame(0x1, 0x4, 100), frame(0x0, 0, 300)), uint8(1))
	f.Fuzz(func(t *testing.T, body []byte, chunk uint8) {
		in := concat(pre, body)
		want := guardWhole(in)
		g := &headerGuard{skip: int64(len(http2Preface))}
		got := true
		step := int(chunk) + 1
		for b := in; len(b) > 0 && got; {
			k := min(step, len(b))
			got = g.scan(b[:k])
			b = b[k:]
		}
		if got != want {
			t.Fatalf("scan in chunks of %d: %v, the whole: %v", step, got, want)
		}
	})
}
