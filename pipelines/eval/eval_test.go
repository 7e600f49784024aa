package eval

import (
	"context"
	"math"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/pipelines/sim"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// TestEvalEveryScenario is make eval's assertions: every scenario at 300
// hosts through sim → ingest → detect on the real engine.
//   - recall and precision ≥ 0.95 where the truth has spike windows;
//   - the right pattern class at the end, and for healthy, slow-creep
//     and noisy no pattern in any pass;
//   - the right top suspect for nic-softirq-storm, down-interface and
//     io-stall (≥ 0.9 of their spikes);
//   - a median detection delay ≤ 2 periods.
//
// SPIKEHUNT_EVAL_SCENARIOS=a,b runs only those (for tuning).
func TestEvalEveryScenario(t *testing.T) {
	only := map[string]bool{}
	if v := os.Getenv("SPIKEHUNT_EVAL_SCENARIOS"); v != "" {
		for _, s := range strings.Split(v, ",") {
			only[s] = true
		}
	}
	var delays []float64
	for _, cfg := range Scenarios(DefaultHosts, DefaultDuration, 1) {
		if len(only) > 0 && !only[cfg.Scenario] {
			continue
		}
		t.Run(cfg.Scenario, func(t *testing.T) {
			st := testenv.ClickHouse(t)
			r, err := RunScenario(context.Background(), st, cfg, Options{Progress: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d rows loaded in %v; %d passes in %v", cfg.Scenario, r.Rows, r.Load.Round(1e6), r.Passes, r.Detect.Round(1e6))
			if r.Truth.Windows != nil || r.Windows.Detected > 0 {
				if r.Windows.Recall() < 0.95 || r.Windows.Precision() < 0.95 {
					t.Errorf("recall %.3f, precision %.3f (%+v); want both ≥ 0.95", r.Windows.Recall(), r.Windows.Precision(), r.Windows)
				}
			}
			if !r.ClassRight {
				t.Errorf("patterns %v, want class %q %v", r.Classes, r.Truth.Class, r.Truth.Modifiers)
			}
			if r.Truth.Class == "" && r.WrongPasses > 0 {
				t.Errorf("%d of %d passes reported a pattern", r.WrongPasses, r.Passes)
			}
			switch cfg.Scenario {
			case sim.NICSoftirqStorm, sim.DownInterface, sim.IOStall:
				if r.Top1.Spikes == 0 || r.Top1.Accuracy() < 0.9 {
					t.Errorf("top-1 suspect right for %d of %d spikes; want ≥ 90%%", r.Top1.Right, r.Top1.Spikes)
				}
			}
			if r.Truth.Class != "" {
				if math.IsNaN(r.Delay) {
					t.Errorf("the pattern was never found")
				}
				delays = append(delays, r.Delay)
			}
		})
	}
	if len(delays) > 0 {
		sort.Float64s(delays)
		if m := delays[len(delays)/2]; m > 2 || math.IsNaN(m) {
			t.Errorf("median detection delay %.2f periods (%v), want ≤ 2", m, delays)
		}
	}
}
