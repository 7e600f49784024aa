package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/spikehunt/spikehunt/tests/growth"
)

// stage is one stage of the pipeline bench-scale measures.
type stage struct {
	name     string
	work     string // what one size's run does
	timeWhy  string // what the time budget means
	timeFix  string // what would fix a stage past its time budget
	memFix   string // and past its memory budget
	sizeUnit string
}

var stages = []stage{
	{
		name: "ingest", sizeUnit: "hosts",
		work:    "1,000 spans a host from Kafka into the embedded engine",
		timeWhy: "drain 1,000 spans a host before the fleet sends the next 1,000",
		timeFix: "more ingest replicas in the consumer group (the topic's partitions split between them) writing to a ClickHouse cluster: the engine's inserts and merges are most of the cost",
		memFix:  "smaller batches (--batch.rows, --batch.bytes: a batch per partition is held in memory), or the store on a node of its own",
	},
	{
		name: "detect", sizeUnit: "hosts",
		work:    "one full detector pass over 24 h of 1 s rollups",
		timeWhy: "a pass within the detector's interval (detect.every)",
		timeFix: "the pass is the engine scanning every host-second of the day, linear in hosts: give that scan more cores (a ClickHouse cluster, the scan parallel over its shards), or catch a day up in interval-sized passes so the detector keeps its cadence meanwhile (its steady passes read only the seconds since the last one)",
		memFix:  "bound the engine's per-query memory (max_memory_usage, max_bytes_before_external_group_by: spill to disk) or move the store to a ClickHouse cluster",
	},
	{
		name: "operator", sizeUnit: "nodes",
		work:    "a CapturePolicy sampling 10% of the Nodes on envtest, to its last Capture",
		timeWhy: "a policy's Captures all exist within a minute of its rotation",
		timeFix: "a higher client rate (--kube-api-qps, --kube-api-burst: the Captures are created at 500 a second by default) and the API server's capacity for writes",
		memFix:  "the peak is mostly garbage, not the cache (a live heap of 21 MB at 20,000 Nodes under a peak 75 MiB above the start): set GOMEMLIMIT a little under the pod's limit so the collector runs before the kernel kills it, and list the Nodes from the cache without a deep copy in each decision; then cache only the Nodes the policies select, or raise operator.resources.limits.memory",
	},
}

func stageOf(name string) *stage {
	for i := range stages {
		if stages[i].name == name {
			return &stages[i]
		}
	}
	return nil
}

func stageNames() []string {
	out := make([]string, len(stages))
	for i, s := range stages {
		out[i] = s.name
	}
	return out
}

// figures are the BENCH figures, by stage, metric (s, peak_mib, cpu_s,
// load_s, disk_gib, …) and size.
type figures map[string]map[string]map[float64]float64

// readBench keeps the lines "BENCH scale.<stage>_<metric>_<size> <value>
// <unit>" of r and ignores every other line.
func readBench(r io.Reader) (figures, error) {
	figs := figures{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "BENCH" || !strings.HasPrefix(f[1], "scale.") {
			continue
		}
		name := strings.TrimPrefix(f[1], "scale.")
		i := strings.LastIndexByte(name, '_')
		j := strings.IndexByte(name, '_')
		if i <= 0 || j == i {
			continue // scale.<stage>_exponent and the like: the report's own
		}
		size, err := strconv.ParseFloat(name[i+1:], 64)
		if err != nil {
			continue
		}
		v, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: value %q: %w", line, f[1], f[2], err)
		}
		st, metric := name[:j], name[j+1:i]
		if figs[st] == nil {
			figs[st] = map[string]map[float64]float64{}
		}
		if figs[st][metric] == nil {
			figs[st][metric] = map[float64]float64{}
		}
		figs[st][metric][size] = v
	}
	return figs, sc.Err()
}

// series is a metric's sizes in order and their values.
func (f figures) series(st, metric string) (sizes, values []float64) {
	m := f[st][metric]
	for s := range m {
		sizes = append(sizes, s)
	}
	slices.Sort(sizes)
	for _, s := range sizes {
		values = append(values, m[s])
	}
	return sizes, values
}

// breakPoint is where a stage meets one of its budgets.
type breakPoint struct {
	stage, resource string
	size            float64 // +Inf: never, on this fit
	budget          string
	fix             string
}

// report prints the table, the BENCH exponents, the extrapolations and the
// stage that breaks first.
func report(w io.Writer, cfg Config, figs figures) error {
	var breaks []breakPoint
	var table []string
	fmt.Fprintln(w, "Cost as the fleet grows (time: wall seconds; peak: the working process's peak RSS, MiB)")
	for _, st := range stages {
		sizes, times := figs.series(st.name, "s")
		_, peaks := figs.series(st.name, "peak_mib")
		if len(sizes) == 0 {
			fmt.Fprintf(w, "%s: no figures (was it run?)\n", st.name)
			continue
		}
		if len(peaks) != len(times) {
			return fmt.Errorf("%s: %d sizes with a time, %d with a peak", st.name, len(times), len(peaks))
		}
		tfit, terr := growth.FitPowerLaw(sizes, times)
		mfit, merr := growth.FitPowerLaw(sizes, peaks)
		// The rise is the peak over what the process held when the work
		// began (the loaded engine's caches, the test's own objects): the
		// growth of the work itself, which the absolute peak understates.
		rises, rerr := []float64(nil), error(nil)
		if bs, before := figs.series(st.name, "rss_before_mib"); len(before) == len(peaks) && slices.Equal(bs, sizes) {
			for i := range peaks {
				rises = append(rises, max(peaks[i]-before[i], 1))
			}
		}
		for i, s := range sizes {
			rise := ""
			if rises != nil {
				rise = fmt.Sprintf(" (+%.0f over the %.0f MiB held before)", rises[i], peaks[i]-rises[i])
			}
			fmt.Fprintf(w, "%-8s %7.0f %s  %9.2f s  %8.0f MiB%s\n", st.name, s, st.sizeUnit, times[i], peaks[i], rise)
			table = append(table, fmt.Sprintf("| %s | %s %s | %s s | %s MiB%s | |", st.name, thousands(s), st.sizeUnit, round(times[i]), thousands(peaks[i]), rise))
		}
		for _, s := range cfg.Want[st.name] {
			if slices.Contains(sizes, s) {
				continue
			}
			why := cfg.Skipped[st.name][s]
			if why == "" {
				why = "not run"
			}
			if setup := setupAt(figs, st.name, s); setup != "" {
				why += "; " + setup
			}
			if terr != nil || merr != nil {
				fmt.Fprintf(w, "%-8s %7.0f %s  not run and not extrapolated (fewer than two sizes): %s\n", st.name, s, st.sizeUnit, why)
				continue
			}
			fmt.Fprintf(w, "%-8s %7.0f %s  ~%8.2f s  ~%7.0f MiB  extrapolated: %s\n", st.name, s, st.sizeUnit, tfit.At(s), mfit.At(s), why)
			fmt.Fprintf(w, "BENCH scale.%s_s_%.0f_extrapolated %.4g s\n", st.name, s, tfit.At(s))
			fmt.Fprintf(w, "BENCH scale.%s_peak_mib_%.0f_extrapolated %.4g MiB\n", st.name, s, mfit.At(s))
			table = append(table, fmt.Sprintf("| %s | %s %s | ~%s s (extrapolated) | ~%s MiB (extrapolated) | |", st.name, thousands(s), st.sizeUnit, round(tfit.At(s)), thousands(mfit.At(s))))
		}
		if terr != nil || merr != nil {
			fmt.Fprintf(w, "%s: no exponent: %v\n", st.name, cmp.Or(terr, merr))
			continue
		}
		fmt.Fprintf(w, "BENCH scale.%s_exponent %.3f slope\n", st.name, tfit.Exponent)
		fmt.Fprintf(w, "BENCH scale.%s_peak_mib_exponent %.3f slope\n", st.name, mfit.Exponent)
		// CPU time, where reported, does not count waiting (a batch's
		// delay, the machine's other work): a second view of the growth.
		if cs, cpu := figs.series(st.name, "cpu_s"); len(cs) >= 2 {
			if cfit, err := growth.FitPowerLaw(cs, cpu); err == nil {
				fmt.Fprintf(w, "BENCH scale.%s_cpu_exponent %.3f slope\n", st.name, cfit.Exponent)
			}
		}
		exps := fmt.Sprintf(" time %.2f, peak memory %.2f", tfit.Exponent, mfit.Exponent)
		if rises != nil {
			var rfit growth.Fit
			if rfit, rerr = growth.FitPowerLaw(sizes, rises); rerr == nil {
				fmt.Fprintf(w, "BENCH scale.%s_rise_mib_exponent %.3f slope\n", st.name, rfit.Exponent)
				exps += fmt.Sprintf(", memory rise %.2f", rfit.Exponent)
			}
		}
		table[len(table)-1] = strings.TrimSuffix(table[len(table)-1], " |") + exps + " |"

		tb, mb := cfg.timeBudgetS(st.name), cfg.MemoryBudgetMiB[st.name]
		breaks = append(breaks,
			breakPoint{st.name, "time", tfit.SizeAt(tb), fmt.Sprintf("%s: %s s", st.timeWhy, round(tb)), st.timeFix},
			breakPoint{st.name, "memory", mfit.SizeAt(mb), fmt.Sprintf("the chart's memory limits for this work, %s MiB", thousands(mb)), st.memFix})
	}

	if len(breaks) == 0 {
		return fmt.Errorf("no stage has two sizes: nothing to fit")
	}
	slices.SortStableFunc(breaks, func(a, b breakPoint) int { return cmp.Compare(a.size, b.size) })
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Where each stage meets its budget, on its fitted power law (hosts; a node is a host):")
	for _, b := range breaks {
		fmt.Fprintf(w, "  %-8s %-6s at %s: %s\n", b.stage, b.resource, hostsText(b.size), b.budget)
	}
	first := breaks[0]
	fmt.Fprintf(w, "\nFirst to break as the fleet grows: %s %s, at %s (%s).\nWhat would fix it: %s.\n",
		first.stage, first.resource, hostsText(first.size), first.budget, first.fix)
	fmt.Fprintf(w, "BENCH scale.first_break_hosts %.4g hosts\n", first.size)

	fmt.Fprintln(w, "\n| stage | size | time | peak memory | exponent (log-log slope) |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, l := range table {
		fmt.Fprintln(w, l)
	}
	return nil
}

// setupAt is what a size would need before it is measured, from the
// largest size run: the load's time and disk, both in proportion to the
// size (the benchmark generates the fleet's rows, so their number is
// hosts × seconds). The load's time on a shared machine varies with the
// other work far more than with the size, so a fit across runs would not
// mean much. "" when not reported.
func setupAt(figs figures, st string, size float64) string {
	var parts []string
	if sizes, v := figs.series(st, "load_s"); len(sizes) > 0 {
		s0, v0 := sizes[len(sizes)-1], v[len(v)-1]
		parts = append(parts, fmt.Sprintf("loading it would take ~%.0f min (%s hosts took %.0f min here)", v0*size/s0/60, thousands(s0), v0/60))
	}
	if sizes, v := figs.series(st, "disk_gib"); len(sizes) > 0 {
		s0, v0 := sizes[len(sizes)-1], v[len(v)-1]
		parts = append(parts, fmt.Sprintf("~%.0f GiB of disk", v0*size/s0))
	}
	return strings.Join(parts, " and ")
}

func hostsText(n float64) string {
	switch {
	case math.IsInf(n, 1):
		return "no size (the cost does not grow)"
	case n >= 1e9:
		return "over a billion"
	}
	return "~" + thousands(n)
}

// thousands is n rounded to an integer with thousands separators.
func thousands(n float64) string {
	s := strconv.FormatFloat(math.Round(n), 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// round is a time with three significant digits, or with thousands
// separators from 1,000.
func round(s float64) string {
	if math.Abs(s) >= 1000 {
		return thousands(s)
	}
	return strconv.FormatFloat(s, 'g', 3, 64)
}
