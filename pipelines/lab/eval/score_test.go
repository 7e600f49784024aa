package eval

import (
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/vocab"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

var t0 = time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC) // fixed date: scored in memory, never stored

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func TestScoreWindows(t *testing.T) {
	truth := []sim.Window{
		{Host: "a", Start: at(100), End: at(101)},
		{Host: "a", Start: at(1000), End: at(1001)},
		{Host: "b", Start: at(100), End: at(130)},
	}
	for _, tc := range []struct {
		name                string
		got                 []detect.SpikeWindow
		recall, precision   float64
		wantFound, wantRght int
	}{
		{"nothing detected finds nothing and is never wrong", nil, 0, 1, 0, 0},
		{"exact windows on the right hosts", []detect.SpikeWindow{
			{Host: "a", Start: at(100), End: at(102)}, {Host: "a", Start: at(1000), End: at(1002)}, {Host: "b", Start: at(100), End: at(131)},
		}, 1, 1, 3, 3},
		{"a window one second after the stall still overlaps, with slack", []detect.SpikeWindow{{Host: "a", Start: at(102), End: at(103)}}, 1.0 / 3, 1, 1, 1},
		{"the right time on the wrong host is wrong", []detect.SpikeWindow{{Host: "b", Start: at(1000), End: at(1001)}}, 0, 0, 0, 0},
		{"a long stall split in two counts once for recall, both right", []detect.SpikeWindow{
			{Host: "b", Start: at(100), End: at(110)}, {Host: "b", Start: at(118), End: at(130)},
		}, 1.0 / 3, 1, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ScoreWindows(truth, tc.got)
			if s.Found != tc.wantFound || s.Right != tc.wantRght || s.Recall() != tc.recall || s.Precision() != tc.precision {
				t.Errorf("got %+v recall %.3f precision %.3f; want found %d right %d, %.3f %.3f", s, s.Recall(), s.Precision(), tc.wantFound, tc.wantRght, tc.recall, tc.precision)
			}
		})
	}
}

func TestScoreTop1(t *testing.T) {
	tr := sim.Truth{
		TopSuspects: []sim.SuspectKey{{Metric: "system.cpu.time", Mode: "softirq", CPUs: []int{0, 2, 4, 6}}},
		Windows:     []sim.Window{{Host: "a", Start: at(100), End: at(103), Cause: sim.CauseNICSoftirq}, {Host: "a", Start: at(500), End: at(501), Cause: sim.CauseNone}},
	}
	softirq := func(cpu int) []detect.Suspect {
		return []detect.Suspect{{Rank: 1, Metric: "system.cpu.time", Mode: "softirq", CPU: cpu}}
	}
	got := []detect.SpikeWindow{
		{Host: "a", Start: at(100), End: at(104), Suspects: softirq(4)},                  // right
		{Host: "a", Start: at(101), End: at(102), Suspects: softirq(3)},                  // wrong CPU
		{Host: "a", Start: at(102), End: at(103)},                                        // no suspects: wrong
		{Host: "a", Start: at(500), End: at(501), Suspects: softirq(0)},                  // a noise stall: not judged
		{Host: "b", Start: at(100), End: at(101), Suspects: []detect.Suspect{{Rank: 1}}}, // another host: not judged
	}
	if s := ScoreTop1(tr, got); s.Spikes != 3 || s.Right != 1 {
		t.Errorf("got %+v, want 3 judged, 1 right", s)
	}
}

func TestClassRight(t *testing.T) {
	rec := detect.Pattern{Class: vocab.ClassFleetRecurrent, Modifiers: []string{vocab.ModifierHWClassSkewed}}
	for _, tc := range []struct {
		name  string
		truth sim.Truth
		got   []detect.Pattern
		want  bool
	}{
		{"no truth, no pattern", sim.Truth{}, nil, true},
		{"no truth, a pattern is wrong", sim.Truth{}, []detect.Pattern{rec}, false},
		{"class and modifier", sim.Truth{Class: vocab.ClassFleetRecurrent, Modifiers: []string{vocab.ModifierHWClassSkewed}}, []detect.Pattern{rec}, true},
		{"a missing modifier is wrong", sim.Truth{Class: vocab.ClassFleetRecurrent, Modifiers: []string{vocab.ModifierHWClassSkewed}}, []detect.Pattern{{Class: vocab.ClassFleetRecurrent}}, false},
		{"an extra modifier is wrong", sim.Truth{Class: vocab.ClassFleetRecurrent}, []detect.Pattern{rec}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClassRight(tc.truth, tc.got); got != tc.want {
				t.Errorf("ClassRight = %v, want %v", got, tc.want)
			}
		})
	}
}
