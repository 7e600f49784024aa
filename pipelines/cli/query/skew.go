package query

import (
	"slices"
	"strconv"
	"strings"
)

// ClassSkew is how the hardware classes' spike rates part: the classes on
// the side that differs, and how many times the busier side's rate is the
// calmer side's. The pattern sentence, the patterns table and the demo's
// report all say the skew through it, so that they give one figure.
type ClassSkew struct {
	// Classes are the odd ones out: the smaller side of the split, or the
	// busier side when both are as large. Sorted.
	Classes []string
	// Less is true when Classes spike less often than the rest.
	Less bool
	// Ratio is the busier side's mean rate over the calmer side's.
	Ratio float64
}

// HWSkew splits the classes where their rates part the most (the largest
// ratio between neighbours in rate order) and names the side that differs:
// with two classes at ~10 min and one at ~25 min, the one at ~25 min,
// "2.5× less often", not one of the two that stall as often as each
// other. skew holds each class's rate relative to the fleet, as the
// detector stores it. The zero ClassSkew when there are fewer than two
// classes, every class's rate is the same, or the calmer side never
// spiked.
func HWSkew(skew map[string]float64) ClassSkew {
	if len(skew) < 2 {
		return ClassSkew{}
	}
	classes := sortedClasses(skew)
	slices.SortStableFunc(classes, func(x, y string) int {
		switch {
		case skew[x] < skew[y]:
			return -1
		case skew[x] > skew[y]:
			return 1
		}
		return 0
	})
	split, widest := 0, 1.0
	for i := 1; i < len(classes); i++ {
		lo, hi := skew[classes[i-1]], skew[classes[i]]
		if lo <= 0 {
			if hi > 0 {
				return ClassSkew{}
			}
			continue
		}
		if r := hi / lo; r > widest {
			split, widest = i, r
		}
	}
	if split == 0 {
		return ClassSkew{}
	}
	calm, busy := classes[:split], classes[split:]
	s := ClassSkew{Ratio: meanRate(skew, busy) / meanRate(skew, calm), Classes: busy}
	if len(calm) < len(busy) {
		s.Classes, s.Less = calm, true
	}
	s.Classes = slices.Sorted(slices.Values(s.Classes))
	return s
}

func meanRate(skew map[string]float64, classes []string) float64 {
	var sum float64
	for _, c := range classes {
		sum += skew[c]
	}
	return sum / float64(len(classes))
}

// Clause is the skew as the pattern sentence says it: "2.0× as often on
// hw class gen5", "2.5× less often on hw class hw-b", "3.0× as often on
// hw classes gen5 and gen6". "" for the zero ClassSkew.
func (s ClassSkew) Clause() string {
	if len(s.Classes) == 0 {
		return ""
	}
	how := " as often on hw class"
	if s.Less {
		how = " less often on hw class"
	}
	if len(s.Classes) > 1 {
		how += "es"
	}
	return strconv.FormatFloat(s.Ratio, 'f', 1, 64) + "×" + how + " " + AndList(s.Classes)
}

// Cell is the skew in the patterns table's HW_SKEW column: "gen5 2.0×",
// "hw-b 2.5× less". "-" for the zero ClassSkew.
func (s ClassSkew) Cell() string {
	if len(s.Classes) == 0 {
		return "-"
	}
	cell := strings.Join(s.Classes, ",") + " " + strconv.FormatFloat(s.Ratio, 'f', 1, 64) + "×"
	if s.Less {
		cell += " less"
	}
	return cell
}
