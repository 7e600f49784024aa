package main

import (
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spikehunt/spikehunt/pipelines/store"
)

// newRegistry is a registry with the Go runtime and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return reg
}

// observabilityMux serves /metrics from reg and /healthz, which answers
// 503 while st does not answer SELECT 1 or a check says not ok (its
// detail is the body: "degraded: …").
func observabilityMux(reg *prometheus.Registry, st store.Store, checks ...func() (ok bool, detail string)) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := st.Exec(r.Context(), "SELECT 1"); err != nil {
			http.Error(w, "clickhouse: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		for _, check := range checks {
			if ok, detail := check(); !ok {
				http.Error(w, detail, http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ok\n")
	})
	return mux
}
