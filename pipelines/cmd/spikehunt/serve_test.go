package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/captures"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
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

// The flags reach the server's per-peer gate (chhttp.Listen,
// internal/peerconns): with --http-max-connections 8 and
// --http-max-connections-per-peer 2, a third connection of one client IP
// closes that IP's connection idle longest, and another IP's request is
// answered beside them.
func TestServeClickHouseCapsConnectionsPerPeer(t *testing.T) {
	addr := startServe(t, "--http-max-connections", "8", "--http-max-connections-per-peer", "2")
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	var conns []net.Conn
	for range 3 {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		time.Sleep(50 * time.Millisecond)
	}
	conns[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conns[0].Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the peer's first (idle) connection is still open beside two more (err %v), want it closed", err)
	}
	c := getKeepAlive(t, addr, "/?query=SELECT+1")
	c.Close()
	if code, _, errs := runCLI(t, "serve-clickhouse", "--dsn", "chdb://"+t.TempDir(), "--http-max-connections", "4", "--http-max-connections-per-peer", "4"); code != 2 || !strings.Contains(errs, "per peer") {
		t.Errorf("--http-max-connections-per-peer at the max: exit %d, %q; want a usage error", code, errs)
	}
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

// The operator indexes uploaded captures (internal/captures, the operator's
// --dsn) into the chart's embedded store over HTTP as its read-write user:
// the schema applied over HTTP, then Index, Get, CapturesOfSpike and
// Delete all pass serve-clickhouse's gate and users.
func TestTheOperatorsCaptureIndexWorksThroughServeClickHouse(t *testing.T) {
	t.Setenv("SPIKEHUNT_CLICKHOUSE_PASSWORD", "operator-pw")
	t.Setenv("SPIKEHUNT_CLICKHOUSE_MIGRATE_PASSWORD", "migrate-pw")
	addr := startServeOn(t, "chdb://"+t.TempDir()+"?database=spikehunt", "--user", "ingest", "--migrate-user", "migrate")
	ctx := context.Background()
	if _, err := store.Open(ctx, "http://ingest:wrong@"+addr+"/"); err == nil {
		t.Fatal("a wrong password opened the store")
	}
	root, err := store.Open(ctx, "http://migrate:migrate-pw@"+addr+"/")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := migrate(ctx, root, schema.Options{Database: "spikehunt"}, io.Discard); err != nil {
		t.Fatalf("migrate over HTTP: %v", err)
	}
	st, err := store.Open(ctx, "http://ingest:operator-pw@"+addr+"/spikehunt")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	lit := func(tm time.Time) string { return store.QuoteString(tm.Format("2006-01-02 15:04:05.000")) }
	if err := st.Exec(ctx, `INSERT INTO spikes (spike_id, service, host, hw_class, window_start, window_end, peak_us, baseline_us,
		score, detector_version, detected_at, is_deleted) VALUES ('s1', 'billy', 'h1', 'gen5', `+lit(t0)+`, `+lit(t0.Add(5*time.Second))+`,
		1000000, 5000, 200, 'v1', `+lit(t0.Add(time.Minute))+`, 0)`); err != nil {
		t.Fatal(err)
	}
	c := captures.Capture{ID: "cap-1", Host: "h1", Node: "node-1", Backend: "perf", Profile: "cpu",
		WindowStart: t0.Add(-time.Second), WindowEnd: t0.Add(10 * time.Second), Trigger: "local threshold",
		URI: "s3://captures/sha256/ab12", Bytes: 1 << 20, Checksum: "sha256:ab12"}
	if ids, err := captures.Index(ctx, st, c); err != nil || !slices.Equal(ids, []string{"s1"}) {
		t.Fatalf("Index: %v, %v; want [s1]", ids, err)
	}
	if row, err := captures.Get(ctx, st, "cap-1"); err != nil || row.Status != captures.StatusIndexed || !slices.Equal(row.SpikeIDs, []string{"s1"}) {
		t.Fatalf("Get: %+v, %v", row, err)
	}
	if list, err := captures.CapturesOfSpike(ctx, st, "s1"); err != nil || len(list) != 1 {
		t.Fatalf("CapturesOfSpike: %d, %v", len(list), err)
	}
	if err := captures.Delete(ctx, st, "cap-1"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if list, err := captures.CapturesOfSpike(ctx, st, "s1"); err != nil || len(list) != 0 {
		t.Fatalf("after Delete: %d captures, %v", len(list), err)
	}
}

// serve-clickhouse looks after its data (docs/store-care.md): its volume's
// figures are on /metrics after the first round, and a negative interval
// is refused.
func TestServeClickHouseReportsItsVolume(t *testing.T) {
	addr := startServe(t, "--care.every", "1s")
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if m := regexp.MustCompile(`(?m)^spikehunt_store_volume_free_bytes ([0-9.e+]+)$`).FindSubmatch(body); m != nil && string(m[1]) != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no spikehunt_store_volume_free_bytes on /metrics after 30 s:\n%s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, _, errs := runCLI(t, "serve-clickhouse", "--dsn", "chdb://"+t.TempDir(), "--care.every", "-1s"); code != 2 || !strings.Contains(errs, "--care.every") {
		t.Errorf("--care.every -1s: exit %d, %q; want 2 naming the flag", code, errs)
	}
}
