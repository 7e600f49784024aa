package perf

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/capture/internal/capturetest"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkPerfFlightRecorder arms the default perf profile (99 Hz
// cpu-clock and every sched_switch, with call graphs) while the test
// server takes about 500 requests/s, then fires it on slow requests.
//
//	capture.perf_armed_cpu_pct       % of one core: the perf process's CPU while armed
//	                                 plus the extra CPU the same load costs while armed
//	                                 (the kernel's sampling work is charged to the
//	                                 tasks it samples); alternating 5 s phases
//	capture.perf_armed_system_delta_pct  the machine's busy share armed minus not
//	                                 armed (noisy on a shared machine)
//	capture.fire_to_dump_ms          slow request's end → pre-window dump on disk, median
//	capture.lost_events              lost + overrun events over those captures
func BenchmarkPerfFlightRecorder(b *testing.B) {
	e, rs := perfEngine(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv := capturetest.StartSlowServer(b, e.Observe)
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	go srv.Load(lctx, 500)
	time.Sleep(time.Second)

	const phase = 5 * time.Second
	var armedPct, deltaPct, perfOwn, workDelta []float64
	var fireToDump []float64
	var lost uint64
	for i := range max(b.N, 5) {
		// Not armed: the machine's busy CPU, and this process's (the
		// server and its load), under the same load.
		self0 := selfCPU()
		idleBusy := systemBusy(b, phase)
		selfIdle := selfCPU() - self0

		id := "bench-" + strconv.Itoa(i)
		spec := capture.Spec{ID: id, Backend: capture.Perf, Pre: 2 * time.Second, Post: 500 * time.Millisecond,
			Trigger: capture.Trigger{Service: "web", Latency: 500 * time.Millisecond, Cooldown: time.Minute}}
		if _, err := e.Arm(ctx, spec); err != nil {
			b.Fatal(err)
		}
		pid := rs.pid(id)
		t0, self0 := procCPU(b, pid), selfCPU()
		start := time.Now()
		armedBusy := systemBusy(b, phase)
		wall := time.Since(start).Seconds()
		perfPct := 100 * (procCPU(b, pid) - t0).Seconds() / wall
		// The kernel writes samples and switch records in the context of
		// the task it interrupts: that cost shows as more CPU for the
		// same load in this process.
		workPct := 100 * (selfCPU() - self0 - selfIdle).Seconds() / wall
		perfOwn = append(perfOwn, perfPct)
		workDelta = append(workDelta, workPct)
		armedPct = append(armedPct, perfPct+workPct)
		deltaPct = append(deltaPct, 100*(armedBusy-idleBusy))

		srv.Get(b, "/slow")
		st, err := e.Wait(ctx, id)
		if err != nil || st.State != control.Collected {
			b.Fatalf("capture %s: %v %s %s", id, err, st.State, st.Error)
		}
		fireToDump = append(fireToDump, float64(st.FireToDump)/1e6)
		lost += st.Metadata.Lost + st.Metadata.Overruns
		os.RemoveAll(st.Location)
		e.Forget(id)
	}
	b.ReportMetric(median(armedPct), "capture.perf_armed_cpu_pct:%")
	b.ReportMetric(median(deltaPct), "capture.perf_armed_system_delta_pct:%")
	b.ReportMetric(median(fireToDump), "capture.fire_to_dump_ms:ms")
	b.ReportMetric(float64(lost), "capture.lost_events:events")
	b.Logf("armed cpu %.2f %% (perf process %.2f, load's extra %.2f), machine delta %.1f %%, fire→dump %.0f ms",
		armedPct, perfOwn, workDelta, deltaPct, fireToDump)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// procCPU is a process's CPU time in nanoseconds from schedstat (the
// USER_HZ ticks of /proc/PID/stat are too coarse for a process that runs
// a few milliseconds a second). perf record is single-threaded.
func procCPU(t testing.TB, pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		t.Fatal(err)
	}
	ns, _ := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
	return time.Duration(ns)
}

// selfCPU is this process's user+system time.
func selfCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// systemBusy is the machine's busy share of all CPUs over d.
func systemBusy(t testing.TB, d time.Duration) float64 {
	busy0, total0 := cpuTimes(t)
	time.Sleep(d)
	busy1, total1 := cpuTimes(t)
	return float64(busy1-busy0) / float64(total1-total0)
}

func cpuTimes(t testing.TB) (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseUint(f, 10, 64)
		if i >= 8 { // guest time is already in user
			break
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// BenchmarkPerfCaptureExplain is the node-side analysis of a default-profile
// capture with 30 s of pre-window, taken while the test server takes about
// 500 requests/s (the load of BenchmarkPerfFlightRecorder), which goes on
// during the analysis:
//
//	capture.explain_s        Analyze's wall time: perf script over the dumps,
//	                         the verdicts, the folded stacks and pprof files
//	capture.explain_cpu_pct  % of one core while it runs: its perf script
//	                         children plus this process's CPU above what the
//	                         load alone costs it
//	capture.explain_events   scheduler events and samples the analysis read
func BenchmarkPerfCaptureExplain(b *testing.B) {
	profiles, err := capture.NewProfiles()
	if err != nil {
		b.Fatal(err)
	}
	be := New(Config{Profiles: profiles})
	if err := be.Check(); err != nil || os.Geteuid() != 0 {
		testenv.RequirePrivileged(b, "perf as root", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var reqs []record.RequestRecord
	var mu sync.Mutex
	srv := capturetest.StartSlowServer(b, func(q *telemetry.Request) {
		if q.Duration > 100*time.Millisecond {
			mu.Lock()
			reqs = append(reqs, record.RequestRecord{Start: q.Start, End: q.Start.Add(q.Duration), LatencyMS: float64(q.Duration) / 1e6,
				Service: q.Service, Endpoint: q.Endpoint, ThreadID: q.ThreadID, Weight: 1})
			mu.Unlock()
		}
	})
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	go srv.Load(lctx, 500)

	var took, cpuPct, events []float64
	for i := range max(b.N, 3) {
		dir := b.TempDir()
		spec := capture.Spec{ID: "explain-" + strconv.Itoa(i), Backend: capture.Perf, Pre: 30 * time.Second, Post: time.Second}
		rec, err := be.New(spec, dir)
		if err != nil {
			b.Fatal(err)
		}
		if err := rec.Arm(ctx); err != nil {
			b.Fatal(err)
		}
		armed := time.Now()
		time.Sleep(29 * time.Second)
		srv.Get(b, "/slow")
		if err := rec.Fire(ctx); err != nil {
			b.Fatal(err)
		}
		time.Sleep(spec.Post)
		res, err := rec.Collect(ctx)
		if err != nil {
			b.Fatal(err)
		}
		md := &record.Metadata{ID: spec.ID, Clock: res.Clock, Lost: res.Lost}
		// What the load alone costs this process, just before.
		s0, w0 := selfCPU(), time.Now()
		time.Sleep(2 * time.Second)
		loadRate := float64(selfCPU()-s0) / float64(time.Since(w0))

		// The requests of this capture's window, as the engine would give.
		var window []record.RequestRecord
		mu.Lock()
		for _, q := range reqs {
			if q.Start.After(armed) {
				window = append(window, q)
			}
		}
		mu.Unlock()
		in := capture.AnalysisInput{Metadata: md, Requests: window, Threshold: 500 * time.Millisecond}
		c0, s1, start := childCPU(), selfCPU(), time.Now()
		out, err := rec.(capture.Analyzer).Analyze(ctx, in)
		wall := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		used := float64(childCPU()-c0) + max(float64(selfCPU()-s1)-loadRate*float64(wall), 0)
		took = append(took, wall.Seconds())
		cpuPct = append(cpuPct, 100*used/float64(wall))
		var a explain.Analysis
		if raw, err := os.ReadFile(filepath.Join(dir, ExplainFile)); err == nil && json.Unmarshal(raw, &a) == nil {
			events = append(events, float64(a.Events))
			if len(a.Requests) > 0 {
				b.Logf("run %d: %d events, %d samples, verdict: %s", i, a.Events, a.Samples, a.Requests[0].Verdict)
			}
		}
		b.Logf("run %d: analysis %v, %.0f%% of a core, files %v", i, wall.Round(time.Millisecond), cpuPct[len(cpuPct)-1], out.Files)
	}
	b.ReportMetric(median(took), "capture.explain_s:s")
	b.ReportMetric(median(cpuPct), "capture.explain_cpu_pct:%")
	b.ReportMetric(median(events), "capture.explain_events:events")
}

// childCPU is the user+system time of this process's waited-for children.
func childCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
