package kafkacluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// proc is one of the chain's processes, started once: a test that sees it
// exit has seen the chain need a restart.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testenv.TailBuffer
	done chan struct{} // closed when it has exited
}

// startProc runs bin with args until the test ends (then SIGKILL); it dies
// with the test binary too (Pdeathsig).
func startProc(t testing.TB, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), out: testenv.NewTailBuffer(16 << 20), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s output (tail):\n%s", name, tail(p.out.String(), 30))
		}
	})
	return p
}

// alive says whether the process still runs.
func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// waitFor waits until the output matches re and returns the match.
func (p *proc) waitFor(t testing.TB, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m := re.FindStringSubmatch(p.out.String()); m != nil {
			return m
		}
		if !p.alive() {
			break
		}
	}
	t.Fatalf("%s (running: %v) did not print %q within %v:\n%s", p.name, p.alive(), re, timeout, tail(p.out.String(), 30))
	return nil
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

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
	p := startProc(t, "serve-clickhouse", spikehuntBin, "serve-clickhouse", "--dsn", chdb, "--listen", "127.0.0.1:0")
	addr := p.waitFor(t, servingOn, time.Minute)[1]
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
func startIngest(t testing.TB, c *testenv.KafkaCluster, dsn string) *proc {
	t.Helper()
	args := append([]string{"ingest", "--dsn", dsn, "--listen", "127.0.0.1:0", "--instance", "kafkacluster",
		// Rows stored within a second of arriving: the store's count
		// follows the load closely.
		"--batch.delay", "500ms"}, tlsFlags(c)...)
	p := startProc(t, "ingest", spikehuntBin, args...)
	p.waitFor(t, ingestStarted, time.Minute)
	return p
}

// keepAll is the agent's config that keeps every request, so that each
// can be counted.
const keepAll = "intake:\n  sample_every: 1\n  sampled_per_second: -1\nspool:\n  fsync_interval: 100ms\n"

// startAgent runs the agent, sending to the cluster over TLS, with its
// line-protocol socket at the returned path.
func startAgent(t testing.TB, c *testenv.KafkaCluster) (p *proc, sock string) {
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
	p = startProc(t, "agent", agentBin, args...)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return p, sock
		}
		if !p.alive() {
			break
		}
	}
	t.Fatalf("agent did not open %s:\n%s", sock, tail(p.out.String(), 30))
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
