package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// getKeepAlive sends one GET on a fresh connection, reads the whole answer
// and returns the connection, still open.
func getKeepAlive(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: agent\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return c
}

// closedWithin reports whether the server closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

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
		conns[i] = getKeepAlive(t, addr, "/metrics")
	}
	for i, c := range conns {
		if !closedWithin(c, 5*time.Second) {
			t.Fatalf("connection %d still open 5 s after its last request (idle timeout %v)", i, l.Idle)
		}
	}
}

// Connections past MaxConns wait to be accepted until one is let go.
func TestMetricsServerCapsConnections(t *testing.T) {
	l := metricsLimits()
	l.MaxConns = 2
	addr := serveObservability(t, l)
	held := []net.Conn{getKeepAlive(t, addr, "/healthz"), getKeepAlive(t, addr, "/healthz")}
	third, err := net.Dial("tcp", addr) // the kernel accepts; the server does not
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	io.WriteString(third, "GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n")
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
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /v1/captures HTTP/1.1\r\nHost: agent\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !closedWithin(c, 5*time.Second) {
		t.Fatalf("still open 5 s after its last request (idle timeout %v)", l.Idle)
	}
}
