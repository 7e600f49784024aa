package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// The operator serves /metrics, /healthz and /readyz itself rather than
// through controller-runtime's servers: those set only a header and an idle
// timeout, with no read or write timeout and no connection cap, and the
// operator listens on every interface of its pod.

// serverLimits bound what one client can hold of a server: a connection
// that trickles its request, reads its response slowly, or idles is
// closed, and at most MaxConns are served at once (the next wait in the
// kernel's accept queue).
type serverLimits struct {
	ReadHeader, Read, Write, Idle time.Duration
	MaxConns                      int
}

func observabilityLimits() serverLimits {
	return serverLimits{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 30 * time.Second, Idle: time.Minute, MaxConns: 64}
}

// observabilityServer is a manager Runnable that runs on every replica,
// leader or not: a standby must answer its probes too.
type observabilityServer struct {
	servers []*http.Server
	lns     []net.Listener
}

// newObservabilityServer listens at once (so that a taken port fails the
// start, as controller-runtime's servers did) on metricsAddr for /metrics
// from reg and on probeAddr for /healthz and /readyz; "0" or "" turns
// either off.
func newObservabilityServer(metricsAddr, probeAddr string, reg prometheus.Gatherer, checks map[string]healthz.Checker, l serverLimits) (*observabilityServer, error) {
	s := &observabilityServer{}
	add := func(addr string, h http.Handler) error {
		if addr == "" || addr == "0" {
			return nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
		s.lns = append(s.lns, netutil.LimitListener(ln, l.MaxConns))
		s.servers = append(s.servers, &http.Server{Handler: h, ReadHeaderTimeout: l.ReadHeader, ReadTimeout: l.Read,
			WriteTimeout: l.Write, IdleTimeout: l.Idle, MaxHeaderBytes: 64 << 10})
		return nil
	}
	metricsMux := http.NewServeMux()
	metricsMux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	probes := http.NewServeMux()
	for _, path := range []string{"/healthz", "/readyz"} {
		h := http.StripPrefix(path, &healthz.Handler{Checks: checks})
		probes.Handle(path, h)
		probes.Handle(path+"/", h) // one check by name: /healthz/ping
	}
	if err := add(metricsAddr, metricsMux); err != nil {
		return nil, err
	}
	if err := add(probeAddr, probes); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// NeedLeaderElection: no, every replica serves.
func (s *observabilityServer) NeedLeaderElection() bool { return false }

// Start serves until ctx ends, then gives requests in flight 5 s.
func (s *observabilityServer) Start(ctx context.Context) error {
	errs := make(chan error, len(s.servers))
	for i, srv := range s.servers {
		go func() { errs <- srv.Serve(s.lns[i]) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range s.servers {
		srv.Shutdown(sctx)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("observability server: %w", err)
	}
	return nil
}

// close releases the listeners of a server that will not Start.
func (s *observabilityServer) close() {
	for _, ln := range s.lns {
		ln.Close()
	}
}
