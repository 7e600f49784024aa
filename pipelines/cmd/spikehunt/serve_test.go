package main

import (
	"bufio"
	"errors"
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
)

// startServe runs `spikehunt serve-clickhouse` on a fresh data directory
// in a child process (one engine per process) and returns its address.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(spikehuntBin, append([]string{"serve-clickhouse", "--dsn", "chdb://" + t.TempDir(), "--listen", "127.0.0.1:0"}, args...)...)
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
	io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: spikehunt\r\n\r\n")
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

// closedWithin reports whether the server closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

// 200 idle keep-alive connections to serve-clickhouse were still open after
// 20 s: now each is closed at --http-idle-timeout.
func TestServeClickHouseClosesIdleKeepAliveConnections(t *testing.T) {
	addr := startServe(t, "--http-idle-timeout", "300ms")
	conns := make([]net.Conn, 20)
	for i := range conns {
		conns[i] = getKeepAlive(t, addr, "/?query=SELECT+1")
	}
	for i, c := range conns {
		if !closedWithin(c, 5*time.Second) {
			t.Fatalf("connection %d still open 5 s after its last request (idle timeout 300ms)", i)
		}
	}
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
	for i, c := range conns {
		if !closedWithin(c, 5*time.Second) {
			t.Fatalf("connection %d still open 5 s after its last request (idle timeout %v)", i, l.Idle)
		}
	}
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
	addr := startServe(t, "--http-max-connections", "2")
	held := []net.Conn{getKeepAlive(t, addr, "/ping"), getKeepAlive(t, addr, "/ping")}
	third, err := net.Dial("tcp", addr) // the kernel accepts; the server does not
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	io.WriteString(third, "GET /ping HTTP/1.1\r\nHost: spikehunt\r\n\r\n")
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
