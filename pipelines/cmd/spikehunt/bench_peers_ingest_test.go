package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkPeersIngest is make bench-peers-ingest: one topic of
// SPIKEHUNT_BENCH_SPANS (default 5,000,000) agent spans, in the agent's
// otlp_proto export encoding, read in turn by
//
//   - `spikehunt ingest` into the embedded engine (in its own process), and
//   - the OpenTelemetry Collector (SPIKEHUNT_PEERS_OTELCOL, configured by
//     testdata/collector-ingest.yaml: kafka receiver → batch → clickhouse
//     exporter) into the same embedded engine served over HTTP by
//     `spikehunt serve-clickhouse`,
//
// each into a fresh data directory. The CPU counted is every process that
// does the work, from its start until every span is stored: the ingest
// process for spikehunt (the engine runs inside it), the Collector and
// serve-clickhouse for the peer. It reports rows per CPU second of each,
// the bytes on disk per span of all the tables each one writes after
// OPTIMIZE … FINAL, and spikehunt ÷ Collector for both. It measures once,
// whatever b.N is, and fails unless both stored every span exactly once.
func BenchmarkPeersIngest(b *testing.B) {
	peersIngestBench.Do(func() { peersIngestBench.r, peersIngestBench.err = measurePeersIngest(b) })
	if peersIngestBench.err != nil {
		b.Fatal(peersIngestBench.err)
	}
	r := peersIngestBench.r
	b.ReportMetric(r.spikehunt.perCore(), "peers.ingest_spikehunt_rows_per_s_per_core:rows/s")
	b.ReportMetric(r.collector.perCore(), "peers.ingest_collector_rows_per_s_per_core:rows/s")
	b.ReportMetric(r.spikehunt.perCore()/r.collector.perCore(), "peers.ingest_per_core_ratio:x")
	b.ReportMetric(r.spikehunt.bytesPerSpan(), "peers.ingest_spikehunt_stored_bytes_per_span:B")
	b.ReportMetric(r.collector.bytesPerSpan(), "peers.ingest_collector_stored_bytes_per_span:B")
	b.ReportMetric(r.spikehunt.bytesPerSpan()/r.collector.bytesPerSpan(), "peers.stored_bytes_ratio:x")
	b.ReportMetric(r.spikehunt.cpu, "peers.ingest_spikehunt_cpu:s")
	b.ReportMetric(r.collector.cpu, "peers.ingest_collector_cpu:s")
	b.ReportMetric(r.collector.engineCPU, "peers.ingest_collector_engine_cpu:s")
	b.ReportMetric(r.spikehunt.wall, "peers.ingest_spikehunt_wall:s")
	b.ReportMetric(r.collector.wall, "peers.ingest_collector_wall:s")
}

var peersIngestBench struct {
	sync.Once
	r   peersIngestFigures
	err error
}

type peersIngestFigures struct{ spikehunt, collector ingestRun }

// ingestRun is one reader's figures: cpu is every process's CPU seconds
// (engineCPU the part of it in serve-clickhouse), bytes the active parts'
// bytes_on_disk of every table of its database.
type ingestRun struct {
	rows, cpu, engineCPU, wall, bytes float64
}

func (r ingestRun) perCore() float64      { return r.rows / r.cpu }
func (r ingestRun) bytesPerSpan() float64 { return r.bytes / r.rows }

func measurePeersIngest(b *testing.B) (peersIngestFigures, error) {
	var f peersIngestFigures
	spans := 5_000_000
	if v, err := strconv.Atoi(os.Getenv("SPIKEHUNT_BENCH_SPANS")); err == nil && v > 0 {
		spans = v
	}
	otelcol := os.Getenv("SPIKEHUNT_PEERS_OTELCOL")
	if otelcol == "" {
		return f, fmt.Errorf("SPIKEHUNT_PEERS_OTELCOL is not set: run deps/install.sh otelcol-peers and export deps/install.sh env (make bench-peers-ingest does both)")
	}
	k := testenv.SharedKafka(b)
	ctx := context.Background()
	topic := "peers-spans"
	for _, tp := range []string{topic, topic + "-metrics", topic + "-dlq"} {
		if err := k.CreateTopic(ctx, tp, 12); err != nil {
			return f, err
		}
	}
	b.Logf("producing %d spans from 300 hosts", spans)
	produceRequests(b, k, topic, spans)

	var err error
	if f.spikehunt, err = runSpikehuntIngest(b, k, topic, spans); err != nil {
		return f, fmt.Errorf("spikehunt ingest: %w", err)
	}
	b.Logf("spikehunt ingest: %.0f rows, %.1f CPU s, %.1f s wall, %.1f B/span", f.spikehunt.rows, f.spikehunt.cpu, f.spikehunt.wall, f.spikehunt.bytesPerSpan())
	if f.collector, err = runCollectorIngest(b, k, otelcol, topic, spans); err != nil {
		return f, fmt.Errorf("collector: %w", err)
	}
	b.Logf("collector: %.0f rows, %.1f CPU s (serve-clickhouse %.1f), %.1f s wall, %.1f B/span", f.collector.rows, f.collector.cpu, f.collector.engineCPU, f.collector.wall, f.collector.bytesPerSpan())
	return f, nil
}

// runSpikehuntIngest runs `spikehunt ingest` on topic until its group has
// committed every message (it commits a batch's offsets only once the batch
// is inserted, so that is when every span is stored; the engine lives in
// that process, so count() cannot be polled from outside while it runs).
func runSpikehuntIngest(b *testing.B, k *testenv.Kafka, topic string, spans int) (ingestRun, error) {
	var r ingestRun
	dir := b.TempDir()
	dsn := "chdb://" + dir + "?database=spikehunt"
	group := "peers-spikehunt"
	p := startIngest(b, []string{"ingest", "--dsn", dsn, "--migrate", "--listen", "",
		"--kafka.brokers", k.Brokers()[0], "--group", group,
		"--topic.spans", topic, "--topic.metrics", topic + "-metrics", "--topic.dlq", topic + "-dlq"}, false, 0)
	start := time.Now()
	waitLagZero(b, k, group, topic)
	user, sys := testenv.ProcCPU(p.cmd.Process.Pid)
	r.cpu, r.wall = user+sys, time.Since(start).Seconds()
	p.cmd.Process.Signal(os.Interrupt)
	p.wait(b, 30*time.Second)

	srv, err := startServeProc(b, dsn)
	if err != nil {
		return r, err
	}
	defer srv.stop()
	st, err := store.Open(context.Background(), "http://"+srv.addr+"/spikehunt")
	if err != nil {
		return r, err
	}
	defer st.Close()
	if r.rows, err = countRows(st, "requests"); err != nil {
		return r, err
	}
	if int(r.rows) != spans {
		return r, fmt.Errorf("requests has %.0f rows, want %d", r.rows, spans)
	}
	r.bytes, err = optimizedBytes(b, st)
	return r, err
}

// runCollectorIngest serves a fresh embedded store with serve-clickhouse,
// runs the Collector on testdata/collector-ingest.yaml and polls count()
// of otel_traces until it holds every span.
func runCollectorIngest(b *testing.B, k *testenv.Kafka, otelcol, topic string, spans int) (ingestRun, error) {
	var r ingestRun
	const database = "otel"
	// clickhouse-go sends a whole batch over HTTP as one compressed block
	// (its default lz4): 100,000 spans with their attribute maps are tens of
	// MiB, over serve-clickhouse's default bound of 16 MiB per block.
	srv, err := startServeProc(b, "chdb://"+b.TempDir()+"?database="+database, "--max-compressed-block-bytes", strconv.Itoa(collectorBlockBytes))
	if err != nil {
		return r, err
	}
	defer srv.stop()
	st, err := store.Open(context.Background(), "http://"+srv.addr+"/"+database)
	if err != nil {
		return r, err
	}
	defer st.Close()

	cfg, err := filepath.Abs("testdata/collector-ingest.yaml")
	if err != nil {
		return r, err
	}
	col := exec.Command(otelcol, "--config", cfg)
	out := &bytes.Buffer{}
	col.Stdout, col.Stderr = out, out
	col.Env = append(os.Environ(), "PEERS_KAFKA_BROKER="+k.Brokers()[0], "PEERS_KAFKA_GROUP=peers-collector",
		"PEERS_KAFKA_TOPIC="+topic, "PEERS_CLICKHOUSE_ADDR="+srv.addr, "PEERS_CLICKHOUSE_DATABASE="+database)
	start := time.Now()
	if err := col.Start(); err != nil {
		return r, fmt.Errorf("start %s: %w", otelcol, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- col.Wait() }()
	defer func() {
		col.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			col.Process.Kill()
			<-exited
		}
	}()

	// count() of a MergeTree table is read from its parts' metadata: the
	// poll costs serve-clickhouse next to nothing.
	deadline := time.Now().Add(benchTimeout(spans))
	lastRows, lastChange := -1.0, time.Now()
	for {
		select {
		case err := <-exited:
			exited <- err
			return r, fmt.Errorf("the Collector exited (%v) with %.0f of %d spans stored:\n%s", err, lastRows, spans, tail(out.String(), 4000))
		case <-time.After(time.Second):
		}
		n, err := countRows(st, "otel_traces")
		if err == nil && n != lastRows {
			lastRows, lastChange = n, time.Now()
		}
		if n >= float64(spans) {
			break
		}
		if time.Now().After(deadline) || time.Since(lastChange) > 3*time.Minute {
			return r, fmt.Errorf("otel_traces holds %.0f of %d spans after %s (last error %v); the Collector said:\n%s\nserve-clickhouse said:\n%s",
				lastRows, spans, time.Since(start).Round(time.Second), err, tail(out.String(), 4000), tail(srv.out.String(), 4000))
		}
	}
	cu, cs := testenv.ProcCPU(col.Process.Pid)
	su1, ss1 := testenv.ProcCPU(srv.pid())
	// From serve-clickhouse's start, as the ingest's is from its own: each
	// side's count holds one engine start-up.
	r.engineCPU = su1 + ss1
	r.cpu, r.wall = cu+cs+r.engineCPU, time.Since(start).Seconds()
	// More than every span would be a redelivery, which the check below
	// reports: wait for what is in flight before counting.
	time.Sleep(3 * time.Second)
	if r.rows, err = countRows(st, "otel_traces"); err != nil {
		return r, err
	}
	if int(r.rows) != spans {
		return r, fmt.Errorf("otel_traces has %.0f rows, want %d", r.rows, spans)
	}
	r.bytes, err = optimizedBytes(b, st)
	return r, err
}

// collectorBlockBytes is serve-clickhouse's bound on one compressed block
// for the Collector's inserts (--max-compressed-block-bytes).
const collectorBlockBytes = 256 << 20

// benchTimeout bounds a reader's run: far above either reader's speed on
// two busy cores (a few thousand spans per second at worst).
func benchTimeout(spans int) time.Duration {
	return 5*time.Minute + time.Duration(spans/2000)*time.Second
}

func countRows(st store.Store, table string) (float64, error) {
	tab, err := store.Select(context.Background(), st, "SELECT count() FROM "+store.QuoteIdent(table))
	if err != nil {
		return 0, err
	}
	return strconv.ParseFloat(tab.Rows[0][0], 64)
}

// optimizedBytes merges every MergeTree table of the store's database into
// one part per partition (OPTIMIZE … FINAL) and returns the bytes on disk of
// their active parts: a reader's stored cost is everything it writes, its
// extra tables and materialized views' targets included.
func optimizedBytes(b *testing.B, st store.Store) (float64, error) {
	ctx := context.Background()
	tabs, err := store.Select(ctx, st, "SELECT name FROM system.tables WHERE database = currentDatabase() AND engine LIKE '%MergeTree' ORDER BY name")
	if err != nil {
		return 0, err
	}
	for _, row := range tabs.Rows {
		if err := st.Exec(ctx, "OPTIMIZE TABLE "+store.QuoteIdent(row[0])+" FINAL"); err != nil {
			return 0, fmt.Errorf("optimize %s: %w", row[0], err)
		}
	}
	parts, err := store.Select(ctx, st, "SELECT table, sum(rows), sum(bytes_on_disk) FROM system.parts WHERE database = currentDatabase() AND active GROUP BY table ORDER BY table")
	if err != nil {
		return 0, err
	}
	var total float64
	for _, row := range parts.Rows {
		bytes, _ := strconv.ParseFloat(row[2], 64)
		total += bytes
		b.Logf("  %s: %s rows, %.1f MiB on disk", row[0], row[1], bytes/(1<<20))
	}
	return total, nil
}

// serveProc is `spikehunt serve-clickhouse` in a child process, whose CPU
// the benchmark reads.
type serveProc struct {
	cmd  *exec.Cmd
	addr string
	out  *bytes.Buffer
}

func (s *serveProc) pid() int { return s.cmd.Process.Pid }

func (s *serveProc) stop() {
	s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

func startServeProc(t testing.TB, dsn string, args ...string) (*serveProc, error) {
	out := &bytes.Buffer{}
	cmd := exec.Command(spikehuntBin, append([]string{"serve-clickhouse", "--dsn", dsn, "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &serveProc{cmd: cmd, out: out}
	addr, err := servedPort(out)
	if err != nil {
		s.stop()
		return nil, err
	}
	s.addr = addr
	return s, nil
}
