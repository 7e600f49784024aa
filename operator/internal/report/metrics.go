package report

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests *prometheus.CounterVec // {result}
}

func newMetrics() *metrics {
	return &metrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spikehunt_operator_report_requests_total",
		Help: "Requests to the capture report server, by result: ok, redirected (a presigned URL), bad_path, unauthenticated, " +
			"forbidden (namespace), not_found, no_report (an artifact without report.html), not_uploaded, too_large, " +
			"corrupt (bytes or record differ from the checksum; not served), unavailable (the API or the store failed).",
	}, []string{"result"})}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	return reg.Register(m.requests)
}
