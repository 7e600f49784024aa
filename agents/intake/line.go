package intake

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"time"
	"unicode/utf8"
)

// The line protocol, for apps that do not speak OTLP. One request per
// line; a datagram may hold several lines separated by '\n' ("\r\n" is
// accepted). Fields are separated by spaces or tabs:
//
//	<service> <endpoint> <latency_us> <status> [trace_id] [thread_id]
//
// latency_us is a decimal integer of microseconds (0 is a sub-µs request;
// at most 24 h; numbers have at most 20 digits); status is a token of at most 32 bytes ("200", "OK");
// trace_id is 32 hex digits or "-" for none (so that a thread id can
// follow without one); thread_id is a decimal uint32. The receive time is
// the request's end. Names longer than 256 bytes are cut at a rune.
//
//	billy /search 5210 200 4bf92f3577b34da6a3ce929d0e0e4736 21560
//
// Blank lines are skipped; a malformed line is dropped and counted by the
// reason of its lineError, logged with a sample at most once a minute per
// reason (line_log.go), and never affects the other lines of its
// datagram.

const (
	// MaxDatagram is the largest datagram the line receivers read; larger
	// ones are dropped whole (reason datagram_too_large).
	MaxDatagram      = 64 << 10
	maxLatencyMicros = 24 * 3600 * 1_000_000
	maxStatusBytes   = 32
	maxLineFields    = 6
)

// lineRecord is one parsed line. Its byte slices alias the datagram: they
// are valid until the receiver reads the next one.
type lineRecord struct {
	service, endpoint, status []byte
	latency                   time.Duration
	traceID                   [16]byte
	threadID                  uint32
}

// lineError is why a line was dropped; reason is the metric label.
type lineError struct{ reason, msg string }

func (e *lineError) Error() string { return "line protocol: " + e.msg }

var (
	errBlank    = &lineError{"", "blank line"}
	errFields   = &lineError{"fields", "want 4 to 6 fields: <service> <endpoint> <latency_us> <status> [trace_id|-] [thread_id]"}
	errUTF8     = &lineError{"utf8", "service, endpoint and status must be UTF-8"}
	errLatency  = &lineError{"latency", "latency_us must be a decimal integer of microseconds, at most 24h"}
	errStatus   = &lineError{"status", "status must be at most 32 bytes"}
	errTraceID  = &lineError{"trace_id", "trace_id must be 32 hex digits or -"}
	errThreadID = &lineError{"thread_id", "thread_id must be a decimal uint32"}
	// errDatagramTooLarge is counted once per datagram, not per line.
	errDatagramTooLarge = &lineError{"datagram_too_large", "datagram larger than 64 KiB"}
)

// nextLine splits the first line off buf.
func nextLine(buf []byte) (line, rest []byte) {
	if i := bytes.IndexByte(buf, '\n'); i >= 0 {
		return buf[:i], buf[i+1:]
	}
	return buf, nil
}

// parseLine parses one line (without its '\n') into r, whose byte slices
// then alias line; after an error r holds nothing of use. It does not
// allocate. It is the agent's hottest loop, one call per request: r is
// the caller's, so that no record is zeroed and copied per line.
func parseLine(line []byte, r *lineRecord) *lineError {
	var f [maxLineFields + 1][]byte
	n, ok := splitFields(line, &f)
	switch {
	case !ok:
		return errFields
	case n == 0:
		return errBlank
	case n < 4 || n > maxLineFields:
		return errFields
	}
	// Validate before cutting: a valid name cut at a rune start is never
	// empty.
	if !isASCII(f[0]) || !isASCII(f[1]) || !isASCII(f[3]) {
		if !utf8.Valid(f[0]) || !utf8.Valid(f[1]) || !utf8.Valid(f[3]) {
			return errUTF8
		}
	}
	r.service, r.endpoint, r.status = cutName(f[0]), cutName(f[1]), f[3]
	us, ok := parseDecimal(f[2], maxLatencyMicros)
	if !ok {
		return errLatency
	}
	r.latency = time.Duration(us) * time.Microsecond
	if len(r.status) > maxStatusBytes {
		return errStatus
	}
	r.traceID = [16]byte{}
	if n > 4 && !(len(f[4]) == 1 && f[4][0] == '-') {
		if !decodeTraceID(&r.traceID, f[4]) {
			return errTraceID
		}
	}
	r.threadID = 0
	if n > 5 {
		id, ok := parseDecimal(f[5], 1<<32-1)
		if !ok {
			return errThreadID
		}
		r.threadID = uint32(id)
	}
	return nil
}

// splitFields splits line at runs of spaces, tabs and '\r' into f. ok is
// false when there are more fields than f holds. It looks at eight bytes
// at a time (nextSep), which makes it several times faster than a test of
// every byte.
func splitFields(line []byte, f *[maxLineFields + 1][]byte) (n int, ok bool) {
	for i := 0; ; {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i == len(line) {
			return n, true
		}
		if n == len(f) {
			return n, false
		}
		j := nextSep(line, i+1)
		f[n] = line[i:j]
		n++
		i = j
	}
}

// Byte-parallel ("SWAR") code works on the eight bytes of a word at once:
// c*swarOnes has c in every byte, and a byte's top bit (swarHigh) is the
// per-byte answer. Adding c*swarOnes to a word whose bytes all have a
// clear top bit cannot carry from one byte into the next, so the top bit
// of x+(0x80-lo)*swarOnes says, per byte, x ≥ lo.
const (
	swarOnes = 0x0101010101010101
	swarHigh = 0x8080808080808080
)

// nextSep returns the index of the first space, tab or '\r' in b at or
// after i, or len(b). A word at a time it looks for any byte ≤ 0x20 (the
// three separators are the only such bytes in a line but for stray
// control bytes), which takes five operations where testing for each
// separator would take twelve; a control byte that is not a separator
// sends it to the byte-wise loop.
func nextSep(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		if m := atMost20(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			i += bits.TrailingZeros64(m) / 8
			if isSpace(b[i]) {
				return i
			}
			break
		}
	}
	for ; i < len(b); i++ {
		if isSpace(b[i]) {
			return i
		}
	}
	return len(b)
}

// atMost20 sets the top bit of exactly the bytes of x that are ≤ 0x20:
// those whose low seven bits plus 0x5f stay below 0x80 and whose own top
// bit is clear.
func atMost20(x uint64) uint64 {
	return ^((x &^ swarHigh) + 0x5f*swarOnes) &^ x & swarHigh
}

// isASCII reports whether b has no byte ≥ 0x80, eight bytes at a time.
func isASCII(b []byte) bool {
	var or uint64
	for len(b) >= 8 {
		or |= binary.LittleEndian.Uint64(b)
		b = b[8:]
	}
	for _, c := range b {
		or |= uint64(c)
	}
	return or&swarHigh == 0
}

// decodeTraceID decodes 32 hex digits (either case) into id, eight digits
// per word (SWAR), which is several times faster than a table per byte.
func decodeTraceID(id *[16]byte, s []byte) bool {
	if len(s) != 32 {
		return false
	}
	valid, high := uint64(swarHigh), uint64(0)
	for k := range 4 {
		w := binary.LittleEndian.Uint64(s[8*k:]) // first digit lowest
		high |= w                                // any top bit set: not hex, and the sums below may carry
		digit := (w + (0x80-'0')*swarOnes) &^ (w + (0x80-'9'-1)*swarOnes)
		lower := w | 0x20*swarOnes // 'A'–'F' → 'a'–'f'; nothing else lands there
		letter := (lower + (0x80-'a')*swarOnes) &^ (lower + (0x80-'f'-1)*swarOnes)
		valid &= digit | letter
		// A digit's value is its low nibble; a letter's is its low nibble
		// plus 9, and only letters have bit 6 set.
		n := w&(0x0f*swarOnes) + ((w>>6)&swarOnes)*9
		// Byte 2j of t is nibble 2j << 4 | nibble 2j+1: the j-th output
		// byte. Then the even bytes are gathered into the low four.
		t := (n<<4 | n>>8) & 0x00ff00ff00ff00ff
		t = (t | t>>8) & 0x0000ffff0000ffff
		t |= t >> 16
		binary.LittleEndian.PutUint32(id[4*k:], uint32(t))
	}
	return valid == swarHigh && high&swarHigh == 0
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }

// parseDecimal parses 1–20 ASCII digits into a value ≤ limit.
func parseDecimal(b []byte, limit uint64) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	if len(b) <= 19 { // below 10^19: cannot overflow a uint64
		for _, c := range b {
			d := c - '0'
			if d > 9 {
				return 0, false
			}
			v = v*10 + uint64(d)
		}
		return v, v <= limit
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (limit-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// cutName cuts a name to maxNameBytes at a rune start.
func cutName(b []byte) []byte {
	if len(b) <= maxNameBytes {
		return b
	}
	cut := maxNameBytes
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return b[:cut]
}
