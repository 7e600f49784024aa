package report

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests *prometheus.CounterVec // {result}
	conns    *prometheus.CounterVec // {reason}
}

func newMetrics() *metrics {
	return &metrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spikehunt_operator_report_requests_total",
		Help: "Requests to the capture report server, by result: ok, redirected (a presigned URL), bad_path, unauthenticated, " +
			"forbidden (namespace), not_found, no_report (an artifact without report.html), not_uploaded, too_large, " +
			"corrupt (bytes or record differ from the checksum; not served), unavailable (the API or the store failed).",
	}, []string{"result"}),
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_operator_report_connections_refused_total",
			Help: "Report server connections closed for want of a place (internal/peerconns), by reason: peer_full (the client IP held its share, all busy), server_full (no place the connection may take, none idle in its way), evicted_idle (an idle connection closed to make room for a newcomer).",
		}, []string{"reason"})}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	if err := reg.Register(m.requests); err != nil {
		return err
	}
	return reg.Register(m.conns)
}
