// Package selfreport puts the agent's own figures into its metric stream:
// requests the intake dropped by reason, export requests handed to the
// sink, the spool's backlog and the capture engine's load. It reads each
// part's counts directly (Intake.Drops, Exporter.Sent, Spool.Pending,
// Engine.List), never back out of a metrics registry.
package selfreport

import (
	"log/slog"
	"slices"
	"time"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/export"
	"github.com/spikehunt/spikehunt/agents/spool"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// Dropper is what the intake gives: its drops since it was made, by
// reason, summed over sources (intake.Intake.Drops).
type Dropper interface {
	Drops() map[string]uint64
}

// Points are the agent's own figures (internal/telemetry/self.go) as points of
// its metric stream, added to a sampling pass: requests dropped by reason,
// export requests handed to the sink, the spool's backlog and, while the
// capture engine runs, its captures against its budget. They travel with
// the kernel counters, so the pipeline-health dashboard reads them from
// the counters table; /metrics keeps the same figures for Prometheus.
//
// Deltas are taken between the cumulative counts at two passes, so the
// deltas of a run add up to the counter /metrics shows, as long as every
// pass reaches the exporter: a pass the exporter was too busy to take is
// not committed (see Take), and the next one covers its interval too.
// One goroutine (the collector's callback) uses it.
type Points struct {
	intake Dropper
	exp    *export.Exporter
	sp     *spool.Spool
	eng    *capture.Engine // nil: capture is off
	budget int
	minGap time.Duration // half the sampling interval: the shortest delta taken
	log    *slog.Logger

	// As of the last committed pass.
	last  time.Time
	drops map[string]uint64 // cumulative by reason
	sent  [2]uint64         // spans, metrics
	// What take read, for commit.
	nextDrops map[string]uint64
	nextSent  [2]uint64
}

// New starts counting now: the intake, exporter and spool are new,
// their counters zero, so the first delta covers everything since.
func New(intake Dropper, exp *export.Exporter, sp *spool.Spool, eng *capture.Engine, budget int,
	interval time.Duration, log *slog.Logger) *Points {
	return &Points{intake: intake, exp: exp, sp: sp, eng: eng, budget: budget, minGap: interval / 2, log: log,
		last: time.Now(), drops: map[string]uint64{}}
}

// Take appends the agent's points as of now to ps, unless the last
// committed ones are less than half a sampling interval old (the slow pass
// comes with a fast one; the first pass comes right at start). The caller
// calls Commit once the exporter took the pass; without it the next take
// covers the same interval again.
func (s *Points) Take(ps []telemetry.Point, now time.Time) (out []telemetry.Point, ok bool) {
	if now.Sub(s.last) < s.minGap {
		return ps, false
	}
	drops := s.intake.Drops()
	s.nextDrops = drops
	reasons := make([]string, 0, len(drops))
	for r := range drops {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	for _, r := range reasons {
		d := drops[r] - s.drops[r]
		if drops[r] < s.drops[r] { // the count restarted (it cannot within a process, but never send a negative delta)
			d = drops[r]
		}
		ps = append(ps, telemetry.Point{Metric: telemetry.MetricRequestsDropped, Unit: "{request}", Start: s.last, End: now, Value: float64(d),
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

// Commit makes the last Take's counts the base of the next deltas.
func (s *Points) Commit(now time.Time) {
	s.last, s.drops, s.sent = now, s.nextDrops, s.nextSent
}

// CaptureBudget is the engine's maximum of concurrent captures: the
// configured one, or capture.EngineConfig's default when it is 0.
func CaptureBudget(maxConcurrent int) int {
	if maxConcurrent == 0 {
		return 2
	}
	return maxConcurrent
}
