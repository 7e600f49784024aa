package alerts

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spikehunt/spikehunt/internal/alertdoc"
)

// metrics are the Publisher's self-observability.
type metrics struct {
	published  *prometheus.CounterVec // {kind}
	suppressed *prometheus.CounterVec // {reason}
	errors     prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_alerts_published_total", Help: "Alerts the sink accepted, by kind (spike-group, pattern).",
		}, []string{"kind"}),
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_alerts_suppressed_total",
			Help: "What was not published, by reason: rate_limited (spike-group alerts held back; their windows go out with the " +
				"service's next alert), duplicate (spike windows already published), stale (spike windows older than the dedupe " +
				"horizon), overflow (held-back windows or undelivered alerts dropped at their bound).",
		}, []string{"reason"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spikehunt_alerts_send_errors_total", Help: "Sends the sink refused; the alerts stay in the outbox for the next Publish.",
		}),
	}
	// Every label value exists from the start, so a rate() sees the first
	// increment.
	for _, k := range []string{alertdoc.KindSpikeGroup, alertdoc.KindPattern} {
		m.published.WithLabelValues(k)
	}
	for _, r := range []string{ReasonRateLimited, ReasonDuplicate, ReasonStale, ReasonOverflow} {
		m.suppressed.WithLabelValues(r)
	}
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.published, m.suppressed, m.errors} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
