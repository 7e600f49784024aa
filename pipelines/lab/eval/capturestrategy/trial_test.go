package capturestrategy

import (
	"math"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
)

// A pattern on every host is caught by the bait on every class: each
// armed host stalls within a period, so every class is covered by the
// time the detector has seen two stalls per host.
func TestEveryHostPatternIsCoveredOnEveryClassByBait(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Hosts = 200
	tr, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Detected {
		t.Fatal("the detector never alerted the pattern")
	}
	if len(tr.Classes) != 4 {
		t.Fatalf("covered classes %+v, want the fleet's four", tr.Classes)
	}
	if w := tr.Worst(); w > 1 {
		t.Errorf("slowest class covered after %.2f periods, want within 1: %+v", w, tr.Classes)
	}
	if tr.Armings == 0 || tr.Wasted > tr.Armings {
		t.Errorf("armings %d, wasted %d", tr.Armings, tr.Wasted)
	}
}

// A pattern of one class counts only that class, and bait on the other
// classes, which never stall, ends without covering anything: wasted.
func TestOneClassPatternCountsItsClassAndWastesBaitElsewhere(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Hosts, cfg.Pattern = 200, Patterns()[2]
	tr, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Classes) != 1 || tr.Classes[0].Class != "gen6" {
		t.Fatalf("classes %+v, want gen6 alone", tr.Classes)
	}
	if tr.ByReason[policy.ReasonBait][1] == 0 {
		t.Errorf("no bait wasted: %+v", tr.ByReason)
	}
}

func TestFireTimeIsTheFirstStallNotOverOnceArmed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := stallsAt(t0, 0, 60, 120)
	for _, c := range []struct {
		armed time.Duration
		want  time.Duration
		ok    bool
	}{
		{-time.Second, 0, true},
		{500 * time.Millisecond, 500 * time.Millisecond, true}, // armed during the first stall
		{2 * time.Second, 60 * time.Second, true},
		{121 * time.Second, 0, false},
	} {
		got, ok := fireTime(st, t0.Add(c.armed), 0)
		if ok != c.ok || (ok && !got.Equal(t0.Add(c.want))) {
			t.Errorf("armed at %v: got %v %v, want %v %v", c.armed, got.Sub(t0), ok, c.want, c.ok)
		}
	}
}

func TestQuantileKeepsNeverAsNever(t *testing.T) {
	v := []float64{0, 1, math.Inf(1), 0.5}
	if q := Quantile(v, 0.5); q != 0.5 {
		t.Errorf("p50 %v, want 0.5", q)
	}
	if q := Quantile(v, 0.95); !math.IsInf(q, 1) {
		t.Errorf("p95 %v, want +Inf", q)
	}
}

func stallsAt(t0 time.Time, secs ...int) []sim.Stall {
	var out []sim.Stall
	for _, s := range secs {
		out = append(out, sim.Stall{Start: t0.Add(time.Duration(s) * time.Second), Length: time.Second})
	}
	return out
}
