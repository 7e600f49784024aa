package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkIngest fills a topic with SPIKEHUNT_BENCH_SPANS (default
// 5,000,000) agent spans from 300 hosts, runs one `spikehunt ingest` into
// the embedded engine until the group has committed everything, and
// reports rows per CPU second of the ingest process (the embedded engine's
// inserts and merges included: it runs inside that process) and the
// compressed bytes on disk per requests row after OPTIMIZE … FINAL, and
// the mean rows per insert (the engine's cost per row falls as inserts
// grow: fewer parts to write and to merge) and the peak RSS. It measures once, whatever
// b.N is. SPIKEHUNT_BENCH_CPUPROFILE=file also saves a CPU profile of the
// ingest process.
func BenchmarkIngest(b *testing.B) {
	spans := 5_000_000
	if v, err := strconv.Atoi(os.Getenv("SPIKEHUNT_BENCH_SPANS")); err == nil && v > 0 {
		spans = v
	}
	ingestBench.Do(func() { ingestBench.r, ingestBench.err = measureIngest(b, spans, 300) })
	if ingestBench.err != nil {
		b.Fatal(ingestBench.err)
	}
	r := ingestBench.r
	b.ReportMetric(r.perCore, "ingest.spans_per_s_per_core:rows/s")
	b.ReportMetric(r.wallRate, "ingest.spans_per_s_wall:rows/s")
	b.ReportMetric(r.bytesPerRow, "ingest.stored_bytes_per_request:B")
	b.ReportMetric(r.perInsert, "ingest.rows_per_insert:rows")
	b.ReportMetric(r.peakRSS, "ingest.peak_rss:MiB")
}

var ingestBench struct {
	sync.Once
	r   ingestFigures
	err error
}

// ingestFigures are one ingest run's: wall and cpu in seconds, from the
// ingest's listener being up (its schema applied) to the group having
// committed everything.
type ingestFigures struct{ perCore, wallRate, bytesPerRow, perInsert, peakRSS, wall, cpu float64 }

// measureIngest produces spans agent spans from hosts hosts and measures
// one `spikehunt ingest` draining them.
func measureIngest(b *testing.B, spans, hosts int) (ingestFigures, error) {
	k := testenv.SharedKafka(b)
	ctx := context.Background()
	topic, group := "bench-spans", "bench"
	for _, tp := range []string{topic, topic + "-metrics", topic + "-dlq"} {
		if err := k.CreateTopic(ctx, tp, 12); err != nil {
			return ingestFigures{}, err
		}
	}
	b.Logf("producing %d spans from %d hosts", spans, hosts)
	produceRequestsFrom(b, k, topic, spans, hosts)

	dir := b.TempDir()
	dsn := "chdb://" + dir + "?database=bench"
	// /metrics is read once, at the end, for the batch sizes.
	args := []string{"ingest", "--dsn", dsn, "--migrate", "--listen", "127.0.0.1:0",
		"--kafka.brokers", k.Brokers()[0], "--group", group,
		"--topic.spans", topic, "--topic.metrics", topic + "-metrics", "--topic.dlq", topic + "-dlq"}
	// SPIKEHUNT_BENCH_INGEST_FLAGS: more flags, to compare settings
	// (e.g. "--batch.rows 200000") without editing the benchmark.
	args = append(args, strings.Fields(os.Getenv("SPIKEHUNT_BENCH_INGEST_FLAGS"))...)
	profile := os.Getenv("SPIKEHUNT_BENCH_CPUPROFILE")
	if profile != "" {
		args = append(args, "--debug.pprof")
	}
	p := startIngest(b, args, false, 0)
	// The clock starts once the schema is applied and the listener is up:
	// the second or two of starting the engine and migrating is not part
	// of the cost that grows with the load.
	if _, err := ingestListener(p); err != nil {
		p.cmd.Process.Kill()
		p.wait(b, 10*time.Second)
		return ingestFigures{}, err
	}
	start := time.Now()
	user0, sys0 := testenv.ProcCPU(p.cmd.Process.Pid)
	profiled := make(chan error, 1)
	if profile != "" {
		go func() { profiled <- fetchIngestProfile(p, profile) }()
	}
	// A generous bound: 20 µs a span, and never under 3 minutes.
	waitLagZeroWithin(b, k, group, topic, max(3*time.Minute, time.Duration(spans)*20*time.Microsecond))
	user1, sys1 := testenv.ProcCPU(p.cmd.Process.Pid)
	cpu := user1 + sys1 - user0 - sys0
	wall := time.Since(start).Seconds()
	if profile != "" {
		if err := <-profiled; err != nil {
			return ingestFigures{}, err
		}
	}
	perInsert, err := rowsPerInsert(p)
	if err != nil {
		return ingestFigures{}, err
	}
	peakRSS := ingestPeakRSS(p.cmd.Process.Pid)
	p.cmd.Process.Signal(os.Interrupt)
	p.wait(b, 30*time.Second)

	st, err := store.Open(ctx, dsn)
	if err != nil {
		return ingestFigures{}, err
	}
	defer st.Close()
	if err := st.Exec(ctx, "OPTIMIZE TABLE requests FINAL"); err != nil {
		return ingestFigures{}, err
	}
	tab, err := store.Select(ctx, st, "SELECT sum(rows), sum(data_compressed_bytes) FROM system.parts WHERE database = currentDatabase() AND table = 'requests' AND active")
	if err != nil {
		return ingestFigures{}, err
	}
	rows, _ := strconv.ParseFloat(tab.Rows[0][0], 64)
	bytes, _ := strconv.ParseFloat(tab.Rows[0][1], 64)
	if int(rows) != spans {
		return ingestFigures{}, fmt.Errorf("requests has %.0f rows, want %d", rows, spans)
	}
	return ingestFigures{perCore: rows / cpu, wallRate: rows / wall, bytesPerRow: bytes / rows, perInsert: perInsert, peakRSS: peakRSS, wall: wall, cpu: cpu}, nil
}

// fetchIngestProfile saves a CPU profile of the ingest process to path
// (SPIKEHUNT_BENCH_CPUPROFILE; read it with go tool pprof). It covers
// SPIKEHUNT_BENCH_PROFILE_SECONDS (default 15) from when the listener is
// up; with the default 5,000,000 spans the ingest runs longer than that.
// Threads of the embedded engine show as _ExternalCode.
func fetchIngestProfile(p *ingestProc, path string) error {
	secs := 15
	if v, err := strconv.Atoi(os.Getenv("SPIKEHUNT_BENCH_PROFILE_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	base, err := ingestListener(p)
	if err != nil {
		return err
	}
	resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cpu profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ingestListener is the base URL of the ingest's /metrics listener, once
// it has printed it.
func ingestListener(p *ingestProc) (string, error) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out := p.out.String()
		if i := strings.Index(out, "metrics http://"); i >= 0 {
			return strings.TrimSuffix(strings.Fields(out[i+len("metrics "):])[0], "/metrics"), nil
		}
	}
	return "", fmt.Errorf("no metrics address in the ingest's output:\n%s", p.out.String())
}

// rowsPerInsert is the mean size of the ingest's inserts into requests,
// from its spikehunt_ingest_batch_rows histogram: every insert makes a
// part, and the engine's merges of parts cost more the smaller they are.
func rowsPerInsert(p *ingestProc) (float64, error) {
	base, err := ingestListener(p)
	if err != nil {
		return 0, err
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum, count float64
	for _, line := range strings.Split(string(text), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case `spikehunt_ingest_batch_rows_sum{table="requests"}`:
			sum, _ = strconv.ParseFloat(f[1], 64)
		case `spikehunt_ingest_batch_rows_count{table="requests"}`:
			count, _ = strconv.ParseFloat(f[1], 64)
		}
	}
	if count == 0 {
		return 0, fmt.Errorf("no inserts into requests in the ingest's /metrics")
	}
	return sum / count, nil
}

// ingestPeakRSS is the process's peak resident memory in MiB (VmHWM):
// batches are held in memory until inserted, so bigger ones cost RAM.
func ingestPeakRSS(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
