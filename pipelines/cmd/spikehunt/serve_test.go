package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// startServe runs `spikehunt serve-clickhouse` on a fresh data directory
// in a child process (one engine per process) and returns its address.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	return startServeOn(t, "chdb://"+t.TempDir(), args...)
}

// startServeOn is startServe on the store dsn.
func startServeOn(t *testing.T, dsn string, args ...string) string {
	t.Helper()
	cmd := exec.Command(spikehuntBin, append([]string{"serve-clickhouse", "--dsn", dsn, "--listen", "127.0.0.1:0"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	i := strings.LastIndex(line, "http://")
	if err != nil || i < 0 {
		t.Fatalf("serve-clickhouse: %q, %v", line, err)
	}
	return strings.TrimPrefix(strings.TrimSpace(line[i:]), "http://")
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

// 200 idle keep-alive connections to serve-clickhouse were still open after
// 20 s: now each is closed at --http-idle-timeout.
func TestServeClickHouseClosesIdleKeepAliveConnections(t *testing.T) {
	addr := startServe(t, "--http-idle-timeout", "300ms")
	conns := make([]net.Conn, 20)
	for i := range conns {
		conns[i] = getKeepAlive(t, addr, "/?query=SELECT+1")
	}
	testenv.CheckIdleConnsClosed(t, conns, 5*time.Second)
}

// The /metrics and /healthz server of `spikehunt ingest` and `detect`
// (both listenHTTP with observabilityLimits) closes idle connections too.
func TestIngestAndDetectMetricsServerClosesIdleKeepAliveConnections(t *testing.T) {
	l := observabilityLimits()
	l.Idle = 200 * time.Millisecond
	addr := serveMetrics(t, l)
	conns := make([]net.Conn, 20)
	for i := range conns {
		conns[i] = getKeepAlive(t, addr, "/metrics")
	}
	testenv.CheckIdleConnsClosed(t, conns, 5*time.Second)
}

func serveMetrics(t *testing.T, l httpLimits) string {
	t.Helper()
	srv, ln, err := listenHTTP("127.0.0.1:0", observabilityMux(newRegistry(), nil), l)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// Connections past --http-max-connections wait to be accepted until one is
// let go.
func TestServeClickHouseCapsConnections(t *testing.T) {
	testenv.CheckConnectionCap(t, startServe(t, "--http-max-connections", "2"), "/ping", 2)
}

// The README's own command (no user, loopback) no longer hands out the
// server's files; --allow-external-sources is the explicit way back.
func TestServeClickHouseReadsFilesOnlyWithAllowExternalSources(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secret, []byte("root:x:0:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	q := "/?" + url.Values{"query": {"SELECT * FROM file('" + secret + "', 'LineAsString')"}}.Encode()
	get := func(addr string) (int, string) {
		resp, err := http.Get("http://" + addr + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := get(startServe(t)); status == http.StatusOK || strings.Contains(body, "root:") || !strings.Contains(body, "ACCESS_DENIED") {
		t.Fatalf("by default: %d %q, want ACCESS_DENIED", status, body)
	}
	if status, body := get(startServe(t, "--allow-external-sources")); status != http.StatusOK || body != "root:x:0:0\n" {
		t.Fatalf("with --allow-external-sources: %d %q, want the file", status, body)
	}
}
