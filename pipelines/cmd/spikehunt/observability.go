package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/netutil"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spikehunt/spikehunt/internal/store"
)

// newRegistry is a registry with the Go runtime and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return reg
}

// observabilityMux serves /metrics from reg and /healthz, which answers
// 503 while st does not answer SELECT 1 or a check says not ok (its
// detail is the body: "degraded: …"), else 200 with "ok", or with the
// details of the checks that are ok but say more than "ok" (a missing
// source topic: "degraded: …", which is no reason to stop serving).
func observabilityMux(reg *prometheus.Registry, st store.Store, checks ...func() (ok bool, detail string)) *http.ServeMux {
	mux := metricsMux(reg)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := st.Exec(r.Context(), "SELECT 1"); err != nil {
			http.Error(w, "clickhouse: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		var notes []string
		for _, check := range checks {
			ok, detail := check()
			if !ok {
				http.Error(w, detail, http.StatusServiceUnavailable)
				return
			}
			if detail != "ok" && detail != "" {
				notes = append(notes, detail)
			}
		}
		if len(notes) == 0 {
			io.WriteString(w, "ok\n")
			return
		}
		io.WriteString(w, strings.Join(notes, "\n")+"\n")
	})
	return mux
}

// metricsMux serves /metrics from reg.
func metricsMux(reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// httpLimits bound what one client can hold of a server: a connection that
// trickles its request, reads its response slowly, or idles between
// requests is closed, and no more than MaxConns connections are served at
// once (the next wait in the kernel's accept queue).
type httpLimits struct {
	ReadHeader, Read, Write, Idle time.Duration
	MaxConns                      int
}

// observabilityLimits serve /metrics, /healthz and /debug/pprof. Write
// leaves room for pprof's default 30 s profile (pprof refuses a profile
// longer than the server's WriteTimeout).
func observabilityLimits() httpLimits {
	return httpLimits{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 60 * time.Second, Idle: time.Minute, MaxConns: 64}
}

// limitFlags adds --http-idle-timeout and --http-max-connections, which
// override l's Idle and MaxConns.
func limitFlags(fs *flag.FlagSet, l *httpLimits) {
	fs.DurationVar(&l.Idle, "http-idle-timeout", l.Idle, "close a keep-alive connection of the HTTP server idle this long")
	fs.IntVar(&l.MaxConns, "http-max-connections", l.MaxConns, "serve at most this many HTTP connections at once; more wait to be accepted")
}

func (l httpLimits) validate() error {
	if l.Idle <= 0 || l.MaxConns < 1 {
		return fmt.Errorf("--http-idle-timeout must be positive and --http-max-connections at least 1 (got %v, %d)", l.Idle, l.MaxConns)
	}
	return nil
}

// listenHTTP listens on addr and serves h there under l until the returned
// server is closed.
func listenHTTP(addr string, h http.Handler, l httpLimits) (*http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	ln = netutil.LimitListener(ln, l.MaxConns)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: l.ReadHeader, ReadTimeout: l.Read, WriteTimeout: l.Write, IdleTimeout: l.Idle, MaxHeaderBytes: 64 << 10}
	return srv, ln, nil
}
