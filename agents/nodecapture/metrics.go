package nodecapture

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	written   *prometheus.CounterVec
	refused   *prometheus.CounterVec
	orphaned  prometheus.Counter
	conflicts prometheus.Counter
	errors    prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		written: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spikehunt_nodecapture_status_writes_total",
			Help: "Capture statuses this agent wrote, by the phase written."}, []string{"phase"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spikehunt_nodecapture_refused_total",
			Help: "Captures this node refused to arm (marked Failed), by reason: NotSupported, Invalid, Busy, ArmFailed."}, []string{"reason"}),
		orphaned: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_nodecapture_orphaned_total",
			Help: "Captures found Armed or Fired that this agent process did not arm (a previous agent's ring, lost), marked Failed."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_nodecapture_status_conflicts_total",
			Help: "Status writes that found the Capture changed since read (or its phase moved on) and were decided again."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_nodecapture_status_errors_total",
			Help: "Status writes that failed and were queued again with backoff."}),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.written, m.refused, m.orphaned, m.conflicts, m.errors} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
