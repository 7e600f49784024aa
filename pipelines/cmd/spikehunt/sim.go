package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/kafkasec"
	"github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
)

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("sim", `Simulates a fleet as its agents would report it (sampled per-request spans and kernel
counters, OTLP), either into a store through the ingest (--dsn) or into Kafka
(--kafka.brokers) for a running spikehunt ingest. Prints the ground truth as JSON
(--truth) for scoring. Every parameter of a scenario is a flag; zero means the
scenario's default.`, stderr)
	dsn := fs.String("dsn", "", "load into this store through the in-process ingest (chdb:///dir, …)")
	brokers := fs.String("kafka.brokers", "", "… or produce to these Kafka brokers (topics otlp_spans, otlp_metrics)")
	cli.Group(fs, "dsn", "kafka.brokers")
	kafkaSec := kafkasec.AddFlags(fs, "kafka.", kafkasec.Config{})
	truthOut := fs.Bool("truth", false, "print the ground truth (spike windows, expected class and suspects) as JSON on stdout")
	var c sim.Config
	var classes string
	var start string
	fs.StringVar(&c.Scenario, "scenario", sim.ThousandSpikes, "scenario: "+strings.Join(sim.Scenarios(), ", "))
	fs.StringVar(&c.Cause, "cause", "", "what the kernel counters show during a stall: "+strings.Join(sim.Causes(), ", ")+" (default: the scenario's)")
	fs.StringVar(&c.Service, "service", "", "service name (default checkout; endpoint-stall: storefront)")
	fs.Uint64Var(&c.Seed, "seed", 1, "random seed")
	fs.IntVar(&c.Hosts, "hosts", 0, "fleet size (default 300)")
	fs.StringVar(&classes, "hw-classes", "", "hardware classes, comma-separated (default gen4,gen5)")
	fs.StringVar(&start, "from", "", "first simulated second: RFC 3339, a date (midnight UTC) or a duration ago (36h) (default: --duration before the current hour)")
	cli.Deprecate(fs, "start", "from")
	fs.DurationVar(&c.Duration, "duration", 0, "simulated time (default 6h)")
	fs.Float64Var(&c.RPS, "rps", 0, "requests per second per host (default 30; endpoint-stall: 8)")
	fs.Float64Var(&c.MedianUS, "median-us", 0, "median request latency in µs (default 4000)")
	fs.Float64Var(&c.Sigma, "sigma", 0, "lognormal shape of the latency body: p99/p50 = e^(2.33σ) (default 0.5)")
	fs.IntVar(&c.SampleEvery, "sample-every", 0, "the agent keeps 1 in N fast requests (default 30)")
	fs.Float64Var(&c.MissShare, "miss-share", 0, "a body with two modes: this share of the requests misses a cache (default 0: one mode)")
	fs.Float64Var(&c.MissFactor, "miss-factor", 0, "how many times slower a miss's median is than a hit's (with --miss-share)")
	fs.IntVar(&c.CPUs, "cpus", 0, "logical CPUs per host (default 8)")
	fs.DurationVar(&c.CounterStep, "counter-step", 0, "kernel counter interval (default 10s)")
	fs.DurationVar(&c.PeriodMin, "period-min", 0, "shortest per-host recurrence period (default 15m; bad-host: the mean interval)")
	fs.DurationVar(&c.PeriodMax, "period-max", 0, "longest per-host recurrence period (default 20m)")
	fs.Float64Var(&c.Jitter, "jitter", 0, "each interval varies by ± jitter × period (default 0.03)")
	fs.Float64Var(&c.Fraction, "fraction", 0, "share of hosts affected (default: the scenario's)")
	fs.DurationVar(&c.SpikeLength, "spike-length", 0, "how long a stall lasts (default: the scenario's)")
	fs.StringVar(&c.SkewClass, "skew-class", "", "hardware class that stalls more often (thousand-spikes: gen5)")
	fs.Float64Var(&c.Skew, "skew", 0, "how many times more often (thousand-spikes: 2)")
	fs.Float64Var(&c.Noise, "noise", 0, "extra independent spikes per host per hour, in any scenario")
	fs.Float64Var(&c.Creep, "creep", 0, "slow-creep: latency multiplier reached at the end (default 5)")
	fs.IntVar(&c.CaptureBudget, "capture.max-concurrent", 0, "the agents' capture budget, sent as spikehunt.capture.max_concurrent (0: capture off, no capture gauges)")
	fs.Float64Var(&c.CaptureArmed, "capture.armed", 0, "share of hosts with a capture armed, sent as spikehunt.capture.active (needs --capture.max-concurrent)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if (*dsn == "") == (*brokers == "") {
		fmt.Fprintln(stderr, "give one of --dsn or --kafka.brokers")
		return cli.ErrUsage
	}
	if err := kafkaSec.Config().Validate(); err != nil {
		fmt.Fprintf(stderr, "--kafka.tls.*, --kafka.sasl.*: %v\n", err)
		return cli.ErrUsage
	}
	if *dsn != "" && kafkaSec.Config().Enabled() {
		fmt.Fprintln(stderr, "--kafka.tls.* and --kafka.sasl.* secure --kafka.brokers; --dsn loads without Kafka")
		return cli.ErrUsage
	}
	if classes != "" {
		c.HWClasses = strings.Split(classes, ",")
	}
	if start != "" {
		t, err := cli.ParseTime(start, time.Now())
		if err != nil {
			fmt.Fprintf(stderr, "--from %q: %v\n", start, err)
			return cli.ErrUsage
		}
		c.Start = t
	}
	c = c.Defaults()
	if err := c.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return cli.ErrUsage
	}
	fmt.Fprintf(stderr, "sim: %s, %d hosts × %s from %s, seed %d\n", c.Scenario, c.Hosts, cli.FormatDuration(c.Duration), cli.FormatTime(c.Start), c.Seed)
	lastTenth := -1
	progress := func(done, total int) {
		if t := 10 * done / total; t != lastTenth {
			lastTenth = t
			fmt.Fprintf(stderr, "sim: %d/%d hosts\n", done, total)
		}
	}
	truth, stats, err := simulate(ctx, c, *dsn, *brokers, kafkaSec.Config(), progress)
	if err != nil {
		return err
	}
	if stats.Skipped {
		fmt.Fprintln(stderr, "sim: this fleet was loaded into the store before: nothing sent")
	} else {
		fmt.Fprintf(stderr, "sim: sent %d requests kept (of %d served), %d counter points in %d messages\n", stats.Kept, stats.Requests, stats.Points, stats.Messages)
	}
	if *truthOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(truth)
	}
	fmt.Fprintf(stdout, "%s: %d spike windows on %d of %d hosts; expected pattern: %s\n", c.Scenario, len(truth.Windows), truth.AffectedHosts, truth.HostsTotal, orNone(truth.Class))
	return nil
}

// simulate sends the fleet into the store at dsn through the in-process
// ingest, or else to Kafka at brokers, secured by sec.
func simulate(ctx context.Context, c sim.Config, dsn, brokers string, sec kafkasec.Config, progress func(int, int)) (sim.Truth, sim.Stats, error) {
	if dsn != "" {
		st, err := store.Open(ctx, dsn)
		if err != nil {
			return sim.Truth{}, sim.Stats{}, err
		}
		defer st.Close()
		if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
			return sim.Truth{}, sim.Stats{}, err
		}
		return sim.Load(ctx, st, c, nil, progress)
	}
	sink, err := sim.NewKafkaSink(ctx, strings.Split(brokers, ","), "", "", sec)
	if err != nil {
		return sim.Truth{}, sim.Stats{}, err
	}
	truth, stats, err := sim.Run(ctx, c, sink, progress)
	if cerr := sink.Close(ctx); err == nil {
		err = cerr
	}
	return truth, stats, err
}
