package main

import (
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/export"
	"github.com/spikehunt/spikehunt/agents/spool"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// selfPoints are the agent's own figures (telemetry/self.go) as points of
// its metric stream, added to a sampling pass: requests dropped by reason,
// export requests handed to the sink, the spool's backlog and, while the
// capture engine runs, its captures against its budget. They travel with
// the kernel counters, so the pipeline-health dashboard reads them from
// the counters table; /metrics keeps the same figures for Prometheus.
//
// Deltas are taken between the cumulative counts at two passes, so the
// deltas of a run add up to the counter /metrics shows, as long as every
// pass reaches the exporter: a pass the exporter was too busy to take is
// not committed (see take), and the next one covers its interval too.
// One goroutine (the collector's callback) uses it.
type selfPoints struct {
	intake prometheus.Gatherer // a registry holding the intake's metrics only
	exp    *export.Exporter
	sp     *spool.Spool
	eng    *capture.Engine // nil: capture is off
	budget int
	minGap time.Duration // half the sampling interval: the shortest delta taken
	log    *slog.Logger

	// As of the last committed pass.
	last  time.Time
	drops map[string]float64 // cumulative by reason
	sent  [2]uint64          // spans, metrics
	// What take read, for commit.
	nextDrops map[string]float64
	nextSent  [2]uint64
	warned    bool
}

// dropsFamily is the intake's drop counter, {source, reason}.
const dropsFamily = "spikehunt_intake_drops_total"

// newSelfPoints starts counting now: the intake, exporter and spool are new,
// their counters zero, so the first delta covers everything since.
func newSelfPoints(intake prometheus.Gatherer, exp *export.Exporter, sp *spool.Spool, eng *capture.Engine, budget int,
	interval time.Duration, log *slog.Logger) *selfPoints {
	return &selfPoints{intake: intake, exp: exp, sp: sp, eng: eng, budget: budget, minGap: interval / 2, log: log,
		last: time.Now(), drops: map[string]float64{}}
}

// take appends the agent's points as of now to ps, unless the last
// committed ones are less than half a sampling interval old (the slow pass
// comes with a fast one; the first pass comes right at start). The caller
// calls commit once the exporter took the pass; without it the next take
// covers the same interval again.
func (s *selfPoints) take(ps []telemetry.Point, now time.Time) (out []telemetry.Point, ok bool) {
	if now.Sub(s.last) < s.minGap {
		return ps, false
	}
	drops, err := s.readDrops()
	if err != nil {
		if !s.warned {
			s.log.Warn("the agent's own drop counts are not exported", "err", err)
			s.warned = true
		}
		drops = s.drops // no new deltas, and none lost: read again next pass
	}
	s.nextDrops = drops
	reasons := make([]string, 0, len(drops))
	for r := range drops {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	for _, r := range reasons {
		d := drops[r] - s.drops[r]
		if d < 0 { // the counter restarted (it cannot within a process, but never send a negative delta)
			d = drops[r]
		}
		ps = append(ps, telemetry.Point{Metric: telemetry.MetricRequestsDropped, Unit: "{request}", Start: s.last, End: now, Value: d,
			Attrs: []telemetry.Attr{telemetry.Str(telemetry.AttrDropReason, r)}})
	}
	s.nextSent = [2]uint64{s.exp.Sent(export.KindTraces), s.exp.Sent(export.KindMetrics)}
	for i, signal := range [2]string{telemetry.SignalSpans, telemetry.SignalMetrics} {
		ps = append(ps, telemetry.Point{Metric: telemetry.MetricExportRecords, Unit: "{record}", Start: s.last, End: now,
			Value: float64(s.nextSent[i] - s.sent[i]), Attrs: []telemetry.Attr{telemetry.Str(telemetry.AttrSignal, signal)}})
	}
	_, backlog := s.sp.Pending()
	ps = append(ps, telemetry.Gauge(telemetry.MetricSpoolBytes, "By", now, float64(backlog)))
	if s.eng != nil {
		active := 0
		for _, c := range s.eng.List() {
			if !c.State.Terminal() {
				active++
			}
		}
		ps = append(ps, telemetry.Gauge(telemetry.MetricCaptureActive, "{capture}", now, float64(active)),
			telemetry.Gauge(telemetry.MetricCaptureMaxConcurrent, "{capture}", now, float64(s.budget)))
	}
	return ps, true
}

// commit makes the last take's counts the base of the next deltas.
func (s *selfPoints) commit(now time.Time) {
	s.last, s.drops, s.sent = now, s.nextDrops, s.nextSent
}

// readDrops sums the intake's drop counter over sources, by reason.
func (s *selfPoints) readDrops() (map[string]float64, error) {
	mfs, err := s.intake.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != dropsFamily {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out, nil
}

// captureBudget is the engine's maximum of concurrent captures: the
// configured one, or capture.EngineConfig's default when it is 0.
func captureBudget(cfg CaptureConfig) int {
	if cfg.MaxConcurrent == 0 {
		return 2
	}
	return cfg.MaxConcurrent
}
