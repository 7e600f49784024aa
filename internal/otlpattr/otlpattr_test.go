package otlpattr

import (
	"strconv"
	"testing"
)

func TestParseDecimalIsParseInt(t *testing.T) {
	for _, s := range []string{"0", "7", "-0", "+0", "418", "+418", "-1", "0042", "9223372036854775807", "9223372036854775808",
		"-9223372036854775808", "-9223372036854775809", "18446744073709551615", "18446744073709551616", "99999999999999999999",
		"000000000000000000000000001", "", "+", "-", "1_000", " 1", "1 ", "0x10", "1e3", "--1", "+-1", "١"} {
		want, werr := strconv.ParseInt(s, 10, 64)
		got, ok := ParseDecimal([]byte(s))
		if ok != (werr == nil) || (ok && got != want) {
			t.Errorf("ParseDecimal(%q) = %d, %v; strconv.ParseInt: %d, %v", s, got, ok, want, werr)
		}
	}
}

func FuzzParseDecimalIsParseInt(f *testing.F) {
	for _, s := range []string{"0", "-9223372036854775808", "9223372036854775808", "+07", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, werr := strconv.ParseInt(s, 10, 64)
		got, ok := ParseDecimal([]byte(s))
		if ok != (werr == nil) || (ok && got != want) {
			t.Errorf("ParseDecimal(%q) = %d, %v; strconv.ParseInt: %d, %v", s, got, ok, want, werr)
		}
	})
}

func TestFirstKeepsTheFirstValueAsPcommonMapGetDoes(t *testing.T) {
	var a First
	if a.Str() != nil {
		t.Errorf("an absent attribute's Str() = %q, want nil", a.Str())
	}
	a.Offer(Value{Kind: Int, Num: 7})
	a.Offer(Value{Kind: Str, Str: []byte("later")})
	if !a.Found || a.V.Kind != Int || a.Str() != nil {
		t.Errorf("after an int then a string: %+v, Str() %q; want the int kept and no string", a, a.Str())
	}
	if n, ok := a.V.AsInt(); !ok || n != 7 {
		t.Errorf("AsInt() = %d, %v; want 7", n, ok)
	}
	if n, ok := (Value{Kind: Str, Str: []byte("-12")}).AsInt(); !ok || n != -12 {
		t.Errorf("a decimal string's AsInt() = %d, %v; want -12", n, ok)
	}
	if _, ok := (Value{Kind: Other}).AsInt(); ok {
		t.Error("another type's AsInt() is ok, want not")
	}
}
