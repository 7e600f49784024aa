package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkStoreMode measures the chart's small install: `spikehunt
// serve-clickhouse` with its users on, and the ingest and the detector as
// its HTTP clients, as the chart runs them (the helm tests run the chart's
// own command lines). A fleet of SPIKEHUNT_BENCH_HOSTS hosts (default 300)
// is simulated for SPIKEHUNT_BENCH_MINUTES minutes (default 20) into a real
// broker; one ingest then drains it into the store, and one detector pass
// runs over it. It reports:
//
//   - the fleet's own rate (spans and counter points per simulated second),
//   - the ingest's sustained drain rate over HTTP (spans/s and rows/s, wall),
//     whose ratio to the fleet's rate is the headroom,
//   - the CPU the fleet's load takes in steady state: CPU seconds of
//     serve-clickhouse and of the ingest per simulated second of the drain
//     (cores), and the same measured while the fleet's data arrives at its
//     own rate for 30 s (paced: a chunk of 10 simulated seconds every 10 s),
//     with the time the ingest needs after the last chunk to have
//     committed everything,
//   - the detector's first pass over the whole simulated span, and a
//     steady pass (--since 2m, what each 30 s pass reads besides the
//     classifier's look-back),
//   - serve-clickhouse's and the ingest's peak RSS,
//   - the disk the fleet fills per host and day (compressed parts of
//     requests and counters, before merges), which with the tables' TTLs
//     sizes the volume.
//
// It measures once, whatever b.N is.
func BenchmarkStoreMode(b *testing.B) {
	hosts, minutes := benchEnv("SPIKEHUNT_BENCH_HOSTS", 300), benchEnv("SPIKEHUNT_BENCH_MINUTES", 20)
	var r storeModeFigures
	var err error
	for range b.N {
		if r, err = measureStoreMode(b, hosts, minutes); err != nil {
			b.Fatal(err)
		}
		break
	}
	p := fmt.Sprintf("store_mode.h%d.", hosts)
	b.ReportMetric(r.fleetSpans, p+"fleet_spans_per_s:spans/s")
	b.ReportMetric(r.fleetPoints, p+"fleet_points_per_s:points/s")
	b.ReportMetric(r.spansPerS, p+"ingest_spans_per_s:spans/s")
	b.ReportMetric(r.rowsPerS, p+"ingest_rows_per_s:rows/s")
	b.ReportMetric(r.spansPerS/r.fleetSpans, p+"headroom:x")
	b.ReportMetric(r.serveCores, p+"serve_cores_steady:cores")
	b.ReportMetric(r.ingestCores, p+"ingest_cores_steady:cores")
	b.ReportMetric(r.pacedServeCores, p+"paced_serve_cores:cores")
	b.ReportMetric(r.pacedIngestCores, p+"paced_ingest_cores:cores")
	b.ReportMetric(r.pacedCatchUp.Seconds(), p+"paced_catch_up:s")
	b.ReportMetric(r.detectFirst.Seconds(), p+"detect_first_pass:s")
	b.ReportMetric(r.detectSteady.Seconds(), p+"detect_steady_pass:s")
	b.ReportMetric(r.serveRSS, p+"serve_peak_rss:MiB")
	b.ReportMetric(r.ingestRSS, p+"ingest_peak_rss:MiB")
	b.ReportMetric(r.requestsMiBPerHostDay, p+"requests_disk_per_host_day:MiB")
	b.ReportMetric(r.countersMiBPerHostDay, p+"counters_disk_per_host_day:MiB")
}

func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

type storeModeFigures struct {
	fleetSpans, fleetPoints, spansPerS, rowsPerS float64
	serveCores, ingestCores                      float64
	detectFirst, detectSteady                    time.Duration
	serveRSS, ingestRSS                          float64
	requestsMiBPerHostDay, countersMiBPerHostDay float64
	pacedServeCores, pacedIngestCores            float64
	pacedCatchUp                                 time.Duration
}

var simStats = regexp.MustCompile(`sent (\d+) requests kept \(of \d+ served\), (\d+) counter points`)

func measureStoreMode(b *testing.B, hosts, minutes int) (storeModeFigures, error) {
	var f storeModeFigures
	ctx := context.Background()
	k := testenv.SharedKafka(b)
	for _, topic := range []string{"otlp_spans", "otlp_metrics"} {
		if err := k.CreateTopic(ctx, topic, 6); err != nil {
			return f, err
		}
	}
	sim := exec.Command(spikehuntBin, "sim", "--kafka.brokers", k.Brokers()[0], "--hosts", strconv.Itoa(hosts), "--duration", fmt.Sprintf("%dm", minutes))
	var simOut bytes.Buffer
	sim.Stdout, sim.Stderr = &simOut, &simOut
	b.Logf("simulating %d hosts × %d min into Kafka", hosts, minutes)
	if err := sim.Run(); err != nil {
		return f, fmt.Errorf("spikehunt sim: %w\n%s", err, simOut.String())
	}
	m := simStats.FindStringSubmatch(simOut.String())
	if m == nil {
		return f, fmt.Errorf("no counts in the sim's output:\n%s", simOut.String())
	}
	spans, _ := strconv.ParseFloat(m[1], 64)
	points, _ := strconv.ParseFloat(m[2], 64)
	f.fleetSpans, f.fleetPoints = spans/float64(minutes*60), points/float64(minutes*60)

	// As the chart runs it: every interface (so users on), passwords in
	// the environment.
	const user, pass, roUser, roPass = "ingest", "bench-rw-password", "grafana", "bench-ro-password"
	b.Setenv("SPIKEHUNT_CLICKHOUSE_PASSWORD", pass)
	b.Setenv("SPIKEHUNT_CLICKHOUSE_READONLY_PASSWORD", roPass)
	serve := exec.Command(spikehuntBin, "serve-clickhouse", "--dsn", "chdb://"+b.TempDir()+"/store", "--listen", ":0",
		"--user", user, "--read-only-user", roUser)
	var serveOut bytes.Buffer
	serve.Stdout, serve.Stderr = &serveOut, &serveOut
	if err := serve.Start(); err != nil {
		return f, err
	}
	defer func() { serve.Process.Kill(); serve.Wait() }()
	addr, err := servedPort(&serveOut)
	if err != nil {
		return f, err
	}
	dsn := fmt.Sprintf("http://%s:%s@%s/spikehunt", user, pass, addr)
	if out, err := exec.Command(spikehuntBin, "migrate", "--dsn", fmt.Sprintf("http://%s:%s@%s", user, pass, addr), "--database", "spikehunt").CombinedOutput(); err != nil {
		return f, fmt.Errorf("migrate: %w\n%s", err, out)
	}
	cpu0u, cpu0s := testenv.ProcCPU(serve.Process.Pid)

	p := startIngest(b, []string{"ingest", "--dsn", dsn, "--listen", "127.0.0.1:0", "--kafka.brokers", k.Brokers()[0]}, false, 0)
	start := time.Now()
	waitLagZero(b, k, "spikehunt-ingest", "otlp_spans")
	waitLagZero(b, k, "spikehunt-ingest", "otlp_metrics")
	wall := time.Since(start).Seconds()
	simulated := float64(minutes * 60)
	cpu1u, cpu1s := testenv.ProcCPU(serve.Process.Pid)
	iu, is := testenv.ProcCPU(p.cmd.Process.Pid)
	f.serveCores, f.ingestCores = (cpu1u+cpu1s-cpu0u-cpu0s)/simulated, (iu+is)/simulated
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return f, err
	}
	defer st.Close()
	count := func(table string) (float64, error) {
		tab, err := store.Select(ctx, st, "SELECT count() FROM "+table)
		if err != nil {
			return 0, err
		}
		return strconv.ParseFloat(tab.Rows[0][0], 64)
	}
	reqs, err := count("requests")
	if err != nil {
		return f, err
	}
	ctrs, err := count("counters")
	if err != nil {
		return f, err
	}
	if reqs != spans {
		return f, fmt.Errorf("requests has %.0f rows, the sim sent %.0f", reqs, spans)
	}
	perHostDay := func(table string) (float64, error) {
		tab, err := store.Select(ctx, st, "SELECT sum(data_compressed_bytes) FROM system.parts WHERE active AND database = 'spikehunt' AND table = '"+table+"'")
		if err != nil {
			return 0, err
		}
		bytes, err := strconv.ParseFloat(tab.Rows[0][0], 64)
		return bytes / (1 << 20) / float64(hosts) * (24 * 60 / float64(minutes)), err
	}
	if f.requestsMiBPerHostDay, err = perHostDay("requests"); err != nil {
		return f, err
	}
	if f.countersMiBPerHostDay, err = perHostDay("counters"); err != nil {
		return f, err
	}
	f.spansPerS, f.rowsPerS = reqs/wall, (reqs+ctrs)/wall

	if err := paceFleet(b, &f, k, hosts, serve.Process.Pid, p.cmd.Process.Pid); err != nil {
		return f, err
	}
	f.ingestRSS = ingestPeakRSS(p.cmd.Process.Pid)
	p.cmd.Process.Signal(os.Interrupt)
	p.wait(b, 30*time.Second)

	for _, pass := range []struct {
		since string
		d     *time.Duration
	}{{fmt.Sprintf("%dm", minutes+60), &f.detectFirst}, {"2m", &f.detectSteady}} {
		t0 := time.Now()
		out, err := exec.Command(spikehuntBin, "detect", "--dsn", dsn, "--every", "0", "--since", pass.since).CombinedOutput()
		if err != nil {
			return f, fmt.Errorf("detect --since %s: %w\n%s", pass.since, err, out)
		}
		*pass.d = time.Since(t0)
	}
	f.serveRSS = ingestPeakRSS(serve.Process.Pid)
	return f, nil
}

// paceFleet feeds the running ingest the fleet's data at the fleet's own
// rate: every pacedChunk (10 s) the rows the fleet sends in that time, for
// pacedChunks chunks. `spikehunt sim` simulates a minute at least, so a
// chunk is one simulated minute of a sixth of the hosts: the same rows as
// 10 s of all of them. It reports the cores serve-clickhouse and the ingest
// use meanwhile and how long after the last chunk the group has committed
// everything.
func paceFleet(b *testing.B, f *storeModeFigures, k *testenv.Kafka, hosts, servePid, ingestPid int) error {
	const pacedChunk, pacedChunks = 10 * time.Second, 3
	t0 := time.Now().UTC().Add(-10 * time.Minute).Truncate(time.Second)
	su0, ss0 := testenv.ProcCPU(servePid)
	iu0, is0 := testenv.ProcCPU(ingestPid)
	start := time.Now()
	for i := range pacedChunks {
		time.Sleep(time.Until(start.Add(time.Duration(i) * pacedChunk)))
		out, err := exec.Command(spikehuntBin, "sim", "--kafka.brokers", k.Brokers()[0], "--hosts", strconv.Itoa(max(1, hosts*int(pacedChunk/time.Second)/60)),
			"--from", t0.Add(time.Duration(i)*time.Minute).Format(time.RFC3339), "--duration", "1m",
			"--seed", strconv.Itoa(2+i)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("spikehunt sim (paced): %w\n%s", err, out)
		}
	}
	time.Sleep(time.Until(start.Add(pacedChunks * pacedChunk)))
	last := time.Now()
	waitLagZero(b, k, "spikehunt-ingest", "otlp_spans")
	waitLagZero(b, k, "spikehunt-ingest", "otlp_metrics")
	f.pacedCatchUp = time.Since(last)
	wall := time.Since(start).Seconds()
	su1, ss1 := testenv.ProcCPU(servePid)
	iu1, is1 := testenv.ProcCPU(ingestPid)
	f.pacedServeCores, f.pacedIngestCores = (su1+ss1-su0-ss0)/wall, (iu1+is1-iu0-is0)/wall
	return nil
}

var servingLine = regexp.MustCompile(`on http://\S*:(\d+)`)

// servedPort waits for serve-clickhouse's "serving … on http://…" line and
// returns the loopback address of its port.
func servedPort(out *bytes.Buffer) (string, error) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m := servingLine.FindStringSubmatch(out.String()); m != nil {
			return "127.0.0.1:" + m[1], nil
		}
	}
	return "", fmt.Errorf("serve-clickhouse did not start:\n%s", out.String())
}
