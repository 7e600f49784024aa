package eval

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

// Result is one scenario's score.
type Result struct {
	Scenario string
	Truth    sim.Truth
	Windows  WindowScore
	// Spikes are the spike windows stored at the end, which Windows
	// scores.
	Spikes []detect.SpikeWindow
	// Classes are the patterns of the last pass; ClassRight whether they
	// name the truth's class (or none). WrongPasses counts passes, at any
	// time, that reported a pattern the truth does not have.
	Classes     []string
	Patterns    []detect.Pattern
	ClassRight  bool
	WrongPasses int
	Passes      int
	// Delay is in recurrence periods, from the pattern's second occurrence
	// to the first pass that named its class; NaN without a pattern to find
	// or when none did.
	Delay float64
	Top1  Top1
	// Load and Detect are wall times: simulating and ingesting, and every
	// detector pass together.
	Load, Detect time.Duration
	Rows         int64
}

// Options adjust a run.
type Options struct {
	Detect detect.Config // knobs; Service, From, To and Now are set here
	Log    *slog.Logger
	// Progress, if not nil, gets a line now and then.
	Progress func(format string, args ...any)
	// Every is the simulated time between detector passes; 0: a quarter of
	// the pattern's period (15 minutes without one). Longer saves passes,
	// each costing the same fixed queries, and coarsens Delay.
	Every time.Duration
	// MinEvery, when Every is 0, is the shortest time between passes: a
	// quarter of a short period (the bad host's few minutes) is a pass a
	// simulated minute, 180 over 3 h. make test's evaluation passes every
	// 5 minutes at most; make eval keeps the quarter period.
	MinEvery time.Duration
}

// RunScenario simulates cfg into st (which must hold no other fleet of
// the same service), then runs the detectors the way `spikehunt detect
// --every` would: pass after pass over simulated time, each seeing only
// data before its end. It scores the final spike windows and suspects,
// the patterns of every pass, and the detection delay.
func RunScenario(ctx context.Context, st store.Store, cfg sim.Config, opt Options) (Result, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	say := opt.Progress
	if say == nil {
		say = func(string, ...any) {}
	}
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		return Result{}, err
	}
	began := time.Now()
	last := -1
	truth, stats, err := sim.Load(ctx, st, cfg, opt.Log, func(done, total int) {
		if p := 10 * done / total; p != last {
			last = p
			say("%s: simulated %d/%d hosts", cfg.Scenario, done, total)
		}
	})
	if err != nil {
		return Result{}, err
	}
	res := Result{Scenario: cfg.Scenario, Truth: truth, Load: time.Since(began), Rows: stats.Kept + stats.Points, Delay: math.NaN()}

	// Passes every quarter of the pattern's period (every 15 minutes
	// without one), as a live detector running on an interval would.
	step := 15 * time.Minute
	if truth.Period > 0 {
		step = max(truth.Period/4, time.Minute, opt.MinEvery)
	}
	if opt.Every > 0 {
		step = opt.Every
	}
	end := cfg.Start.Add(cfg.Duration)
	began = time.Now()
	var patterns []detect.Pattern
	for from := cfg.Start; from.Before(end); from = from.Add(step) {
		to := from.Add(step)
		if to.After(end) {
			to = end
		}
		dc := opt.Detect
		dc.Service, dc.From, dc.To = cfg.Service, from, to
		r, err := detect.Pass(ctx, st, dc)
		if err != nil {
			return res, fmt.Errorf("eval %s: pass to %s: %w", cfg.Scenario, to.Format(time.RFC3339), err)
		}
		res.Passes++
		patterns = r.Patterns
		right := ClassRight(truth, r.Patterns)
		if truth.Class == "" && !right {
			res.WrongPasses++
		}
		if truth.Class != "" && right && math.IsNaN(res.Delay) && !truth.SecondOccurrence.IsZero() {
			res.Delay = to.Sub(truth.SecondOccurrence).Seconds() / truth.Period.Seconds()
		}
	}
	res.Detect = time.Since(began)
	res.Classes, res.Patterns = Classes(patterns), patterns
	res.ClassRight = ClassRight(truth, patterns)

	got, err := storedSpikes(ctx, st, cfg.Service)
	if err != nil {
		return res, err
	}
	res.Spikes = got
	res.Windows = ScoreWindows(truth.Windows, got)
	res.Top1 = ScoreTop1(truth, got)
	say("%s: recall %.3f precision %.3f class %v delay %.2f periods top-1 %.2f", cfg.Scenario,
		res.Windows.Recall(), res.Windows.Precision(), res.Classes, res.Delay, res.Top1.Accuracy())
	return res, nil
}

// storedSpikes reads the service's current spike windows with their
// rank-1 suspect.
func storedSpikes(ctx context.Context, st store.Store, service string) ([]detect.SpikeWindow, error) {
	tab, err := store.Select(ctx, st, `SELECT s.host, toUnixTimestamp64Milli(s.window_start), toUnixTimestamp64Milli(s.window_end),
		x.metric, x.cpu, x.device, x.mode
		FROM (SELECT * FROM spikes FINAL WHERE service = `+store.QuoteString(service)+` AND is_deleted = 0) AS s
		LEFT JOIN (SELECT spike_id, metric, cpu, device, mode FROM spike_suspects FINAL
		           WHERE service = `+store.QuoteString(service)+` AND is_deleted = 0 AND rank = 1) AS x USING (spike_id)
		ORDER BY s.host, s.window_start`)
	if err != nil {
		return nil, fmt.Errorf("eval: read spikes: %w", err)
	}
	out := make([]detect.SpikeWindow, 0, len(tab.Rows))
	for _, r := range tab.Rows {
		a, _ := strconv.ParseInt(r[1], 10, 64)
		b, _ := strconv.ParseInt(r[2], 10, 64)
		w := detect.SpikeWindow{Service: service, Host: r[0], Start: time.UnixMilli(a).UTC(), End: time.UnixMilli(b).UTC()}
		if r[3] != "" {
			cpu, _ := strconv.Atoi(r[4])
			w.Suspects = []detect.Suspect{{Rank: 1, Metric: r[3], CPU: cpu, Device: r[5], Mode: r[6]}}
		}
		out = append(out, w)
	}
	return out, nil
}
