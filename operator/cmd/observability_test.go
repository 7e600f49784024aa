package main

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func startObservability(t *testing.T, l serverLimits) (metricsAddr, probeAddr string) {
	t.Helper()
	metricsAddr, probeAddr = freeAddr(t), freeAddr(t)
	s, err := newObservabilityServer(metricsAddr, probeAddr, prometheus.NewRegistry(), map[string]healthz.Checker{"ping": healthz.Ping}, l)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return metricsAddr, probeAddr
}

// getKeepAlive is testenv.KeepAliveGET over TCP, for an answer of 200.
func getKeepAlive(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	c, status := testenv.KeepAliveGET(t, "tcp", addr, path)
	if status != http.StatusOK {
		t.Fatalf("GET %s: status %d", path, status)
	}
	return c
}

// The operator's /metrics and probe servers close idle keep-alive
// connections at the idle timeout (controller-runtime's kept them 90 s and
// had no read timeout or connection cap).
func TestObservabilityServersCloseIdleKeepAliveConnections(t *testing.T) {
	l := observabilityLimits()
	l.Idle = 200 * time.Millisecond
	metricsAddr, probeAddr := startObservability(t, l)
	var conns []net.Conn
	for range 5 {
		for _, u := range [][2]string{{metricsAddr, "/metrics"}, {probeAddr, "/healthz"}, {probeAddr, "/readyz"}, {probeAddr, "/healthz/ping"}} {
			conns = append(conns, getKeepAlive(t, u[0], u[1]))
		}
	}
	testenv.CheckIdleConnsClosed(t, conns, 5*time.Second)
}

// Connections past MaxConns wait to be accepted until one is let go.
func TestObservabilityServersCapConnections(t *testing.T) {
	l := observabilityLimits()
	l.MaxConns = 2
	_, probeAddr := startObservability(t, l)
	testenv.CheckConnectionCap(t, probeAddr, "/healthz", l.MaxConns)
}
