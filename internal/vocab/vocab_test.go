package vocab

import "testing"

func TestKnownClass(t *testing.T) {
	for _, c := range Classes {
		if !KnownClass(c) {
			t.Errorf("KnownClass(%q) = false", c)
		}
	}
	for _, c := range []string{"", "Fleet-Recurrent", ModifierHWClassSkewed, "fleet-recurrent "} {
		if KnownClass(c) {
			t.Errorf("KnownClass(%q) = true", c)
		}
	}
}
