// Package otlpattr is an OTLP attribute's value as spikehunt's direct
// protobuf span decoders read it (internal/otlpwire/spanwalk, the walk
// that agents/intake's OTLP receivers and pipelines/services/ingest's
// Kafka consumer decode with): a string, an int, or anything else, and an
// attribute looked up as pdata looks it up. Both decoders are held to
// pdata by differential fuzz tests.
package otlpattr

import "math"

// Kind is what an AnyValue resolved to, as far as spikehunt cares.
type Kind uint8

const (
	// Other is any other type, or no value: pcommon reads it as "" and 0
	// alike.
	Other Kind = iota
	Str
	Int
)

// Value is an attribute's value. Str aliases the message it was read from.
type Value struct {
	Kind Kind
	Str  []byte // Kind Str
	Num  int64  // Kind Int
}

// AsInt is the value as an integer: an int, or a decimal string (as the
// agent's line protocol and the OTel semantic conventions' string-typed
// numbers arrive).
func (v Value) AsInt() (int64, bool) {
	switch v.Kind {
	case Int:
		return v.Num, true
	case Str:
		return ParseDecimal(v.Str)
	}
	return 0, false
}

// ParseDecimal is strconv.ParseInt(string(b), 10, 64) without making the
// string: an optional sign, then decimal digits only.
func ParseDecimal(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
		neg, b = b[0] == '-', b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' || n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case !neg && n <= math.MaxInt64:
		return int64(n), true
	case neg && n <= 1<<63:
		return int64(-n), true // -(1<<63) wraps to itself, which is right
	}
	return 0, false
}

// First is an attribute looked up as pcommon.Map.Get does: the first one
// with the key counts.
type First struct {
	Found bool
	V     Value
}

// Offer takes v unless a value was already found.
func (a *First) Offer(v Value) {
	if !a.Found {
		a.Found, a.V = true, v
	}
}

// Str is the value when it is a string, else nil (pcommon's Str()).
func (a *First) Str() []byte {
	if a.Found && a.V.Kind == Str {
		return a.V.Str
	}
	return nil
}
