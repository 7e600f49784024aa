// Command scalereport reads the BENCH lines of `make bench-scale`'s
// benchmarks (one fleet size per run) and prints, per stage, the growth
// exponents of time and peak memory (tests/growth's least-squares fit in
// log-log), the figures at the sizes that were not run, extrapolated with
// a reason, and which stage breaks first as the fleet grows, against the
// budgets below, and what would fix it.
//
//	scalereport [flags] < BENCH lines
//
// A stage's figures are named scale.<stage>_s_<size> (seconds) and
// scale.<stage>_peak_mib_<size> (MiB); sizes are hosts (a Kubernetes Node
// is a host). Optional scale.<stage>_load_s_<size> and
// scale.<stage>_disk_gib_<size> are the set-up a size needs, used to say
// why a size was not run.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	cfg := defaultConfig()
	flag.Var(sizesFlag(cfg.Want), "want", "`stage=size,size,…`: the sizes the run was meant to cover; one not in the input is extrapolated (repeatable)")
	flag.Var(reasonsFlag(cfg.Skipped), "skipped", "`stage=size:reason`: why a wanted size was not run, printed beside its extrapolation (repeatable)")
	flag.Float64Var(&cfg.SpansPerHostS, "spans-per-host-s", cfg.SpansPerHostS, "spans a second one host sends, kept by its agent: the ingest's budget is to drain 1,000 spans a host (the benchmark's load) within the time the fleet takes to send them")
	flag.Float64Var(&cfg.DetectBudgetS, "detect-budget-s", cfg.DetectBudgetS, "seconds a full 24 h pass may take: the chart's detect.every")
	flag.Float64Var(&cfg.OperatorBudgetS, "operator-budget-s", cfg.OperatorBudgetS, "seconds from a policy (or a rotation) to its last Capture existing")
	flag.Parse()
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "scalereport:", err)
		os.Exit(2)
	}
	figs, err := readBench(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scalereport:", err)
		os.Exit(1)
	}
	if err := report(os.Stdout, cfg, figs); err != nil {
		fmt.Fprintln(os.Stderr, "scalereport:", err)
		os.Exit(1)
	}
}
