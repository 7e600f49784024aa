package ingest

import "unicode/utf8"

// What one row may take from the attributes of a message. Without these a
// single data point's attributes all went into one attrs map, and a
// route or service name into a dictionary column, bounded only by the
// message size (megabytes). The row itself is never refused for them: the
// measurement is good, only its labels are too many or too long, and
// dead-lettering it would lose the data for a label bug in one app. What
// is cut is counted in spikehunt_ingest_attributes_capped_total{table,
// reason}.
const (
	// MaxPointAttrs is how many attributes a counters row keeps in its
	// attrs map, besides those with a column of their own (cpu, device,
	// mode). The agent's points carry a handful; further ones are
	// dropped, the first ones kept in wire order.
	MaxPointAttrs = 128
	// MaxAttrKeyBytes is the longest attribute key a row keeps; an
	// attribute with a longer key is dropped.
	MaxAttrKeyBytes = 256
	// MaxValueBytes is the longest string a row keeps in an attrs value
	// or a column taken from one (service, host, hw_class, endpoint,
	// device, mode). A longer one is cut there, at a UTF-8 character
	// boundary when the value is UTF-8.
	MaxValueBytes = 1024
)

// Reasons of spikehunt_ingest_attributes_capped_total.
const (
	capTooMany      = "too_many"       // a point's attribute beyond MaxPointAttrs, dropped
	capKeyTooLong   = "key_too_long"   // an attribute whose key is over MaxAttrKeyBytes, dropped
	capValueTooLong = "value_too_long" // a value over MaxValueBytes, cut
)

// Capped counts what the limits cut from the rows of one message.
type Capped struct {
	TooMany, KeyTooLong, ValueTooLong int
}

func (c *Capped) add(o Capped) {
	c.TooMany += o.TooMany
	c.KeyTooLong += o.KeyTooLong
	c.ValueTooLong += o.ValueTooLong
}

// each calls f with every non-zero count and its reason.
func (c Capped) each(f func(reason string, n int)) {
	for _, x := range [...]struct {
		reason string
		n      int
	}{{capTooMany, c.TooMany}, {capKeyTooLong, c.KeyTooLong}, {capValueTooLong, c.ValueTooLong}} {
		if x.n > 0 {
			f(x.reason, x.n)
		}
	}
}

// cappedLen is how much of v a row keeps: all of it up to MaxValueBytes,
// else MaxValueBytes less the bytes of a UTF-8 character the cut would
// split (at most three, so that bytes that are not UTF-8 still keep
// nearly all of the limit).
func cappedLen[T string | []byte](v T) int {
	if len(v) <= MaxValueBytes {
		return len(v)
	}
	n := MaxValueBytes
	for i := 0; i < utf8.UTFMax-1 && !utf8.RuneStart(v[n]); i++ {
		n--
	}
	return n
}

// capString is s cut to cappedLen, and whether it was cut; *cut counts it.
func capString(s string, cut *int) string {
	if n := cappedLen(s); n < len(s) {
		*cut++
		return s[:n]
	}
	return s
}

// capBytes is capString for bytes.
func capBytes(b []byte, cut *int) []byte {
	if n := cappedLen(b); n < len(b) {
		*cut++
		return b[:n]
	}
	return b
}
