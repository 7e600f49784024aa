package sim

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// The agents' own figures, with the names and attributes the real agent
// sends in its metric stream (internal/telemetry/self.go), one set per
// counter interval, so that a simulated fleet fills the pipeline-health
// dashboard:
//
//   - requests dropped (queue_full): 0, with a rare small burst, about one
//     per host every 6 hours, of at most 3 a second over its interval;
//   - export requests handed to the sink: for spans, the agent's 200 ms
//     flush ticks in the interval that had a kept request (an agent sends
//     a record per tick with something in it); for metrics, one per
//     interval (each sampling pass is a record). They describe the agent
//     being simulated, not the few large messages the simulator sends;
//   - the spool's backlog: 0, the destination keeps up;
//   - with a capture budget (Config.CaptureBudget), the budget and the
//     captures armed: 1 on a CaptureArmed share of hosts, else 0.
//
// They come from a random stream of their own, so adding them changed
// none of the other series, and none of them moves with a stall: the
// detectors' suspects stay what the cause makes them (a burst of 3/s over
// its interval stays below the suspects' significance bar, and the export
// records rise by at most four a second while every request of a stalled
// second is kept, against a bar of six).

// flushTick is the agent exporter's drain tick (agents/export).
const flushTick = 200 * time.Millisecond

// dropBurstEvery is the mean time between a host's drop bursts.
const dropBurstEvery = 6 * time.Hour

var (
	queueFull   = []telemetry.Attr{telemetry.Str(telemetry.AttrDropReason, "queue_full")}
	spansAttr   = []telemetry.Attr{telemetry.Str(telemetry.AttrSignal, telemetry.SignalSpans)}
	metricsAttr = []telemetry.Attr{telemetry.Str(telemetry.AttrSignal, telemetry.SignalMetrics)}
)

// selfGen emits one host's agent figures interval by interval.
type selfGen struct {
	cfg   Config
	rng   *rand.Rand
	armed bool
	ticks []int64 // flush ticks with a kept request not yet counted, ascending
}

func newSelfGen(cfg Config, h *Host) *selfGen {
	g := &selfGen{cfg: cfg, rng: rand.New(rand.NewPCG(^cfg.Seed, uint64(h.Index)))}
	g.armed = cfg.CaptureBudget > 0 && g.rng.Float64() < cfg.CaptureArmed
	return g
}

// kept notes the flush ticks of one second's kept requests; seconds come
// in order.
func (g *selfGen) kept(reqs []telemetry.Request) {
	n := len(g.ticks)
	for i := range reqs {
		g.ticks = append(g.ticks, reqs[i].Start.UnixNano()/int64(flushTick))
	}
	second := slices.Compact(slices.Sorted(slices.Values(g.ticks[n:])))
	if n > 0 && len(second) > 0 && second[0] <= g.ticks[n-1] {
		second = second[1:]
	}
	g.ticks = append(g.ticks[:n], second...)
}

// interval appends the agent's points of the interval [a, b) to out.
func (g *selfGen) interval(a, b time.Time, out []telemetry.Point) []telemetry.Point {
	T := b.Sub(a).Seconds()
	drops := 0.0
	if g.rng.Float64() < T/dropBurstEvery.Seconds() {
		drops = float64(1 + g.rng.IntN(max(1, int(3*T))))
	}
	end := b.UnixNano() / int64(flushTick)
	n := 0
	for n < len(g.ticks) && g.ticks[n] < end {
		n++
	}
	g.ticks = g.ticks[:copy(g.ticks, g.ticks[n:])]
	out = append(out,
		telemetry.Point{Metric: telemetry.MetricRequestsDropped, Unit: "{request}", Start: a, End: b, Value: drops, Attrs: queueFull},
		telemetry.Point{Metric: telemetry.MetricExportRecords, Unit: "{record}", Start: a, End: b, Value: float64(n), Attrs: spansAttr},
		telemetry.Point{Metric: telemetry.MetricExportRecords, Unit: "{record}", Start: a, End: b, Value: 1, Attrs: metricsAttr},
		telemetry.Gauge(telemetry.MetricSpoolBytes, "By", b, 0),
	)
	if g.cfg.CaptureBudget > 0 {
		active := 0.0
		if g.armed {
			active = 1
		}
		out = append(out, telemetry.Gauge(telemetry.MetricCaptureActive, "{capture}", b, active),
			telemetry.Gauge(telemetry.MetricCaptureMaxConcurrent, "{capture}", b, float64(g.cfg.CaptureBudget)))
	}
	return out
}
