package query

import (
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/internal/vocab"
)

func TestTheSkewNamesTheClassThatDiffers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		skew  map[string]float64
		want  string
		table string
	}{
		{"two classes: the busier one", map[string]float64{"gen4": 0.67, "gen5": 1.33}, "2.0× as often on hw class gen5", "gen5 2.0×"},
		{"two classes stall as often, the third less: the third, less often",
			map[string]float64{"hw-a": 1.18, "hw-b": 0.48, "hw-c": 1.21}, "2.5× less often on hw class hw-b", "hw-b 2.5× less"},
		{"one class stalls more than the other three: that one",
			map[string]float64{"a": 0.8, "b": 0.82, "c": 0.79, "d": 1.6}, "2.0× as often on hw class d", "d 2.0×"},
		{"two against two: both busier classes",
			map[string]float64{"a": 0.5, "b": 1.5, "c": 1.5, "d": 0.5}, "3.0× as often on hw classes b and c", "b,c 3.0×"},
		{"every class at the same rate: none", map[string]float64{"a": 1, "b": 1}, "", "-"},
		{"the calmer side never spiked: none", map[string]float64{"a": 0, "b": 2}, "", "-"},
		{"one class: none", map[string]float64{"a": 1}, "", "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := HWSkew(tc.skew)
			if got := s.Clause(); got != tc.want {
				t.Errorf("clause %q, want %q", got, tc.want)
			}
			if got := s.Cell(); got != tc.table {
				t.Errorf("cell %q, want %q", got, tc.table)
			}
		})
	}
}

// Two classes stall every ~10 min and one every ~25 min: the sentence
// names the one at ~25 min, not one of the two that stall alike.
func TestThePatternSentenceNamesTheOddClassOut(t *testing.T) {
	got := describePattern(Pattern{Class: vocab.ClassFleetRecurrent, Modifiers: []string{vocab.ModifierHWClassSkewed},
		HostsAffected: 30, HostsTotal: 30, RecurrenceIntervalS: 720,
		ClassIntervalS: map[string]float64{"hw-a": 600, "hw-b": 1500, "hw-c": 600},
		HWClassSkew:    map[string]float64{"hw-a": 1.18, "hw-b": 0.48, "hw-c": 1.21}})
	if want := "hw-a and hw-c hosts every ~10 min, hw-b every ~25 min"; !strings.Contains(got, want) {
		t.Errorf("sentence:\n got %q\nwant it to contain %q", got, want)
	}
	if want := "; 2.5× less often on hw class hw-b;"; !strings.Contains(got, want) {
		t.Errorf("sentence:\n got %q\nwant it to contain %q", got, want)
	}
}
