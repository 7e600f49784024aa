package export

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	records *prometheus.CounterVec // {kind, outcome}
	errors  *prometheus.CounterVec // {reason}
	latency prometheus.Histogram
	spans   prometheus.Histogram
}

func newMetrics() *metrics {
	return &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_export_records_total",
			Help: "Export requests by kind and outcome: spooled, sent (handed to the sink; again after a restart for a record not yet acknowledged), delivered, dropped.",
		}, []string{"kind", "outcome"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_export_errors_total",
			Help: "Export failures by reason.",
		}, []string{"reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "spikehunt_export_latency_seconds",
			Help:    "Time from handing an export request to the sink to its delivery.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		spans: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "spikehunt_export_batch_spans",
			Help:    "Spans per export request.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		}),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.records, m.errors, m.latency, m.spans} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
