package capture

import "github.com/prometheus/client_golang/prometheus"

type engineMetrics struct {
	armed      prometheus.Counter
	refused    prometheus.Counter
	done       *prometheus.CounterVec
	fireToDump prometheus.Histogram
	lost       prometheus.Counter
	bytes      prometheus.Counter
}

func newEngineMetrics() *engineMetrics {
	return &engineMetrics{
		armed: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_capture_armed_total",
			Help: "Captures armed on this host."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_capture_refused_total",
			Help: "Arm requests refused because the host ran its maximum of concurrent captures."}),
		done: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spikehunt_capture_finished_total",
			Help: "Captures that ended, by final state (Collected, Failed, Aborted, Disarmed)."}, []string{"state"}),
		fireToDump: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spikehunt_capture_fire_to_dump_seconds",
			Help:    "From the firing request's completion to the pre-window dump on disk.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5}}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_capture_lost_events_total",
			Help: "Events the recorders reported lost or overwritten, summed over collected captures."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_capture_artifact_bytes_total",
			Help: "Bytes of collected artifacts."}),
	}
}

// Register adds the engine's metrics to reg.
func (e *Engine) Register(reg prometheus.Registerer) error {
	m := e.m
	for _, c := range []prometheus.Collector{m.armed, m.refused, m.done, m.fireToDump, m.lost, m.bytes} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
