package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
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

// getKeepAlive sends one GET on a fresh connection, reads the whole answer
// and returns the connection, still open.
func getKeepAlive(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err = net.Dial("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: operator\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
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
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("connection %d still open 5 s after its last request (idle timeout %v): %v", i, l.Idle, err)
		}
	}
}

// Connections past MaxConns wait to be accepted until one is let go.
func TestObservabilityServersCapConnections(t *testing.T) {
	l := observabilityLimits()
	l.MaxConns = 2
	_, probeAddr := startObservability(t, l)
	held := []net.Conn{getKeepAlive(t, probeAddr, "/healthz"), getKeepAlive(t, probeAddr, "/healthz")}
	third, err := net.Dial("tcp", probeAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	io.WriteString(third, "GET /healthz HTTP/1.1\r\nHost: operator\r\n\r\n")
	third.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := third.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the third connection was answered while two were held (err %v)", err)
	}
	held[0].Close()
	third.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(third), nil)
	if err != nil {
		t.Fatalf("the third connection after one was let go: %v", err)
	}
	resp.Body.Close()
}
