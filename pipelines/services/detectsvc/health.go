package detectsvc

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

// Health is what `spikehunt detect --every` serves on --listen:
// /metrics with the passes' figures, and /healthz, which fails while the
// store does not answer or when no pass has finished for too long (a
// detector stuck in a pass, or failing each one, is unhealthy even though
// its process runs).
type Health struct {
	started  time.Time
	every    time.Duration
	lastPass atomic.Int64 // unix nanoseconds of the last finished pass; 0 before the first
	// passBegan: unix nanoseconds the pass under way began at, 0 between
	// passes; lastTry: when the last pass finished or failed.
	passBegan, lastTry atomic.Int64
	passes             prometheus.Counter
	duration           prometheus.Histogram
	last               prometheus.Gauge
	dropped            prometheus.Counter
	failed             prometheus.Counter
	behind             prometheus.Gauge
}

// NewHealth registers the passes' metrics in reg; a pass is due every
// every, from now.
func NewHealth(reg *prometheus.Registry, every time.Duration, now time.Time) *Health {
	h := &Health{
		started: now, every: every,
		passes: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_detect_passes_total",
			Help: "Detector passes finished."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spikehunt_detect_pass_duration_seconds",
			Help: "Wall time of a detector pass.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{Name: "spikehunt_detect_last_pass_timestamp_seconds",
			Help: "When the last detector pass finished (unix seconds)."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_detect_endpoints_dropped_total",
			Help: "Endpoints a pass did not judge on their own because their service had more than --max-endpoints (summed over passes); their requests still count in the host's figures."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_detect_pass_failures_total",
			Help: "Detector passes that failed (the store did not answer, a statement failed); each is tried again, over the range since the last pass that succeeded."}),
		behind: prometheus.NewGauge(prometheus.GaugeOpts{Name: "spikehunt_detect_behind_seconds",
			Help: "How far the end of the last finished pass lies behind the clock: about one pass interval live; more while a restart or an outage is caught up, in passes of at most --max-span."}),
	}
	reg.MustRegister(h.passes, h.duration, h.last, h.dropped, h.failed, h.behind)
	return h
}

// Begin records that a pass began at now.
func (h *Health) Begin(now time.Time) { h.passBegan.Store(now.UnixNano()) }

// Observe records a pass that finished at now.
func (h *Health) Observe(r detect.Result, now time.Time) {
	h.passBegan.Store(0)
	h.lastTry.Store(now.UnixNano())
	h.lastPass.Store(now.UnixNano())
	h.passes.Inc()
	h.duration.Observe(r.Timing.Total.Seconds())
	h.last.Set(float64(now.UnixNano()) / 1e9)
	h.dropped.Add(float64(r.EndpointsDropped))
	h.behind.Set(now.Sub(r.To).Seconds())
}

// Failed records a pass that failed at now.
func (h *Health) Failed(now time.Time) {
	h.passBegan.Store(0)
	h.lastTry.Store(now.UnixNano())
	h.failed.Inc()
}

// stuckAfter is how long one pass may run before /livez calls the
// detector stuck. A pass covers at most --max-span (1 h by default), which
// takes a fleet of 10,000 hosts well under this (docs/benchmarks.md).
const stuckAfter = 30 * time.Minute

// Stuck says why the detector should be restarted at now, or "": a pass
// has run for stuckAfter, or none was tried (finished or failed) for three
// intervals and a minute. A store that does not answer fails the passes
// but is no reason to restart: they are tried again, and the gap is
// caught up once it answers.
func (h *Health) Stuck(now time.Time) string {
	if began := h.passBegan.Load(); began != 0 {
		if d := now.Sub(time.Unix(0, began)); d > stuckAfter {
			return fmt.Sprintf("a detector pass has run for %s", d.Round(time.Second))
		}
		return ""
	}
	last := h.lastTry.Load()
	if last == 0 {
		last = h.started.UnixNano()
	}
	if d := now.Sub(time.Unix(0, last)); d > max(3*h.every+time.Minute, 10*time.Minute) {
		return fmt.Sprintf("no detector pass was tried in %s", d.Round(time.Second))
	}
	return ""
}

// Stale says why the detector is unhealthy at now, or "". A pass is due
// every h.every; three missed, plus a minute of slack, is stale. Before the
// first pass the process has ten minutes (a first pass over a long range
// takes a while).
func (h *Health) Stale(now time.Time) string {
	limit := 3*h.every + time.Minute
	last := h.lastPass.Load()
	if last == 0 {
		if since := now.Sub(h.started); since > max(limit, 10*time.Minute) {
			return fmt.Sprintf("no detector pass has finished in the %s since start", since.Round(time.Second))
		}
		return ""
	}
	if age := now.Sub(time.Unix(0, last)); age > limit {
		return fmt.Sprintf("the last detector pass finished %s ago (one is due every %s)", age.Round(time.Second), h.every)
	}
	return ""
}

// Mux serves base's /metrics; /healthz, the readiness: 503 while the
// passes are overdue (Stale), else base's /healthz (the store and the
// other checks); and /livez, the liveness: 503 only while the detector is
// stuck (Stuck).
func (h *Health) Mux(base http.Handler, now func() time.Time) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", base)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if why := h.Stale(now()); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		base.ServeHTTP(w, r)
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) {
		if why := h.Stuck(now()); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, "spikehunt detect: /metrics, /healthz and /livez\n")
	})
	return mux
}
