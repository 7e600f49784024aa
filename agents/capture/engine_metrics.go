package capture

import (
	"github.com/prometheus/client_golang/prometheus"
)

type engineMetrics struct {
	armed      prometheus.Counter
	refused    prometheus.Counter
	done       *prometheus.CounterVec
	fireToDump prometheus.Histogram
	// analyzeSeconds is how long recorders took to explain their traces.
	analyzeSeconds prometheus.Histogram
	// triggerRefused is {reason}: untrusted_sender, rate_limited.
	untrusted   prometheus.Counter
	rateLimited prometheus.Counter
	refusedVec  *prometheus.CounterVec
	lost        prometheus.Counter
	bytes       prometheus.Counter
	// storeRetries counts the artifact store's refusals of a sealed
	// capture that were retried.
	storeRetries prometheus.Counter
}

func newEngineMetrics() *engineMetrics {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spikehunt_capture_trigger_refused_total",
		Help: "Requests that met an armed capture's trigger and did not fire it, by reason: untrusted_sender (not on intake.trigger's allow-list: data only), rate_limited (the sender's fire rate, capture.fire_every / fire_burst)."},
		[]string{"reason"})
	return &engineMetrics{
		refusedVec:  refused,
		untrusted:   refused.WithLabelValues(reasonUntrusted),
		rateLimited: refused.WithLabelValues(reasonRateLimited),
		armed: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_capture_armed_total",
			Help: "Captures armed on this host."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_capture_refused_total",
			Help: "Arm requests refused because the host ran its maximum of concurrent captures."}),
		done: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spikehunt_capture_finished_total",
			Help: "Captures that ended, by final state (Collected, Failed, Aborted, Disarmed)."}, []string{"state"}),
		fireToDump: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spikehunt_capture_fire_to_dump_seconds",
			Help:    "From the firing request's completion to the pre-window dump on disk.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5}}),
		analyzeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spikehunt_capture_analysis_seconds",
			Help:    "How long a recorder took to explain its trace on the node (perf: perf script and the slow requests' verdicts), at the recorder's governance.",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60}}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_capture_lost_events_total",
			Help: "Events the recorders reported lost or overwritten, summed over collected captures."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_capture_artifact_bytes_total",
			Help: "Bytes of collected artifacts."}),
		storeRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_capture_store_retries_total",
			Help: "Times the artifact store (S3 or the folder) refused a sealed capture and the agent kept it to try again (capture.store_retry_for)."}),
	}
}

// Register adds the engine's metrics to reg.
func (e *Engine) Register(reg prometheus.Registerer) error {
	m := e.m
	for _, c := range []prometheus.Collector{m.armed, m.refused, m.done, m.fireToDump, m.analyzeSeconds, m.lost, m.bytes, m.refusedVec, m.storeRetries} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
