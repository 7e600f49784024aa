package eval

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
)

// The sweep: the spike rule on every latency body and request rate a
// service may have, each cell a healthy fleet (false windows per
// host-hour) and a stalling one (recall of what could be seen, and
// precision). docs/detection.md keeps its table.

// SweepCell is one latency body and rate.
type SweepCell struct {
	Sigma float64 // the lognormal body's shape
	RPS   float64 // requests per second per host
	// Bimodal gives the body two modes, cache hits and misses
	// (sim.Config.MissShare).
	Bimodal bool
}

func (c SweepCell) String() string {
	s := fmt.Sprintf("σ%g×%grps", c.Sigma, c.RPS)
	if c.Bimodal {
		s += "+misses"
	}
	return s
}

// SweepSigmas and SweepRates span the bodies of real services, from a
// cache (σ 0.3) to a search backend (σ 1.2), and from a request a second
// to a hundred per host.
var (
	SweepSigmas = []float64{0.3, 0.6, 0.9, 1.2}
	SweepRates  = []float64{1, 5, 20, 100}
)

// SweepCells is the grid of sigmas × rates, and a body with two modes at
// 20 requests a second.
func SweepCells(sigmas, rates []float64) []SweepCell {
	var out []SweepCell
	for _, s := range sigmas {
		for _, r := range rates {
			out = append(out, SweepCell{Sigma: s, RPS: r})
		}
	}
	return append(out, SweepCell{Sigma: 0.5, RPS: 20, Bimodal: true})
}

// sweepSampleEvery is how the sweep's agents sample: every request kept
// (weight 1) up to 20 a second, as an agent at low rates does and as a
// fleet that sends every span does, which puts every tail request in its
// second's mean; at 100 a second the agent's default, one in ten.
func sweepSampleEvery(rps float64) int {
	if rps <= 20 {
		return 1
	}
	return 10
}

// SweepConfigs are a cell's two fleets: healthy, and stalling 1 s every
// 15–20 minutes (thousand-spikes, no cause in the counters).
func SweepConfigs(c SweepCell, hosts int, d time.Duration, start time.Time, seed uint64) (healthy, stalling sim.Config) {
	base := sim.Config{Hosts: hosts, Duration: d, Start: start, Seed: seed, Sigma: c.Sigma, RPS: c.RPS,
		SampleEvery: sweepSampleEvery(c.RPS), SpikeLength: time.Second, Cause: sim.CauseNone}
	if c.Bimodal {
		base.MissShare, base.MissFactor = 0.1, 20
	}
	healthy, stalling = base, base
	healthy.Scenario, stalling.Scenario = sim.Healthy, sim.ThousandSpikes
	healthy.Seed = seed + 1000
	return healthy, stalling
}

// SweepResult is one cell's scores.
type SweepResult struct {
	Cell SweepCell
	// Healthy is the healthy fleet's windows (every one false) over its
	// HostHours.
	Healthy   WindowScore
	HostHours float64
	// Stalling is the stalling fleet's; Visible of its Truth stalls held
	// a request (the ceiling: a stall no request arrived in cannot be
	// seen), FoundVisible of those were found.
	Stalling              WindowScore
	Visible, FoundVisible int
	Load, Detect          time.Duration
}

// FalsePerHostHour is the healthy fleet's windows per host-hour.
func (r SweepResult) FalsePerHostHour() float64 {
	if r.HostHours == 0 {
		return 0
	}
	return float64(r.Healthy.Detected) / r.HostHours
}

// Ceiling is the share of the stalls that any detector could see.
func (r SweepResult) Ceiling() float64 { return ratio(r.Visible, r.Stalling.Truth) }

// RecallOfCeiling is the share of the visible stalls found.
func (r SweepResult) RecallOfCeiling() float64 { return ratio(r.FoundVisible, r.Visible) }

// RunSweepCell runs a cell's two fleets, each in its own store.
func RunSweepCell(ctx context.Context, healthySt, stallingSt store.Store, c SweepCell, hosts int, d time.Duration, start time.Time, seed uint64, opt Options) (SweepResult, error) {
	hc, sc := SweepConfigs(c, hosts, d, start, seed)
	res := SweepResult{Cell: c, HostHours: float64(hosts) * d.Hours()}
	h, err := RunScenario(ctx, healthySt, hc, opt)
	if err != nil {
		return res, fmt.Errorf("sweep %s healthy: %w", c, err)
	}
	res.Healthy = h.Windows
	s, err := RunScenario(ctx, stallingSt, sc, opt)
	if err != nil {
		return res, fmt.Errorf("sweep %s stalling: %w", c, err)
	}
	res.Stalling = s.Windows
	res.Load, res.Detect = h.Load+s.Load, h.Detect+s.Detect
	visible, err := visibleStalls(ctx, stallingSt, sc.Defaults().Service, s.Truth.Windows)
	if err != nil {
		return res, err
	}
	var seen []sim.Window
	for i, w := range s.Truth.Windows {
		if visible[i] {
			seen = append(seen, w)
		}
	}
	res.Visible = len(seen)
	res.FoundVisible = ScoreWindows(seen, s.Spikes).Found
	return res, nil
}

// visibleStalls says of each truth window whether a request arrived on
// its host while it lasted (or in the 10 ms before, which the simulator
// holds up too): that request waited, and is kept with weight 1.
func visibleStalls(ctx context.Context, st store.Store, service string, ws []sim.Window) ([]bool, error) {
	out := make([]bool, len(ws))
	const chunk = 500
	for lo := 0; lo < len(ws); lo += chunk {
		hi := min(lo+chunk, len(ws))
		var tuples []string
		for i := lo; i < hi; i++ {
			w := ws[i]
			tuples = append(tuples, fmt.Sprintf("(%d, %s, %d, %d)", i, store.QuoteString(w.Host),
				w.Start.Add(-10*time.Millisecond).UnixMicro(), w.End.UnixMicro()))
		}
		from, to := extent(ws[lo:hi])
		q := fmt.Sprintf(`SELECT DISTINCT w.1 FROM (SELECT arrayJoin([%s]) AS w) AS ws
INNER JOIN (SELECT toString(host) AS host, toUnixTimestamp64Micro(ts) AS us FROM requests
	WHERE service = %s AND weight = 1 AND ts >= fromUnixTimestamp64Micro(toInt64(%d), 'UTC') AND ts < fromUnixTimestamp64Micro(toInt64(%d), 'UTC')) AS r
	ON r.host = ws.w.2
WHERE r.us >= ws.w.3 AND r.us < ws.w.4`, strings.Join(tuples, ", "), store.QuoteString(service),
			from.Add(-10*time.Millisecond).UnixMicro(), to.UnixMicro())
		tab, err := store.Select(ctx, st, q)
		if err != nil {
			return nil, fmt.Errorf("sweep: visible stalls: %w", err)
		}
		for _, row := range tab.Rows {
			var i int
			if _, err := fmt.Sscan(row[0], &i); err != nil || i < 0 || i >= len(out) {
				return nil, fmt.Errorf("sweep: visible stalls: row %q", row)
			}
			out[i] = true
		}
	}
	return out, nil
}

// extent is the time from the first window's start to the last one's end.
func extent(ws []sim.Window) (from, to time.Time) {
	from, to = ws[0].Start, ws[0].End
	for _, w := range ws {
		if w.Start.Before(from) {
			from = w.Start
		}
		if w.End.After(to) {
			to = w.End
		}
	}
	return from, to
}
