package detect

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/growth"
)

// BenchmarkDetectFullPass is one pass over a whole fleet-day of 1 s
// rollups: SPIKEHUNT_BENCH_HOSTS hosts (default 100) × SPIKEHUNT_BENCH_HOURS
// hours (default 6), one request per host-second at ~4 ms, every host
// stalling 1 s every 15–20 min at its own phase (thirty requests held up,
// all kept, as the agent keeps every request over its p99: the share
// scan reads their histograms). The requests table holds the same
// requests over four endpoints (fillBenchRequests), which the
// per-endpoint stage reads; SPIKEHUNT_BENCH_ENDPOINTS=off leaves that
// stage out, for its cost. The target is 24 h ×
// 1,000 hosts in ≤ 5 s on two cores: run it with SPIKEHUNT_BENCH_HOSTS=1000
// SPIKEHUNT_BENCH_HOURS=24 (loading takes minutes). latency_1s is filled
// directly, one t-digest state and histogram per row, as the materialized
// view would make them; there are no counters, so the suspects stage
// measures its overhead only.
//
// SPIKEHUNT_BENCH_DIR keeps the loaded fleet between runs, for iterating
// on the detectors: the engine's data directory, with one database per
// fleet size; a run loads it only once and empties the detector tables
// before it passes. Either way the pass waits for the engine's merges to
// settle first (settleMerges). SPIKEHUNT_BENCH_TRACE=1 prints
// every statement of the pass with its wall and CPU time, and the merges
// still running when it starts.
func BenchmarkDetectFullPass(b *testing.B) {
	hosts, hours := envInt("SPIKEHUNT_BENCH_HOSTS", 100), envInt("SPIKEHUNT_BENCH_HOURS", 6)
	f := measureFullPass(b, hosts, hours)
	hostSeconds := float64(hosts * hours * 3600)
	// The figure make bench-detect prints (with 1,000 hosts × 24 h).
	b.ReportMetric(f.total, fmt.Sprintf("detect.fleet_%dh_%d_hosts_s:s", hours, hosts))
	b.ReportMetric(hostSeconds/f.total, "host-seconds/s")
	b.ReportMetric(f.spikes, "spikes-s/op")
	b.ReportMetric(f.suspects, "suspects-s/op")
	b.ReportMetric(f.patterns, "patterns-s/op")
	b.ReportMetric(float64(f.windows), "windows")
	// CPU time of the process (the engine's threads, the load's background
	// merges included, and ours) varies less than wall time on a shared
	// machine: compare it too.
	b.ReportMetric(f.cpu, "cpu-s/op")
}

// BenchmarkScaleDetect is `make bench-scale`'s detector stage at one fleet
// size: one full pass over 24 h (SPIKEHUNT_BENCH_HOURS) of
// SPIKEHUNT_BENCH_HOSTS hosts (default 1,000), loaded as
// BenchmarkDetectFullPass loads it. It reports the pass's wall and CPU
// time and the process's peak resident memory during the pass: VmHWM,
// reset (tests/growth.ResetPeak) once the load's merges have settled, so
// the peak is the pass's, the embedded engine's query memory included,
// over what the process already held (which it reports too: the engine's
// caches after the load). One size per process.
func BenchmarkScaleDetect(b *testing.B) {
	hosts, hours := envInt("SPIKEHUNT_BENCH_HOSTS", 1000), envInt("SPIKEHUNT_BENCH_HOURS", 24)
	f := measureFullPass(b, hosts, hours)
	b.ReportMetric(f.total, fmt.Sprintf("scale.detect_s_%d:s", hosts))
	b.ReportMetric(f.cpu, fmt.Sprintf("scale.detect_cpu_s_%d:s", hosts))
	b.ReportMetric(f.peakMiB, fmt.Sprintf("scale.detect_peak_mib_%d:MiB", hosts))
	b.ReportMetric(f.rssBeforeMiB, fmt.Sprintf("scale.detect_rss_before_mib_%d:MiB", hosts))
	b.ReportMetric(f.loadS, fmt.Sprintf("scale.detect_load_s_%d:s", hosts))
	b.ReportMetric(f.diskGiB, fmt.Sprintf("scale.detect_disk_gib_%d:GiB", hosts))
}

// BenchmarkDetectSteadyPass is what a live detector spends on the fleet
// of BenchmarkDetectFullPass (loaded as it loads it, SPIKEHUNT_BENCH_HOSTS
// × SPIKEHUNT_BENCH_HOURS): the passes of its last 10 minutes, each over
// the 30 s since the one before (detect --every 30s), with the detector's
// tables emptied first and one pass run 20 minutes before, untimed, which
// computes the host tails from nothing. The first timed pass refreshes
// them as a live detector does every 10 minutes (from the blocks kept,
// host_tail_blocks) and the other 19 read them. It reports the mean
// CPU and wall time of a pass, the refreshing one's and the median of the
// others'.
func BenchmarkDetectSteadyPass(b *testing.B) {
	hosts, hours := envInt("SPIKEHUNT_BENCH_HOSTS", 100), envInt("SPIKEHUNT_BENCH_HOURS", 6)
	ctx := context.Background()
	f := loadBenchFleet(b, hosts, hours)
	const passes = 20
	end := f.start.Add(time.Duration(hours) * time.Hour)
	var cpus, walls []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, t := range detectorTables {
			if err := f.st.Exec(ctx, "TRUNCATE TABLE "+t); err != nil {
				b.Fatal(err)
			}
		}
		// A live detector's earlier pass, untimed: its tails (and the
		// blocks they keep) are then as old as a live detector's would
		// be when the first timed pass refreshes them.
		if _, err := Pass(ctx, f.st, Config{Service: "billy", From: end.Add(-20*time.Minute - 30*time.Second), To: end.Add(-20 * time.Minute)}); err != nil {
			b.Fatal(err)
		}
		for p := 0; p < passes; p++ {
			from := end.Add(-10 * time.Minute).Add(time.Duration(p) * 30 * time.Second)
			cfg := Config{Service: "billy", From: from, To: from.Add(30 * time.Second)}
			cpu0, began := processCPU(), time.Now()
			if _, err := Pass(ctx, f.st, cfg); err != nil {
				b.Fatal(err)
			}
			cpus, walls = append(cpus, processCPU()-cpu0), append(walls, time.Since(began).Seconds())
		}
	}
	b.StopTimer()
	mean := func(xs []float64) float64 {
		sum := 0.0
		for _, x := range xs {
			sum += x
		}
		return sum / float64(len(xs))
	}
	others := append([]float64(nil), cpus[1:passes]...)
	slices.Sort(others)
	b.ReportMetric(mean(cpus), fmt.Sprintf("detect.steady_pass_cpu_%d_hosts_s:s", hosts))
	b.ReportMetric(mean(walls), fmt.Sprintf("detect.steady_pass_%d_hosts_s:s", hosts))
	b.ReportMetric(cpus[0], "refreshing-pass-cpu-s")
	b.ReportMetric(others[len(others)/2], "other-pass-cpu-s")
}

// BenchmarkDetectCatchUp is a live detector's catch-up after a one-hour
// outage of the store, on the fleet of BenchmarkDetectFullPass
// (SPIKEHUNT_BENCH_HOSTS × SPIKEHUNT_BENCH_HOURS): the detector's tables
// emptied, its last 30 s pass before the outage (which computes the host
// tails, as one pass in twenty does live), then Run over the hour the
// outage left, in passes of at most MaxSpan (1 h: one pass, its pad
// before it). It reports the catch-up's wall and CPU time, its passes and
// the process's peak RSS during it (the embedded store is in the process).
func BenchmarkDetectCatchUp(b *testing.B) {
	hosts, hours := envInt("SPIKEHUNT_BENCH_HOSTS", 100), envInt("SPIKEHUNT_BENCH_HOURS", 6)
	ctx := context.Background()
	f := loadBenchFleet(b, hosts, hours)
	end := f.start.Add(time.Duration(hours) * time.Hour)
	const outage = time.Hour
	var wall, cpu, peak float64
	passes := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for _, t := range detectorTables {
			if err := f.st.Exec(ctx, "TRUNCATE TABLE "+t); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := Pass(ctx, f.st, Config{Service: "billy", From: end.Add(-outage - 30*time.Second), To: end.Add(-outage)}); err != nil {
			b.Fatal(err)
		}
		if err := growth.ResetPeak(0); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		cpu0, began := processCPU(), time.Now()
		err := Run(ctx, f.st, Config{Service: "billy", From: end.Add(-outage), To: end}, 0, RunHooks{Pass: func(Result) { passes++ }})
		if err != nil {
			b.Fatal(err)
		}
		wall += time.Since(began).Seconds()
		cpu += processCPU() - cpu0
		p, err := growth.PeakMiB(0)
		if err != nil {
			b.Fatal(err)
		}
		peak = max(peak, p)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(wall/n, fmt.Sprintf("detect.catchup_1h_%d_hosts_s:s", hosts))
	b.ReportMetric(cpu/n, fmt.Sprintf("detect.catchup_1h_cpu_%d_hosts_s:s", hosts))
	b.ReportMetric(float64(passes)/n, "passes")
	b.ReportMetric(peak, fmt.Sprintf("detect.catchup_1h_peak_rss_%d_hosts_mib:MiB", hosts))
}

// passFigures are a full pass's, per pass (seconds, MiB): the time of its
// stages, its windows, the process's CPU time and peak RSS over the
// passes, its RSS before them, how long loading the fleet took and what
// the loaded fleet takes on disk.
type passFigures struct {
	total, spikes, suspects, patterns, cpu float64
	windows                                int
	peakMiB, rssBeforeMiB, loadS, diskGiB  float64
}

// benchFleet is BenchmarkDetectFullPass's loaded fleet: the store (traced
// with SPIKEHUNT_BENCH_TRACE), the start of its data, how long loading it
// took and what it takes on disk.
type benchFleet struct {
	st             store.Store
	start          time.Time
	loadS, diskGiB float64
}

// loadBenchFleet loads (or finds) hosts × hours of the fleet and waits for
// its merges to settle.
func loadBenchFleet(b *testing.B, hosts, hours int) benchFleet {
	ctx := context.Background()
	loadStart := time.Now()
	st, start, loaded := benchStore(b, hosts, hours)
	period := "(900 + cityHash64(h, 11) % 301)"
	for hour := 0; hour < hours && !loaded; hour++ {
		q := fmt.Sprintf(`INSERT INTO latency_1s
SELECT toDateTime(%[1]d + s, 'UTC'), 'billy', concat('host-', leftPad(toString(h), 4, '0')), if(h %% 2 = 0, 'gen4', 'gen5'),
    k, k, lat, lat * k, arrayReduce('quantilesTDigestWeightedState(0.5, 0.9, 0.99, 0.999)', [lat], [toUInt32(k)]),
    ([toUInt16(floor(8 * log2(lat)))], [k])
FROM (
    SELECT intDiv(number, %[2]d) + %[3]d AS s, number %% %[2]d AS h,
        (s + %[4]s - cityHash64(h, 12) %% %[4]s) %% %[4]s = 0 AS stalled,
        toUInt32(if(stalled, 1000000, 3500 + cityHash64(number, %[3]d) %% 1000)) AS lat,
        toUInt64(if(stalled, 30, 1)) AS k
    FROM numbers(%[5]d)
)`, start.Unix(), hosts, hour*3600, period, hosts*3600)
		if err := st.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	if !loaded {
		fillBenchRequests(b, st, start, hosts, hours, period)
	}
	loadS := time.Since(loadStart).Seconds()
	settleMerges(b, st)
	disk, err := store.Select(ctx, st, "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = currentDatabase() AND active")
	if err != nil {
		b.Fatal(err)
	}
	diskBytes, _ := strconv.ParseFloat(disk.Rows[0][0], 64)
	if os.Getenv("SPIKEHUNT_BENCH_TRACE") != "" {
		tab, err := store.Select(ctx, st, "SELECT count(), sum(rows_read), max(elapsed) FROM system.merges")
		if err == nil {
			fmt.Fprintf(os.Stderr, "TRACE merges before the pass: %v\n", tab.Rows)
		}
		tab, err = store.Select(ctx, st, "SELECT count(), sum(rows) FROM system.parts WHERE database = currentDatabase() AND table = 'latency_1s' AND active")
		if err == nil {
			fmt.Fprintf(os.Stderr, "TRACE parts before the pass: %v\n", tab.Rows)
		}
		st = tracedStore{st}
	}
	return benchFleet{st: st, start: start, loadS: loadS, diskGiB: diskBytes / (1 << 30)}
}

// measureFullPass loads (or finds) hosts × hours of the fleet and times
// b.N full passes over it.
func measureFullPass(b *testing.B, hosts, hours int) passFigures {
	ctx := context.Background()
	f := loadBenchFleet(b, hosts, hours)
	st, start := f.st, f.start
	cfg := Config{Service: "billy", From: start, To: start.Add(time.Duration(hours) * time.Hour)}
	cfg.Endpoints.Off = os.Getenv("SPIKEHUNT_BENCH_ENDPOINTS") == "off"
	var spikes, suspects, patterns, total time.Duration
	windows := 0
	rssBefore, err := growth.RSSMiB(0)
	if err != nil {
		b.Fatal(err)
	}
	if err := growth.ResetPeak(0); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		res, err := Pass(ctx, st, cfg)
		if err != nil {
			b.Fatal(err)
		}
		spikes += res.Timing.Spikes
		suspects += res.Timing.Suspects
		patterns += res.Timing.Patterns
		total += res.Timing.Total
		windows = len(res.Spikes)
	}
	cpu := processCPU() - cpu0
	b.StopTimer()
	peak, err := growth.PeakMiB(0)
	if err != nil {
		b.Fatal(err)
	}
	if os.Getenv("SPIKEHUNT_BENCH_TRACE") != "" {
		tab, err := store.Select(ctx, st, "SELECT count(), sum(rows_read), max(elapsed) FROM system.merges")
		if err == nil {
			fmt.Fprintf(os.Stderr, "TRACE merges after the pass: %v\n", tab.Rows)
		}
	}
	n := float64(b.N)
	return passFigures{
		total: total.Seconds() / n, spikes: spikes.Seconds() / n, suspects: suspects.Seconds() / n, patterns: patterns.Seconds() / n,
		cpu: cpu / n, windows: windows, peakMiB: peak, rssBeforeMiB: rssBefore, loadS: f.loadS, diskGiB: f.diskGiB,
	}
}

// fillBenchRequests puts BenchmarkDetectFullPass's requests into the
// requests table, with the view that rolls requests up into latency_1s
// detached (latency_1s is filled directly): one kept request per
// host-second over four endpoints, weighing 30, and in a stalled second
// thirty kept ones that all end at the stall's end.
func fillBenchRequests(b *testing.B, st store.Store, start time.Time, hosts, hours int, period string) {
	ctx := context.Background()
	if err := st.Exec(ctx, "DETACH TABLE latency_1s_mv"); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := st.Exec(ctx, "ATTACH TABLE latency_1s_mv"); err != nil {
			b.Fatal(err)
		}
	}()
	for hour := 0; hour < hours; hour++ {
		q := fmt.Sprintf(`INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, thread_id, weight)
SELECT fromUnixTimestamp64Micro(toInt64(%[1]d + s) * 1000000 + if(stalled, j * 1000, cityHash64(number, 14) %% 1000000), 'UTC'),
    'billy', concat('host-', leftPad(toString(h), 4, '0')), if(h %% 2 = 0, 'gen4', 'gen5'),
    ['/a', '/b', '/c', '/d'][1 + (cityHash64(number, 13) + j) %% 4],
    toUInt32(if(stalled, 1000000 - j * 1000, 3500 + cityHash64(number, %[3]d) %% 1000)), '200', 1000, toUInt32(if(stalled, 1, 30))
FROM (
    SELECT number, intDiv(number, %[2]d) + %[3]d AS s, number %% %[2]d AS h,
        (s + %[4]s - cityHash64(h, 12) %% %[4]s) %% %[4]s = 0 AS stalled
    FROM numbers(%[5]d)
)
ARRAY JOIN range(if(stalled, 30, 1)) AS j`, start.Unix(), hosts, hour*3600, period, hosts*3600)
		if err := st.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
}

// detectorTables are what a pass writes: emptied before a measured pass,
// so that it computes them as a first pass does.
var detectorTables = []string{"spikes", "spike_suspects", "patterns", "host_tails", "host_tail_blocks"}

// benchStore is the store the benchmark passes over and the start of its
// data: a fresh one, or with SPIKEHUNT_BENCH_DIR the kept one (loaded
// reports whether it holds the fleet already).
func benchStore(b *testing.B, hosts, hours int) (st store.Store, start time.Time, loaded bool) {
	start = time.Now().UTC().Truncate(time.Hour).Add(-time.Duration(hours+1) * time.Hour)
	dir := os.Getenv("SPIKEHUNT_BENCH_DIR")
	if dir == "" {
		return migrated(b), start, false
	}
	ctx := context.Background()
	e, err := store.OpenEmbedded(ctx, store.EmbeddedConfig{Dir: dir, Database: fmt.Sprintf("bench_%d_%d", hosts, hours)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	if _, err := schema.Apply(ctx, e, schema.Options{}); err != nil {
		b.Fatal(err)
	}
	// latency_1m is fed from latency_1s by its view: a fleet loaded again
	// over a half-loaded one must not keep the first load's minutes, or
	// the host tails' refresh reads them all (it once read six loads'
	// worth, six times a fleet's cost).
	// A scalar subquery's value is Nullable, and a Nullable 1 reads as
	// "{true 1}": each is made a plain 0 or 1.
	tab, err := store.Select(ctx, e, `SELECT count(), toUnixTimestamp(min(ts)), toUInt8(ifNull((SELECT count() FROM requests) > 0, 0)),
    toUInt8(ifNull(sum(weighted_count) = (SELECT sum(weighted_count) FROM latency_1m), 0)) FROM latency_1s`)
	if err != nil {
		b.Fatal(err)
	}
	if tab.Rows[0][0] == strconv.Itoa(hosts*hours*3600) && tab.Rows[0][2] == "1" && tab.Rows[0][3] == "1" {
		first, _ := strconv.ParseInt(tab.Rows[0][1], 10, 64)
		start, loaded = time.Unix(first, 0).UTC(), true
		fmt.Fprintf(os.Stderr, "bench: the kept fleet %s is loaded\n", dir)
	} else {
		fmt.Fprintf(os.Stderr, "bench: loading the fleet into %s (%v)\n", dir, tab.Rows[0])
		for _, t := range []string{"latency_1s", "latency_1m", "requests"} {
			if err := e.Exec(ctx, "TRUNCATE TABLE "+t); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, t := range detectorTables {
		if err := e.Exec(ctx, "TRUNCATE TABLE "+t); err != nil {
			b.Fatal(err)
		}
	}
	return e, start, loaded
}

// settleMerges waits (up to 15 minutes) until no merge has run for two
// seconds: the pass is measured on the store as it is once merges have
// caught up with the data, as they do with a day arriving over a day, not
// on a day loaded a minute ago, whose merges (minutes of both cores) would
// be measured with it. It prints how long it waited.
func settleMerges(b *testing.B, st store.Store) {
	ctx := context.Background()
	began, quiet := time.Now(), 0
	for quiet < 4 && time.Since(began) < 15*time.Minute {
		tab, err := store.Select(ctx, st, "SELECT count() FROM system.merges")
		if err != nil {
			b.Fatal(err)
		}
		if tab.Rows[0][0] == "0" {
			quiet++
		} else {
			quiet = 0
		}
		time.Sleep(500 * time.Millisecond)
	}
	tab, err := store.Select(ctx, st, "SELECT count() FROM system.parts WHERE database = currentDatabase() AND table = 'latency_1s' AND active")
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "bench: merges settled after %.0f s; latency_1s in %s parts\n", time.Since(began).Seconds(), tab.Rows[0][0])
}

func envInt(key string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(key)); err == nil && n > 0 {
		return n
	}
	return def
}

// tracedStore logs every statement's wall and CPU time
// (SPIKEHUNT_BENCH_TRACE=1).
type tracedStore struct {
	store.Store
}

func (s tracedStore) log(began time.Time, cpu0 float64, q string) {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 140 {
		q = q[:140]
	}
	fmt.Fprintf(os.Stderr, "TRACE %6.3f s %6.3f cpu-s  %s\n", time.Since(began).Seconds(), processCPU()-cpu0, q)
}

// processCPU is the CPU time of the process so far, in seconds: the
// embedded engine's threads included.
func processCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func (s tracedStore) Exec(ctx context.Context, q string, opts ...store.Option) error {
	defer s.log(time.Now(), processCPU(), q)
	return s.Store.Exec(ctx, q, opts...)
}

func (s tracedStore) Insert(ctx context.Context, table string, cols proto.Input, opts ...store.Option) error {
	defer s.log(time.Now(), processCPU(), "INSERT "+table)
	return s.Store.Insert(ctx, table, cols, opts...)
}

func (s tracedStore) Query(ctx context.Context, q string, fn func(store.Block) error, opts ...store.Option) error {
	defer s.log(time.Now(), processCPU(), q)
	return s.Store.Query(ctx, q, fn, opts...)
}
