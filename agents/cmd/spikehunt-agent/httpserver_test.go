package main

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func serveObservability(t *testing.T, l serverLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, capped := newServer(ln, observability(prometheus.NewRegistry(), false), l)
	go srv.Serve(capped)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// 200 idle keep-alive connections to /metrics were still open after 20 s:
// now each is closed at the idle timeout.
func TestMetricsServerClosesIdleKeepAliveConnections(t *testing.T) {
	l := metricsLimits()
	l.Idle = 200 * time.Millisecond
	addr := serveObservability(t, l)
	conns := make([]net.Conn, 20)
	for i := range conns {
		conns[i], _ = testenv.KeepAliveGET(t, "tcp", addr, "/metrics")
	}
	testenv.CheckIdleConnsClosed(t, conns, 5*time.Second)
}

// Connections past MaxConns wait to be accepted until one is let go.
func TestMetricsServerCapsConnections(t *testing.T) {
	l := metricsLimits()
	l.MaxConns = 2
	testenv.CheckConnectionCap(t, serveObservability(t, l), "/healthz", l.MaxConns)
}

// The capture control socket's server closes idle keep-alive connections
// too (it had only a header timeout).
func TestControlSocketClosesIdleKeepAliveConnections(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l := controlLimits()
	l.Idle = 200 * time.Millisecond
	srv, capped := newServer(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }), l)
	go srv.Serve(capped)
	t.Cleanup(func() { srv.Close() })
	c, _ := testenv.KeepAliveGET(t, "unix", path, "/v1/captures")
	testenv.CheckIdleConnsClosed(t, []net.Conn{c}, 5*time.Second)
}
