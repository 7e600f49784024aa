package growth

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"slices"
	"testing"
)

func TestFitPowerLawFindsTheSlopeOfExactAndNoisyLaws(t *testing.T) {
	for _, tc := range []struct {
		name          string
		sizes, costs  []float64
		exponent, coe float64
	}{
		// cost = 2·size: a line through three decades.
		{"linear", []float64{1, 10, 100}, []float64{2, 20, 200}, 1, 2},
		// The sizes, cost = size²/10⁶: 1, 9, 100.
		{"quadratic at the fleet sizes", []float64{1000, 3000, 10000}, []float64{1, 9, 100}, 2, 1e-6},
		// Not on one line. In log₂: x = 0, 1, 2 and y = 0, 2, 3, so the
		// means are 1 and 5/3, Σdx·dy = (−1)(−5/3) + (1)(4/3) = 3 and
		// Σdx² = 2: slope 3/2; intercept 5/3 − 3/2 = 1/6, coef 2^(1/6).
		{"least squares through three points off a line", []float64{1, 2, 4}, []float64{1, 4, 8}, 1.5, math.Pow(2, 1.0/6)},
		// A flat cost.
		{"constant", []float64{5000, 15000, 50000}, []float64{3, 3, 3}, 0, 3},
		// Two points: the slope between them.
		{"two points", []float64{1000, 10000}, []float64{4, 40 * math.Sqrt(10)}, 1.5, 4 / math.Pow(1000, 1.5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := FitPowerLaw(tc.sizes, tc.costs)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(f.Exponent-tc.exponent) > 1e-9 || math.Abs(f.Coef-tc.coe)/tc.coe > 1e-9 {
				t.Errorf("fit = %.12g·size^%.12g, want %.12g·size^%.12g", f.Coef, f.Exponent, tc.coe, tc.exponent)
			}
		})
	}
}

func TestFitPowerLawRefusesWhatHasNoSlope(t *testing.T) {
	for _, tc := range []struct {
		name         string
		sizes, costs []float64
		tooFew       bool
	}{
		{"one size", []float64{1000}, []float64{2}, true},
		{"one size twice", []float64{1000, 1000}, []float64{2, 3}, true},
		{"lengths differ", []float64{1000, 3000}, []float64{2}, false},
		{"a zero cost (log of 0)", []float64{1000, 3000}, []float64{0, 2}, false},
		{"a negative size", []float64{-1, 3000}, []float64{1, 2}, false},
		{"a NaN cost", []float64{1000, 3000}, []float64{math.NaN(), 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FitPowerLaw(tc.sizes, tc.costs)
			if err == nil {
				t.Fatal("no error")
			}
			if got := errors.Is(err, ErrTooFewSizes); got != tc.tooFew {
				t.Errorf("errors.Is(%v, ErrTooFewSizes) = %v, want %v", err, got, tc.tooFew)
			}
		})
	}
}

func TestSizeAtIsWhereTheFittedCostMeetsTheBudget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fit    Fit
		budget float64
		want   float64
	}{
		{"linear", Fit{Exponent: 1, Coef: 2}, 100, 50},
		{"quadratic", Fit{Exponent: 2, Coef: 1e-6}, 100, 10000},
		{"flat below the budget never meets it", Fit{Exponent: 0, Coef: 3}, 30, math.Inf(1)},
		{"flat above the budget is over it at once", Fit{Exponent: 0, Coef: 300}, 30, 0},
		{"falling with size never meets it", Fit{Exponent: -0.5, Coef: 300}, 30, math.Inf(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.fit.SizeAt(tc.budget)
			if got != tc.want && math.Abs(got-tc.want)/tc.want > 1e-9 {
				t.Errorf("SizeAt(%g) = %g, want %g", tc.budget, got, tc.want)
			}
			if !math.IsInf(got, 0) && got > 0 {
				if at := tc.fit.At(got); math.Abs(at-tc.budget)/tc.budget > 1e-9 {
					t.Errorf("At(SizeAt(%g)) = %g", tc.budget, at)
				}
			}
		})
	}
}

func TestParseStatusKiBReadsTheNamedFieldInMiB(t *testing.T) {
	status := []byte("Name:\tspikehunt\nVmPeak:\t 2097152 kB\nVmHWM:\t  524288 kB\nVmRSS:\t  262144 kB\nThreads:\t12\n")
	for _, tc := range []struct {
		field string
		want  float64
		bad   bool
	}{
		{"VmHWM", 512, false},
		{"VmRSS", 256, false},
		{"VmSwap", 0, true},  // absent
		{"Threads", 0, true}, // not in kB
		{"VmHW", 0, true},    // a prefix is not the field
	} {
		got, err := parseStatusKiB(status, tc.field)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseStatusKiB(%s) = %v, %v; want %v (error: %v)", tc.field, got, err, tc.want, tc.bad)
		}
	}
}

func TestResetPeakLowersThePeakToTheResidentSetAfterAFreedAllocation(t *testing.T) {
	if _, err := os.Stat("/proc/self/clear_refs"); err != nil {
		t.Fatalf("no /proc/self/clear_refs: %v (Linux only)", err)
	}
	before, err := RSSMiB(0)
	if err != nil {
		t.Fatal(err)
	}
	// 256 MiB touched, then unmapped: the peak stays up until reset.
	big, err := mmapTouched(256 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if err := big(); err != nil {
		t.Fatal(err)
	}
	peak, err := PeakMiB(0)
	if err != nil {
		t.Fatal(err)
	}
	if peak < before+200 {
		t.Fatalf("peak %.0f MiB after touching 256 MiB from %.0f MiB: the allocation was not resident", peak, before)
	}
	if err := ResetPeak(0); err != nil {
		t.Fatal(err)
	}
	after, err := PeakMiB(0)
	if err != nil {
		t.Fatal(err)
	}
	if after > peak-200 {
		t.Errorf("peak %.0f MiB after ResetPeak, %.0f before: not reset", after, peak)
	}
}

func TestParseStatPPIDSkipsACommandNameWithSpacesAndParentheses(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want int
		ok   bool
	}{
		{"4242 (kube-apiserver) S 4100 4242 4100 0 -1", 4100, true},
		{"77 (a (weird) name) R 1 77 77 0 -1", 1, true},
		{"77 (truncated", 0, false},
		{"77 (x) S", 0, false},
	} {
		got, ok := parseStatPPID([]byte(tc.stat))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseStatPPID(%q) = %d, %v; want %d, %v", tc.stat, got, ok, tc.want, tc.ok)
		}
	}
}

func TestChildrenFindsAProcessThisOneStarted(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	kids, err := Children(0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(kids, cmd.Process.Pid) {
		t.Errorf("Children(0) = %v, without the sleep %d just started", kids, cmd.Process.Pid)
	}
}
