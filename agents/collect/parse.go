package collect

import (
	"bytes"
	"errors"
	"fmt"
)

// The kernel's text files are parsed from bytes without building strings
// or slices per field: a full pass reads a dozen files every second, and a
// host with a thousand IRQs and 128 CPUs has a /proc/interrupts of about a
// megabyte. Parsers never retain the buffer they are given; names they
// return are copies.

// errMalformed is wrapped by every parse error.
var errMalformed = errors.New("malformed kernel file")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, args...))
}

// nextLine splits b at the first newline; the last line may lack one.
func nextLine(b []byte) (line, rest []byte) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// nextField skips leading blanks and returns the next blank-separated
// field; f is empty when the line is exhausted.
func nextField(b []byte) (f, rest []byte) {
	i := 0
	for i < len(b) && isBlank(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isBlank(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }

// trimBlank strips blanks from both ends.
func trimBlank(b []byte) []byte {
	for len(b) > 0 && isBlank(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isBlank(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// parseUint parses a non-empty run of decimal digits.
func parseUint(b []byte) (uint64, error) {
	if len(b) == 0 {
		return 0, malformed("empty number")
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, malformed("not a number: %q", b)
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, malformed("number out of range: %q", b)
		}
		v = v*10 + d
	}
	return v, nil
}

// isDigits reports whether b is a non-empty run of decimal digits.
func isDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseCPUName parses the number of a CPU label such as "cpu12" or "CPU12".
func parseCPUName(b, prefix []byte) (int, error) {
	if !bytes.HasPrefix(b, prefix) {
		return 0, malformed("not a CPU label: %q", b)
	}
	n, err := parseUint(b[len(prefix):])
	if err != nil || n > 1<<20 {
		return 0, malformed("bad CPU number in %q", b)
	}
	return int(n), nil
}
