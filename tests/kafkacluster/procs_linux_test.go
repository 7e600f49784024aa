package kafkacluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

var servingOn = regexp.MustCompile(`on http://(\S+)\n`)

// startStore migrates an embedded store and serves it with `spikehunt
// serve-clickhouse`, as the README's own hosts do (one engine per data
// directory, so the ingest and the test reach it over HTTP). It returns
// the store's HTTP DSN and a client of it.
func startStore(t testing.TB) (dsn string, st store.Store) {
	t.Helper()
	chdb := "chdb://" + filepath.Join(t.TempDir(), "store") + "?database=spikehunt"
	if out, err := exec.Command(spikehuntBin, "migrate", "--dsn", chdb).CombinedOutput(); err != nil {
		t.Fatalf("spikehunt migrate: %v\n%s", err, out)
	}
	p := testenv.StartProc(t, "serve-clickhouse", spikehuntBin, "serve-clickhouse", "--dsn", chdb, "--listen", "127.0.0.1:0")
	addr := p.WaitFor(t, servingOn, time.Minute)[1]
	dsn = "http://" + addr + "/spikehunt"
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return dsn, st
}

// tlsFlags are the agent's and the ingest's flags for the cluster's
// listener (both take kafkasec's flags).
func tlsFlags(c *testenv.KafkaCluster) []string {
	sec := c.ClientSecurity()
	return []string{"--kafka.brokers", strings.Join(c.Brokers(), ","), "--kafka.tls.enabled", "--kafka.tls.ca-file", sec.TLS.CAFile}
}

var ingestStarted = regexp.MustCompile(`spikehunt ingest: .* metrics http://`)

// startIngest runs `spikehunt ingest` from the cluster into the store.
func startIngest(t testing.TB, c *testenv.KafkaCluster, dsn string) *testenv.Proc {
	t.Helper()
	args := append([]string{"ingest", "--dsn", dsn, "--listen", "127.0.0.1:0", "--instance", "kafkacluster",
		// Rows stored within a second of arriving: the store's count
		// follows the load closely.
		"--batch.delay", "500ms"}, tlsFlags(c)...)
	p := testenv.StartProc(t, "ingest", spikehuntBin, args...)
	p.WaitFor(t, ingestStarted, time.Minute)
	return p
}

// keepAll is the agent's config that keeps every request, so that each
// can be counted.
const keepAll = "intake:\n  sample_every: 1\n  sampled_per_second: -1\nspool:\n  fsync_interval: 100ms\n"

// startAgent runs the agent, sending to the cluster over TLS, with its
// line-protocol socket at the returned path.
func startAgent(t testing.TB, c *testenv.KafkaCluster) (p *testenv.Proc, sock string) {
	t.Helper()
	tmp := t.TempDir()
	cfg, sock := filepath.Join(tmp, "agent.yaml"), filepath.Join(tmp, "agent.sock")
	if err := os.WriteFile(cfg, []byte(keepAll), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--config", cfg, "--spool.dir", filepath.Join(tmp, "spool"), "--listen", "127.0.0.1:0",
		"--capture.enabled=false", "--capture.dir", filepath.Join(tmp, "captures"), "--capture.socket", filepath.Join(tmp, "capture.sock"),
		"--intake.line-unix", sock, "--intake.line-udp", "", "--intake.otlp-grpc", "", "--intake.otlp-http", "",
		"--host-name", "test-node", "--hw-class", "gen5"}, tlsFlags(c)...)
	p = testenv.StartProc(t, "agent", agentBin, args...)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return p, sock
		}
		if !p.Alive() {
			break
		}
	}
	t.Fatalf("agent did not open %s:\n%s", sock, testenv.Tail(p.Out.String(), 30))
	return nil, ""
}

// stored counts the requests in the store: rows and distinct trace ids.
func stored(ctx context.Context, st store.Store) (rows, unique int64, err error) {
	tab, err := store.Select(ctx, st, "SELECT count(), uniqExact(trace_id) FROM requests")
	if err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Sscan(tab.Rows[0][0], &rows); err != nil {
		return 0, 0, err
	}
	_, err = fmt.Sscan(tab.Rows[0][1], &unique)
	return rows, unique, err
}
