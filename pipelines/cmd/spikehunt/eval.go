package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/pipelines/lab/eval"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
)

func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("eval", `Scores the detectors against the fleet simulator's ground truth: each scenario is
simulated into its own database of an embedded store, ingested, and detected pass
after pass as a live detector would; then it prints, per scenario, spike-window
recall and precision (by overlap), the pattern class found, the detection delay in
recurrence periods from the pattern's second occurrence, and top-1 suspect accuracy.
With --variants it runs the scenarios away from their defaults instead (other
periods, fractions, fleet sizes, spike lengths and noise levels), each at its own
size.`, stderr)
	dsn := fs.String("dsn", "chdb://"+filepath.Join(os.TempDir(), "spikehunt-eval"), "embedded store, chdb:///dir: one database per scenario; the directory is emptied first")
	cli.Deprecate(fs, "dir", "dsn") // --dir took the bare directory, which --dsn still accepts
	hosts := fs.Int("hosts", eval.DefaultHosts, "hosts per scenario")
	duration := fs.Duration("duration", eval.DefaultDuration, "simulated time per scenario")
	seed := fs.Uint64("seed", 1, "random seed")
	only := fs.String("scenarios", "", "comma-separated scenarios to run (default all: "+strings.Join(sim.Scenarios(), ", ")+")")
	start := fs.String("from", "", "first simulated second of every scenario: RFC 3339, a date (midnight UTC) or a duration ago (36h) (default: the duration before the last midnight UTC, the same fleet on any day)")
	cli.Deprecate(fs, "start", "from")
	timesOfDay := fs.String("time-of-day", "", "comma-separated times of day to start every scenario at, each a run of its own: night (02:00 UTC, the simulated load's low) and day (12:00 UTC); default one run ending at the last midnight UTC")
	variants := fs.Bool("variants", false, "run the off-default variants (their own sizes; --hosts and --duration do not apply); --scenarios filters them by scenario")
	sweep := fs.Bool("sweep", false, "run the spike rule's sweep instead: every latency body (--sigmas) at every rate (--rates), each a healthy and a stalling fleet of --hosts × --duration, and a body with two modes; prints false windows per host-hour, precision and recall of what could be seen")
	sigmas := fs.String("sigmas", floatList(eval.SweepSigmas), "with --sweep: the lognormal bodies' σ, comma-separated")
	rates := fs.String("rates", floatList(eval.SweepRates), "with --sweep: requests per second per host, comma-separated")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	for s := range want {
		if !slices.Contains(sim.Scenarios(), s) {
			fmt.Fprintf(stderr, "unknown scenario %q (one of %s)\n", s, strings.Join(sim.Scenarios(), ", "))
			return cli.ErrUsage
		}
	}
	var from time.Time
	if *start != "" {
		t, err := cli.ParseTime(*start, time.Now())
		if err != nil {
			fmt.Fprintf(stderr, "--from %q: %v\n", *start, err)
			return cli.ErrUsage
		}
		from = t
	}
	dir, ok := evalDir(*dsn)
	if !ok {
		fmt.Fprintf(stderr, "--dsn %q: eval runs on an embedded store, chdb:///dir\n", *dsn)
		return cli.ErrUsage
	}
	var at []string
	for _, s := range strings.Split(*timesOfDay, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if _, ok := eval.TimesOfDay[s]; !ok {
			fmt.Fprintf(stderr, "--time-of-day %q: want night or day\n", s)
			return cli.ErrUsage
		}
		at = append(at, s)
	}
	if len(at) > 0 && !from.IsZero() {
		fmt.Fprintln(stderr, "--time-of-day and --from both set the start: give one")
		return cli.ErrUsage
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if *sweep {
		ss, err := parseFloats(*sigmas)
		if err != nil {
			fmt.Fprintf(stderr, "--sigmas %q: %v\n", *sigmas, err)
			return cli.ErrUsage
		}
		rs, err := parseFloats(*rates)
		if err != nil {
			fmt.Fprintf(stderr, "--rates %q: %v\n", *rates, err)
			return cli.ErrUsage
		}
		if from.IsZero() {
			from = eval.Start(*duration)
		}
		return runSweep(ctx, dir, eval.SweepCells(ss, rs), *hosts, *duration, from, *seed, stdout, stderr)
	}
	var runs []eval.Variant
	if *variants {
		runs = eval.Variants(*seed)
	} else {
		for _, cfg := range eval.Scenarios(*hosts, *duration, *seed) {
			runs = append(runs, eval.Variant{Name: cfg.Scenario, Config: cfg})
		}
	}
	if len(at) > 0 {
		var timed []eval.Variant
		for _, v := range runs {
			for _, name := range at {
				w := v
				w.Name += "@" + name
				w.Config.Start = eval.StartAt(w.Config.Duration, eval.TimesOfDay[name])
				timed = append(timed, w)
			}
		}
		runs = timed
	}
	var results []eval.Result
	for _, v := range runs {
		cfg := v.Config
		if !from.IsZero() {
			cfg.Start = from
		}
		if len(want) > 0 && !want[cfg.Scenario] {
			continue
		}
		db := "eval_" + strings.NewReplacer("-", "_", "/", "__", "@", "_at_").Replace(v.Name)
		st, err := store.Open(ctx, "chdb://"+dir+"?database="+db)
		if err != nil {
			return err
		}
		d := cfg.Defaults()
		fmt.Fprintf(stderr, "eval: %s: %d hosts × %s\n", v.Name, d.Hosts, d.Duration)
		r, err := eval.RunScenario(ctx, st, cfg, eval.Options{Progress: func(f string, a ...any) {
			fmt.Fprintf(stderr, "eval: "+f+"\n", a...)
		}})
		st.Close()
		if err != nil {
			return err
		}
		r.Scenario = v.Name
		results = append(results, r)
	}
	printEval(stdout, results)
	return nil
}

// printEval is the table make eval prints, and the median delay.
func printEval(w io.Writer, rs []eval.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\ttruth\tdetected\trecall\tprecision\tclass wanted\tclass found\tdelay (periods)\ttop-1 suspect\tload\tdetect")
	var delays []float64
	for _, r := range rs {
		wantClass := orNone(r.Truth.Class)
		if len(r.Truth.Modifiers) > 0 {
			wantClass += "+" + strings.Join(r.Truth.Modifiers, "+")
		}
		found := orNone(strings.Join(r.Classes, ","))
		if r.Truth.Class == "" && r.WrongPasses > 0 {
			found += fmt.Sprintf(" (%d/%d passes wrong)", r.WrongPasses, r.Passes)
		}
		delay := "-"
		if r.Truth.Class != "" {
			delay = "never"
			if !math.IsNaN(r.Delay) {
				delay = fmt.Sprintf("%.2f", r.Delay)
				delays = append(delays, r.Delay)
			}
		}
		top1 := "-"
		if r.Top1.Spikes > 0 {
			top1 = fmt.Sprintf("%.2f (%d/%d)", r.Top1.Accuracy(), r.Top1.Right, r.Top1.Spikes)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.3f\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Windows.Truth, r.Windows.Detected,
			r.Windows.Recall(), r.Windows.Precision(), wantClass, found, delay, top1, r.Load.Round(time.Second), r.Detect.Round(time.Second))
	}
	tw.Flush()
	if len(delays) > 0 {
		sort.Float64s(delays)
		fmt.Fprintf(w, "\nmedian detection delay: %.2f periods over %d scenarios with a pattern\n", delays[len(delays)/2], len(delays))
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// evalDir is the data directory of eval's --dsn: chdb:///dir, or the bare
// directory the deprecated --dir took. Its database parameter does not
// apply: each scenario gets a database of its own.
func evalDir(dsn string) (string, bool) {
	dir, isChdb := strings.CutPrefix(dsn, "chdb://")
	dir, _, _ = strings.Cut(dir, "?")
	if dir == "" || !isChdb && strings.Contains(dsn, "://") {
		return "", false
	}
	return dir, true
}
