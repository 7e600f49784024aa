package chhttp

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Instrument wraps h with request counts and durations registered on reg:
// spikehunt_chhttp_requests_total{code} and
// spikehunt_chhttp_request_duration_seconds.
func Instrument(h http.Handler, reg prometheus.Registerer) http.Handler {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spikehunt_chhttp_requests_total",
		Help: "ClickHouse HTTP requests served, by HTTP status code.",
	}, []string{"code"})
	duration := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "spikehunt_chhttp_request_duration_seconds",
		Help:    "Time to answer a ClickHouse HTTP request, including streaming the result.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
	})
	reg.MustRegister(requests, duration)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		requests.WithLabelValues(strconv.Itoa(sw.code)).Inc()
		duration.Observe(time.Since(start).Seconds())
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Flush passes streaming flushes through.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
