package capturestrategy

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkCaptureStrategy is make bench-capture-strategy: every pattern
// × bait (1%, 5%, 10%) × fleet (SPIKEHUNT_BENCH_HOSTS, default
// 1000,10000), SPIKEHUNT_BENCH_TRIALS fleets each (default 20), at the
// sample CapturePolicy's rotation, widening and budgets. It logs the table
// and reports, per bait over every pattern and fleet, the slowest class's
// periods from detection to its first indexed cover (p50 and p95), the
// share of patterns covered on every class within two periods, and the
// share of captures that covered nothing.
func BenchmarkCaptureStrategy(b *testing.B) {
	fleets := envInts(b, "SPIKEHUNT_BENCH_HOSTS", []int{1000, 10000})
	trials := envInts(b, "SPIKEHUNT_BENCH_TRIALS", []int{20})[0]
	baits := []int{1, 5, 10}
	for b.Loop() {
		var rows []Row
		perBait := map[int][]Trial{}
		for _, hosts := range fleets {
			for _, p := range Patterns() {
				for _, bait := range baits {
					var ts []Trial
					for i := range trials {
						cfg := DefaultConfig()
						cfg.Hosts, cfg.Pattern, cfg.BaitPercent, cfg.Seed = hosts, p, bait, uint64(1000*hosts+i+1)
						t, err := Run(cfg)
						if err != nil {
							b.Fatal(err)
						}
						ts = append(ts, t)
					}
					perBait[bait] = append(perBait[bait], ts...)
					rows = append(rows, Row{Hosts: hosts, Pattern: p.Name, Bait: bait, Summary: Summarize(ts)})
				}
			}
		}
		// To stdout: the testing package cuts a benchmark's log to ten lines.
		if err := WriteTable(os.Stdout, rows); err != nil {
			b.Fatal(err)
		}
		for _, bait := range baits {
			s := Summarize(perBait[bait])
			name := fmt.Sprintf("%dpct", bait)
			b.ReportMetric(finite(s.WorstP50), "capture.first_cover_periods_"+name+"_p50:periods")
			b.ReportMetric(finite(s.WorstP95), "capture.first_cover_periods_"+name+":periods")
			b.ReportMetric(s.CoveredShare, "capture.covered_share_"+name+":share")
			b.ReportMetric(s.WastedShare, "capture.wasted_share_"+name+":share")
		}
	}
}

// finite reports a class never covered within the horizon as the horizon
// plus one, so that the figure stays a number benchstat can compare.
func finite(v float64) float64 {
	if math.IsInf(v, 1) {
		return float64(DefaultConfig().Horizon + 1)
	}
	return v
}

func envInts(b *testing.B, name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want positive integers separated by commas", name, v)
		}
		out = append(out, n)
	}
	return out
}
