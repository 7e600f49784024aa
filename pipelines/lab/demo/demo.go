// Package demo is `spikehunt demo`, the main job on one machine: simulate a
// fleet with the thousand-spikes problem (docs/field-stories.md) into the
// embedded engine through the real ingest, run the detectors, and say what
// an SRE needs to hear, in the order they ask: does the average look bad,
// is it one machine or all of them, what moves in the kernel, what to
// capture next (policy.go: the operator's capture policy). Where the
// machine allows it, it then captures on this host for real (local.go). It
// also writes an HTML report with the plots.
//
// Its finding is worded with the query commands' own loaders and sentences
// (pipelines/cli/query), so that it says what `spikehunt patterns` and
// `spikehunt hosts` say of the same store.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/pipelines/cli/query"
	"github.com/spikehunt/spikehunt/pipelines/lab/htmlreport"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

// Command is `spikehunt demo`.
type Command struct {
	// RecordPass, when set, writes the detector pass's own figures as
	// `spikehunt detect` does (its spikehunt.detect.* rows in counters),
	// so that the pipeline-health dashboard shows the demo's pass too.
	// A failure is a warning in the progress lines, not the demo's.
	RecordPass func(ctx context.Context, st store.Store, res detect.Result) error
	// Now is the clock whose hour the simulated hours end at; nil is
	// time.Now. A re-run within the same hour loads nothing again.
	Now func() time.Time
}

// Run runs the demo with args, the flags after `spikehunt demo`.
func (c Command) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cache, _ := os.UserCacheDir()
	fs := cli.NewFlags("demo", `Simulates a fleet where every host stalls for about a second every 15–20 minutes,
each at its own moment (the "thousand spikes"), ingests it into the embedded ClickHouse
engine, runs the detectors, and prints the finding: the averaged view, the per-host
pattern, the hardware-class skew, the suspects, and what to capture next: the
operator's capture policy (internal/policy) over the simulated hosts. As root with
perf and spikehunt-agent beside this binary, this host then joins the fleet as one
more node, catches a real stall of a local workload with perf, and indexes the
capture against its spike. Writes a self-contained HTML report: the same steps as
headings, with plots (UTC time axis, hosts by hardware class, colour scale in ms).
Re-running within the same hour loads nothing twice (every batch carries a
deduplication token) and rewrites the same detections.`, stderr)
	dsn := fs.String("dsn", "chdb://"+filepath.Join(cache, "spikehunt", "demo")+"?database=demo", "store to use")
	hosts := fs.Int("hosts", 300, "hosts in the fleet (2–5000)")
	var hours time.Duration
	cli.DurationUnitVar(fs, &hours, "hours", 6*time.Hour, time.Hour, "simulated time, 30m–48h: a duration (6h, 90m, 1d) or a number of hours (6)")
	seed := fs.Uint64("seed", 1, "random seed; the same seed gives the same fleet")
	scenario := fs.String("scenario", sim.ThousandSpikes, "fleet scenario: "+strings.Join(sim.Scenarios(), ", "))
	cause := fs.String("cause", sim.CauseNICSoftirq, "what moves in the kernel during a stall: "+strings.Join(sim.Causes(), ", "))
	counterStep := fs.Duration("counter-step", 30*time.Second, "kernel counter interval of the simulated agents (the real agent: 1 s)")
	reportPath := fs.String("report", "", "HTML report file (default: spikehunt-demo.html next to the store, or in the current directory)")
	localCapture := fs.Bool("local-capture", true, "where the machine allows it (root, perf on PATH, spikehunt-agent beside this binary or --agent),\nalso run a real perf capture on this host as one more node of the fleet and index it against its spike")
	agentPath := fs.String("agent", "", "spikehunt-agent binary for the local capture (default: the one beside this binary)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *hosts < 2 || *hosts > 5000 || hours < 30*time.Minute || hours > 48*time.Hour {
		fmt.Fprintln(stderr, "--hosts must be 2–5000, --hours 30m–48h")
		return cli.ErrUsage
	}
	// The simulated agents run captures with the default budget, armed
	// as bait on a few hosts: the pipeline-health dashboard shows them.
	cfg := sim.Config{Scenario: *scenario, Cause: *cause, Hosts: *hosts, Seed: *seed,
		Duration: hours.Truncate(time.Minute), CounterStep: *counterStep,
		CaptureBudget: 2, CaptureArmed: 0.05}
	if c.Now != nil {
		d := cfg.Duration
		if d == 0 {
			d = sim.Config{}.Defaults().Duration
		}
		cfg.Start = c.Now().UTC().Truncate(time.Hour).Add(-d)
	}
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return cli.ErrUsage
	}
	began := time.Now()
	step := func(format string, a ...any) {
		fmt.Fprintf(stderr, "demo: %5.1fs  "+format+"\n", append([]any{time.Since(began).Seconds()}, a...)...)
	}
	step("opening %s", *dsn)
	st, err := store.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	step("migrating the schema")
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		return err
	}
	end := cfg.Start.Add(cfg.Duration)
	step("simulating %d hosts × %s of %s (%s UTC) into the ingest", cfg.Hosts, cli.FormatDuration(cfg.Duration), cfg.Scenario, cfg.Start.Format("2006-01-02 15:04"))
	lastTenth := -1
	_, stats, err := sim.Load(ctx, st, cfg, nil, func(done, total int) {
		if t := 10 * done / total; t != lastTenth {
			lastTenth = t
			step("  %d/%d hosts simulated and ingested", done, total)
		}
	})
	if err != nil {
		return err
	}
	if stats.Skipped {
		step("this fleet (scenario, seed, hosts, hours) was loaded by an earlier run in this hour: reusing it")
	} else {
		step("ingested %s requests kept (of %s served) and %s counter points", count(stats.Kept), count(stats.Requests), count(stats.Points))
	}

	if host, err := os.Hostname(); err == nil && host != "" {
		if err := forgetLocalRows(ctx, st, cfg.Service, host, cfg.Start, end); err != nil {
			return err
		}
	}
	step("detecting: spike windows per host, their suspects, fleet patterns")
	res, err := detect.Pass(ctx, st, detect.Config{Service: cfg.Service, From: cfg.Start, To: end,
		Patterns: detect.PatternConfig{Lookback: cfg.Duration}})
	if err != nil {
		return err
	}
	step("detected %d spike windows and %d patterns in %s", len(res.Spikes), len(res.Patterns), res.Timing.Total.Round(time.Millisecond))
	if c.RecordPass != nil {
		if err := c.RecordPass(ctx, st, res); err != nil {
			step("the pass's own counters rows (spikehunt.detect.*) were not stored: %v", err)
		}
	}

	scope := query.Scope{Service: cfg.Service, From: cfg.Start, To: end.Add(time.Second), RangeText: "over the simulated hours"}
	nodes := fleetNodes(cfg)
	var local localHost
	var notLocal string
	if *localCapture {
		if local, notLocal = findLocalHost(*agentPath); notLocal == "" {
			nodes = append(nodes, policy.Node{Name: local.name, HWClass: localHWClass})
		}
	}
	sections, d, trigger, err := demoFinding(ctx, st, cfg, scope, res, nodes)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, strings.Join(consoleLines(sections), "\n"))

	dataDir, _ := strings.CutPrefix(strings.SplitN(*dsn, "?", 2)[0], "chdb://")
	if !strings.HasPrefix(*dsn, "chdb://") {
		dataDir = ""
	}
	if *localCapture {
		captures := filepath.Join(os.TempDir(), "spikehunt-demo-captures")
		if dataDir != "" {
			captures = filepath.Join(dataDir, "captures")
		}
		capture := localCaptureSection(ctx, st, cfg.Service, local, notLocal, d, trigger, captures, *dsn, step)
		fmt.Fprintln(stdout, "\n"+strings.Join(consoleLines([]section{capture}), "\n"))
		sections = append(sections, capture)
	}

	path := *reportPath
	if path == "" {
		path = "spikehunt-demo.html"
		if dataDir != "" {
			path = filepath.Join(dataDir, "spikehunt-demo.html")
		}
	}
	wrote := time.Now()
	if err := writeReport(ctx, st, cfg, sections, path); err != nil {
		return err
	}
	if fi, err := os.Stat(path); err == nil {
		step("wrote the report (%d kB) in %.1fs", (fi.Size()+512)/1024, time.Since(wrote).Seconds())
	}
	// The local capture comes after the simulated hours, which end at the
	// hour: the range printed reaches past it, so that captures finds it.
	exploreTo := end
	if *localCapture && notLocal == "" {
		exploreTo = exploreEnd(end, time.Now())
	}
	fmt.Fprintf(stdout, "\nReport with plots: %s\nExplore: spikehunt patterns|hosts|spikes|suspects|captures --dsn '%s' --from %s --to %s\n",
		path, *dsn, cli.FormatTime(cfg.Start), cli.FormatTime(exploreTo))
	if dataDir != "" {
		// The dashboards read the store's own database, which the static
		// provisioning files (database spikehunt) do not name: the
		// server writes a data source that does.
		fmt.Fprintf(stdout, "Grafana: spikehunt serve-clickhouse --dsn '%s' --grafana-provisioning %s\n",
			*dsn, filepath.Join(dataDir, "grafana"))
	}
	step("done")
	return nil
}

// exploreEnd is the --to of the range the demo prints: the end of the
// simulated hours, or, when this host captured after them, the next whole
// minute after now, which is after the capture.
func exploreEnd(end, now time.Time) time.Time {
	if next := now.UTC().Truncate(time.Minute).Add(time.Minute); next.After(end) {
		return next
	}
	return end
}

// demoFinding words what the detectors found in four steps. The fourth is
// the capture policy's decision over nodes as of the end of the simulated
// hours, which it also returns, with the request latency that fires the
// captures.
func demoFinding(ctx context.Context, st store.Store, cfg sim.Config, scope query.Scope, res detect.Result, nodes []policy.Node) ([]section, policy.Decision, time.Duration, error) {
	avg, err := averagedView(ctx, st, cfg.Service, scope, res.Spikes)
	if err != nil {
		return nil, policy.Decision{}, 0, err
	}
	averagedStep := section{title: "1. The averaged view", figures: []htmlreport.Figure{htmlreport.FigureAveraged}, paras: []paragraph{
		para(fmt.Sprintf("Fleet mean latency %.2f ms and p99 %.1f ms, flat hour after hour: on an averaged dashboard this reads", avg.meanMS, avg.p99MS),
			"as a uniform regression, and a short profile of any one host will almost never catch the cause."),
	}}
	if avg.meanMS > 0 && len(res.Spikes) > 0 {
		averagedStep.paras = append(averagedStep.paras, para(fmt.Sprintf("Yet %.0f%% of that mean comes from %d spike windows covering %.2f%% of the fleet's seconds.",
			100*(1-avg.meanWithoutMS/avg.meanMS), len(res.Spikes), 100*avg.spikeShare)))
	}

	perHost := section{title: "2. Per host: one machine, or all of them?", figures: []htmlreport.Figure{htmlreport.FigureHeatmap, htmlreport.FigureRaster}}
	say := func(s *section, format string, a ...any) { s.paras = append(s.paras, para(fmt.Sprintf(format, a...))) }
	hosts, err := query.LoadHosts(ctx, st, scope)
	if err != nil {
		return nil, policy.Decision{}, 0, err
	}
	for _, l := range query.HostSummaries(hosts, false) {
		say(&perHost, "%s.", l)
	}
	patterns, err := query.LoadPatterns(ctx, st, scope)
	if err != nil {
		return nil, policy.Decision{}, 0, err
	}
	if len(patterns) == 0 {
		say(&perHost, "No fleet pattern: the spikes neither recur per host, nor line up across hosts, nor crowd on a few.")
	}
	for _, p := range patterns {
		say(&perHost, "%s", p.Description)
		if line := classSkewLine(p); line != "" {
			say(&perHost, "%s", line)
		}
		if p.IllusionShare > 0 {
			say(&perHost, "These spike windows explain %.0f%% of the fleet-averaged p99.", 100*p.IllusionShare)
		}
	}

	suspectsStep := section{title: "3. Suspects: what moved in the kernel during the spikes"}
	var suspects []query.PatternSuspect
	for _, p := range patterns {
		for _, s := range p.Suspects {
			if len(suspects) < 4 {
				hosts := fmt.Sprintf("%d hosts", s.Hosts)
				if s.Hosts == 1 {
					hosts = "1 host"
				}
				sentence := query.SuspectSentence(s, p.StallLength())
				if strings.Contains(p.Description, sentence) {
					// Step 2's pattern sentence already gives its
					// figures: name it, do not say it twice.
					sentence = query.SuspectLabel(s.Metric, s.Mode, s.Device, s.CPUs) + ", as in step 2"
				}
				say(&suspectsStep, "%s; a top suspect on %s.", sentence, hosts)
			}
			suspects = append(suspects, s)
		}
	}
	if len(suspects) == 0 {
		suspectsStep.paras = append(suspectsStep.paras, para("No kernel counter moved with the spikes: the time is spent inside the process (a sleep, a lock,",
			"a pause). Off-CPU stacks will show where."))
	}

	d, alerts, err := decideCaptures(cfg.Service, nodes, patterns, cfg.Start.Add(cfg.Duration))
	if err != nil {
		return nil, d, 0, err
	}
	next := section{title: "4. What to capture next", paras: captureAdvice(patterns, suspects, nodes, d, alerts)}
	trigger := demoLatencyTrigger(0)
	if len(patterns) > 0 {
		trigger = demoLatencyTrigger(patterns[0].TypicalPeakMS)
	}
	return []section{averagedStep, perHost, suspectsStep, next}, d, trigger, nil
}

// classSkewLine is the hardware classes' skew of p when its sentence does
// not give it: the same figure as the CLI's (query.HWSkew, the busier
// side's rate over the calmer side's), never the rates against the fleet,
// which read as a second, smaller skew. "" when the sentence gives it or
// the classes do not part.
func classSkewLine(p query.Pattern) string {
	clause := query.HWSkew(p.HWClassSkew).Clause()
	if clause == "" || strings.Contains(p.Description, clause) {
		return ""
	}
	return "Spikes by hardware class: " + clause + " (the detector did not judge it apart from chance)."
}

// averaged is the fleet's averaged latency over the range, and the mean
// without the spike windows' seconds.
type averaged struct {
	meanMS, p99MS, meanWithoutMS, spikeShare float64
}

func averagedView(ctx context.Context, st store.Store, service string, scope query.Scope, spikes []detect.SpikeWindow) (averaged, error) {
	var a averaged
	tab, err := store.Select(ctx, st, `SELECT sum(weighted_sum_us) / sum(weighted_count) / 1000,
		quantilesTDigestWeightedMerge(0.5, 0.9, 0.99, 0.999)(quantiles_us)[3] / 1000, count()
		FROM latency_1s WHERE `+scope.Filter(query.Where{}, query.Second).String())
	if err != nil || len(tab.Rows) == 0 {
		return a, fmt.Errorf("demo: averaged latency: %w", errors.Join(err, errors.New("no rows")))
	}
	a.meanMS, _ = strconv.ParseFloat(tab.Rows[0][0], 64)
	a.p99MS, _ = strconv.ParseFloat(tab.Rows[0][1], 64)
	if len(spikes) == 0 {
		a.meanWithoutMS = a.meanMS
		return a, nil
	}
	// The spike windows' host-seconds, left out of the mean: read from the
	// spikes table the detectors just wrote (thousands of windows are too
	// many for a query literal).
	secs := `SELECT host, arrayJoin(range(toUInt32(toUnixTimestamp(window_start)),
			greatest(toUInt32(toUnixTimestamp(window_end)), toUInt32(toUnixTimestamp(window_start)) + 1))) AS s
		FROM spikes FINAL WHERE ` + scope.Range(query.Live().Equals("service", service), query.Window).String()
	tab, err = store.Select(ctx, st, `SELECT sum(weighted_sum_us) / sum(weighted_count) / 1000, uniqExact(host), ifNull((SELECT count() FROM (`+secs+`)), 0)
		FROM latency_1s WHERE `+scope.Filter(query.Where{}, query.Second).String()+` AND (host, toUInt32(toUnixTimestamp(ts))) NOT IN (SELECT host, s FROM (`+secs+`))`)
	if err != nil || len(tab.Rows) == 0 {
		return a, fmt.Errorf("demo: averaged latency without spikes: %w", errors.Join(err, errors.New("no rows")))
	}
	spikeSeconds, _ := strconv.ParseFloat(tab.Rows[0][2], 64)
	a.meanWithoutMS, _ = strconv.ParseFloat(tab.Rows[0][0], 64)
	hosts, _ := strconv.ParseFloat(tab.Rows[0][1], 64)
	if span := scope.To.Sub(scope.From).Seconds() * hosts; span > 0 {
		a.spikeShare = spikeSeconds / span
	}
	return a, nil
}

// writeReport renders the HTML report: the steps as headings, each
// followed by its plots.
func writeReport(ctx context.Context, st store.Store, cfg sim.Config, sections []section, path string) error {
	f, err := htmlreport.Gather(ctx, st, cfg.Service, cfg.Start, cfg.Start.Add(cfg.Duration))
	if err != nil {
		return err
	}
	f.Steps = reportSteps(sections)
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("demo: report: %w", err)
	}
	if err := htmlreport.Write(out, f); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// count prints 12345678 as 12.3M.
func count(n int64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e4:
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	}
	return strconv.FormatInt(n, 10)
}
