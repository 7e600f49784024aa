package eval

import (
	"context"
	"math"
	"sort"
	"testing"

	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkDetectionDelay runs every scenario that has a pattern at the
// eval's size and reports the median detection delay, in recurrence
// periods from the pattern's second occurrence (target ≤ 2). Vendors'
// anomaly monitors evaluate every 60 s over 10–15 min windows and need
// days of baseline; here a pattern should be named within two of its own
// periods.
func BenchmarkDetectionDelay(b *testing.B) {
	var delays []float64
	for _, cfg := range Scenarios(DefaultHosts, DefaultDuration, 1) {
		_, truth := sim.Plan(cfg.Defaults())
		if truth.Class == "" {
			continue
		}
		st := testenv.ClickHouse(b)
		r, err := RunScenario(context.Background(), st, cfg, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: delay %.2f periods", cfg.Scenario, r.Delay)
		if math.IsNaN(r.Delay) {
			r.Delay = math.Inf(1) // never found: counts as the worst
		}
		delays = append(delays, r.Delay)
	}
	sort.Float64s(delays)
	b.ReportMetric(delays[len(delays)/2], "detect.delay_periods:periods")
}
