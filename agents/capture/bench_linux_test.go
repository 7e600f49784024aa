package capture

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkPerfFlightRecorder arms the default perf profile (99 Hz
// cpu-clock and every sched_switch, with call graphs) while the test
// server takes about 500 requests/s, then fires it on slow requests.
//
//	capture.perf_armed_cpu_pct       CPU of the perf process while armed, % of one core
//	capture.perf_armed_system_delta_pct  machine-wide busy CPU armed minus not armed
//	                                 (alternating 5 s phases; the kernel's share of
//	                                 sampling is charged to the sampled tasks)
//	capture.fire_to_dump_ms          slow request's end → pre-window dump on disk, median
//	capture.lost_events              lost + overrun events over those captures
func BenchmarkPerfFlightRecorder(b *testing.B) {
	e := perfEngine(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv := startSlowServer(b, e.Observe)
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	go srv.load(lctx, 500)
	time.Sleep(time.Second)

	const phase = 5 * time.Second
	var armedPct, deltaPct []float64
	var fireToDump []float64
	var lost uint64
	for i := range max(b.N, 3) {
		// Not armed: the machine's busy CPU under the same load.
		idleBusy := systemBusy(b, phase)

		id := "bench-" + strconv.Itoa(i)
		spec := Spec{ID: id, Backend: Perf, Pre: 2 * time.Second, Post: 500 * time.Millisecond,
			Trigger: Trigger{Service: "web", Latency: 500 * time.Millisecond, Cooldown: time.Minute}}
		if _, err := e.Arm(ctx, spec); err != nil {
			b.Fatal(err)
		}
		pid := e.caps[id].rec.(*perfRecorder).cmd.Process.Pid
		t0 := procCPU(b, pid)
		start := time.Now()
		armedBusy := systemBusy(b, phase)
		armedPct = append(armedPct, 100*(procCPU(b, pid)-t0).Seconds()/time.Since(start).Seconds())
		deltaPct = append(deltaPct, 100*(armedBusy-idleBusy))

		srv.get(b, "/slow")
		st, err := e.Wait(ctx, id)
		if err != nil || st.State != Collected {
			b.Fatalf("capture %s: %v %s %s", id, err, st.State, st.Error)
		}
		fireToDump = append(fireToDump, float64(st.FireToDump)/1e6)
		lost += st.Metadata.Lost + st.Metadata.Overruns
		os.RemoveAll(st.Location)
		e.Forget(id)
	}
	b.ReportMetric(median(armedPct), "perf_armed_cpu_pct")
	fmt.Printf("BENCH capture.perf_armed_cpu_pct %.2f %%\n", median(armedPct))
	fmt.Printf("BENCH capture.perf_armed_system_delta_pct %.2f %%\n", median(deltaPct))
	fmt.Printf("BENCH capture.fire_to_dump_ms %.1f ms\n", median(fireToDump))
	fmt.Printf("BENCH capture.lost_events %d\n", lost)
	b.Logf("armed cpu %v %%, system delta %v %%, fire→dump %v ms", armedPct, deltaPct, fireToDump)
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

// procCPU is a process's user+system time.
func procCPU(t testing.TB, pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
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
