package collect

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// selfMetrics are the Collector's own health metrics. They are kept from
// New on, whether or not Register is called.
type selfMetrics struct {
	success      *prometheus.GaugeVec
	duration     *prometheus.GaugeVec
	resets       *prometheus.CounterVec
	notSupported *prometheus.GaugeVec
	cgroups      *prometheus.GaugeVec
}

func newSelfMetrics() *selfMetrics {
	label := []string{"sampler"}
	return &selfMetrics{
		success: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spikehunt_collect_sampler_success",
			Help: "1 if the sampler's last reading succeeded, else 0 (not supported, or failed: see the agent log).",
		}, label),
		duration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spikehunt_collect_sampler_duration_seconds",
			Help: "Time the sampler's last reading took.",
		}, label),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_collect_counter_resets_total",
			Help: "Kernel counters that went down between two readings (reset or wrap); that series emitted nothing for the interval.",
		}, label),
		notSupported: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spikehunt_collect_not_supported",
			Help: "1 if the sampler's source does not exist on this host's kernel.",
		}, label),
		cgroups: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spikehunt_collect_cgroups",
			Help: "Workload cgroups in the cgroup sampler's last pass, by state: reported (series of their own), aggregated (into cgroup \"other\", or inside a reported parent), unreadable (vanished or malformed), not_scanned (beyond the rescan's limit: at least this many).",
		}, []string{"state"}),
	}
}

// samplerMetrics are one sampler's series, looked up once so that a pass
// does not hash label values.
type samplerMetrics struct {
	success, duration, notSupported prometheus.Gauge
	resets                          prometheus.Counter
}

// forSampler creates the series of one sampler, so that they read 0 before
// the first pass instead of being absent.
func (m *selfMetrics) forSampler(name string) samplerMetrics {
	return samplerMetrics{
		success:      m.success.WithLabelValues(name),
		duration:     m.duration.WithLabelValues(name),
		notSupported: m.notSupported.WithLabelValues(name),
		resets:       m.resets.WithLabelValues(name),
	}
}

func (m samplerMetrics) observe(took time.Duration, ok bool, resets int) {
	m.success.Set(boolToFloat(ok))
	m.duration.Set(took.Seconds())
	if resets > 0 {
		m.resets.Add(float64(resets))
	}
}

func boolToFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Register adds the Collector's own metrics to reg:
// spikehunt_collect_sampler_success{sampler},
// spikehunt_collect_sampler_duration_seconds{sampler},
// spikehunt_collect_counter_resets_total{sampler},
// spikehunt_collect_not_supported{sampler} and
// spikehunt_collect_cgroups{state}.
func (c *Collector) Register(reg prometheus.Registerer) error {
	var errs []error
	for _, col := range []prometheus.Collector{c.metrics.success, c.metrics.duration, c.metrics.resets, c.metrics.notSupported, c.metrics.cgroups} {
		errs = append(errs, reg.Register(col))
	}
	return errors.Join(errs...)
}
