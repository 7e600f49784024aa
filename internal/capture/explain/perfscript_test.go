package explain

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// script is perf script text as perf 6.1 writes it with ScriptFields and
// --ns: a thread (web, 4242) preempted, run again, blocking in nanosleep
// (the switch twice: without and with its chain), woken by the timer in
// the idle task's context, and a sample of a hog with a stack.
const script = `         web  4242 [001] 100.000000000: sched:sched_switch: prev_comm=web prev_pid=4242 prev_prio=120 prev_state=R+ ==> next_comm=cpu hog next_pid=77 next_prio=100 ffffffff821f8b58 __schedule ([kernel.kallsyms])
     cpu hog    77 [001] 100.005000000: cpu-clock/freq=99/: 
	          401000 spin (/usr/bin/hog)
	          401100 main (/usr/bin/hog)

     cpu hog    77 [001] 100.300000000: sched:sched_switch: prev_comm=cpu hog prev_pid=77 prev_prio=100 prev_state=R ==> next_comm=web next_pid=4242 next_prio=120 ffffffff821f8b58 __schedule ([kernel.kallsyms])
         web  4242 [001] 100.400000000: sched:sched_switch: prev_comm=web prev_pid=4242 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120 ffffffff821f8b58 __schedule ([kernel.kallsyms])
web  4242 [001] 100.400003000: sched:sched_switch: prev_comm=web prev_pid=4242 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
	ffffffff821f8b58 __schedule ([kernel.kallsyms])
	ffffffff821f94c3 schedule ([kernel.kallsyms])
	ffffffff8220043e do_nanosleep ([kernel.kallsyms])
	ffffffff8141fcd4 hrtimer_nanosleep ([kernel.kallsyms])
	ffffffff8141fdfd __x64_sys_nanosleep ([kernel.kallsyms])
	           cf503 clock_nanosleep@GLIBC_2.2.5 (/usr/lib/x86_64-linux-gnu/libc.so.6)
	               0 [unknown] ([unknown])

       :-1    -1 [000] 100.500000000: sched:sched_switch: prev_comm=go prev_pid=9 prev_prio=120 prev_state=X ==> next_comm=swapper/0 next_pid=0 next_prio=120
     swapper     0 [001] 101.400000000: sched:sched_wakeup: comm=web pid=4242 prio=120 target_cpu=001 ffffffff813a83e5 ttwu_do_activate ([kernel.kallsyms])
     swapper     0 [001] 101.400010000: sched:sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=web next_pid=4242 next_prio=120 ffffffff821f8b58 __schedule ([kernel.kallsyms])
`

func parsed(t *testing.T) *Trace {
	t.Helper()
	tr, err := Parse(strings.NewReader(script), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	tr.SortEvents()
	return tr
}

func TestParseReadsSwitchesWakeupsSamplesAndTheirChains(t *testing.T) {
	tr := parsed(t)
	if len(tr.Events) != 7 {
		t.Fatalf("%d events, want 7 (the thread-less one skipped): %+v", len(tr.Events), tr.Events)
	}
	sw := tr.Events[0]
	if sw.Kind != KindSwitch || sw.Task != (Task{"web", 4242}) || sw.Next != (Task{"cpu hog", 77}) || sw.PrevState != "R+" || sw.CPU != 1 || sw.T != 100e9 {
		t.Errorf("first switch %+v", sw)
	}
	sample := tr.Events[1]
	if sample.Kind != KindSample || sample.Task.Comm != "cpu hog" || sample.Stack < 0 || tr.Stacks[sample.Stack][0] != "spin" {
		t.Errorf("sample %+v", sample)
	}
	blocked := tr.Events[4]
	if blocked.Stack < 0 || tr.Stacks[blocked.Stack][2] != "do_nanosleep" || tr.Stacks[blocked.Stack][6] != "[unknown]" {
		t.Errorf("blocking switch %+v, chain %v", blocked, tr.Stacks)
	}
	if w := tr.Events[5]; w.Kind != KindWakeup || w.Target.TID != 4242 || w.Task.TID != 0 {
		t.Errorf("wakeup %+v", w)
	}
}

func TestTimelineAndVerdictOfABlockedThenRunnableThread(t *testing.T) {
	tr := parsed(t)
	clock := record.Clock{Name: "CLOCK_MONOTONIC", Offset: time.Unix(1_800_000_000, 0).Sub(time.Unix(0, 0))}
	wall := func(ns int64) time.Time { return time.Unix(0, ns+int64(clock.Offset)) }
	q := record.RequestRecord{Start: wall(99.9e9), End: wall(101.45e9), LatencyMS: 1550, ThreadID: 4242, Endpoint: "/checkout"}
	v := tr.ExplainRequest(q, clock)
	// On CPU 99.9–100.0, 100.3–100.4 and 101.40001–101.45; runnable
	// 100.0–100.3 behind the hog and 10 µs after the wakeup; blocked from
	// the switch at 100.4 (recorded twice) to the wakeup at 101.4.
	if v.OnCPU != 249990*time.Microsecond || v.Runnable != 300010*time.Microsecond || v.Blocked != time.Second {
		t.Errorf("on CPU %v, runnable %v, blocked %v", v.OnCPU, v.Runnable, v.Blocked)
	}
	if v.BlockingCall != "do_nanosleep" || v.WokenBy != "its timer" || v.Thread != "web[4242]" {
		t.Errorf("%+v", v)
	}
	want := "blocked 1.00 s in do_nanosleep (stack do_nanosleep ← hrtimer_nanosleep ← __x64_sys_nanosleep ← clock_nanosleep@GLIBC_2.2.5); woken by its timer; 1.55 s of the request on web[4242]: on CPU 250 ms, runnable 300 ms, blocked 1.00 s"
	if !strings.HasPrefix(v.Verdict, want) {
		t.Errorf("verdict\n%s\nwant prefix\n%s", v.Verdict, want)
	}

	// The first 300 ms of the request alone: runnable behind the hog.
	q.End = wall(100.3e9)
	v = tr.ExplainRequest(q, clock)
	if !strings.HasPrefix(v.Verdict, "runnable 300 ms behind cpu hog[77] on CPU 1") {
		t.Errorf("verdict %q", v.Verdict)
	}
}

func TestFoldedStacksAreRootFirstWithTheTaskOnTop(t *testing.T) {
	got := parsed(t).Folded()
	if len(got) != 1 || got[0].Stack != "cpu_hog;main;spin" || got[0].Samples != 1 {
		t.Errorf("folded %+v", got)
	}
}

func TestParseRefusesWhatIsNotPerfScriptAndBoundsWhatItKeeps(t *testing.T) {
	for _, in := range []string{
		"\tffffffff821f8b58 __schedule\n",
		"hello world\n",
		"web 4242 [x] 1.0: sched:sched_switch: prev_state=S\n",
		"web 4242 [001] 1.0: sched:sched_switch: prev_comm=web prev_pid=4242\n",
		"web 4242 [001] 99999999999.0: cpu-clock: \n",
	} {
		if _, err := Parse(strings.NewReader(in), Limits{}); !errors.Is(err, ErrSyntax) {
			t.Errorf("%q: %v, want ErrSyntax", in, err)
		}
	}
	tr, err := Parse(strings.NewReader(script), Limits{MaxEvents: 2, MaxFrames: 1})
	if err != nil || len(tr.Events) != 2 || tr.Truncated == "" || len(tr.Stacks[0]) != 1 {
		t.Errorf("limited: %d events, truncated %q, stacks %v, %v", len(tr.Events), tr.Truncated, tr.Stacks, err)
	}
	if _, err := Parse(strings.NewReader(strings.Repeat("x", 200)+"\n"), Limits{MaxLine: 100}); !errors.Is(err, ErrSyntax) {
		t.Errorf("a long line: %v", err)
	}
}

// FuzzParse: any text gives a trace or an error wrapping ErrSyntax, never
// a panic, and whatever it parsed explains a request without one.
func FuzzParse(f *testing.F) {
	f.Add(script)
	f.Add("web 1 [000] 1.5: sched:sched_wakeup: comm=a pid=2 prio=1 target_cpu=000\n")
	f.Fuzz(func(t *testing.T, s string) {
		tr, err := Parse(strings.NewReader(s), Limits{MaxEvents: 1000, MaxLine: 4096})
		if err != nil && !errors.Is(err, ErrSyntax) {
			t.Fatalf("error %v does not wrap ErrSyntax", err)
		}
		tr.SortEvents()
		q := record.RequestRecord{Start: time.Unix(0, 0), End: time.Unix(1000, 0), LatencyMS: 1e6, ThreadID: 4242}
		_ = tr.ExplainRequest(q, record.Clock{})
		_ = tr.Folded()
	})
}

func TestAnalysisStatesLostEventsNextToEveryVerdict(t *testing.T) {
	tr := parsed(t)
	clock := record.Clock{Name: "CLOCK_MONOTONIC"}
	q := func(start, end float64, tid uint32) record.RequestRecord {
		return record.RequestRecord{Start: time.Unix(0, int64(start*1e9)), End: time.Unix(0, int64(end*1e9)),
			LatencyMS: (end - start) * 1000, ThreadID: tid}
	}
	reqs := []record.RequestRecord{q(99.9, 101.45, 4242), q(100.0, 100.3, 4242), q(100.0, 100.001, 4242)}
	md := &record.Metadata{Clock: clock, Lost: 7, Overruns: 2}
	a := Analyze(tr, md, reqs, 250*time.Millisecond)
	if len(a.Requests) != 2 || a.Requests[0].Request.LatencyMS < a.Requests[1].Request.LatencyMS {
		t.Fatalf("explained %d requests, want the 2 at or above 250 ms, slowest first", len(a.Requests))
	}
	if a.Lost != 9 || !strings.Contains(a.LostNote, "lost 9 events") {
		t.Errorf("lost %d, note %q", a.Lost, a.LostNote)
	}
	for _, v := range a.Requests {
		if !strings.HasSuffix(v.Verdict, "[9 events lost in this capture]") {
			t.Errorf("verdict %q does not say events were lost", v.Verdict)
		}
	}
	md.Lost, md.Overruns = 0, 0
	for _, v := range Analyze(tr, md, reqs, 250*time.Millisecond).Requests {
		if strings.Contains(v.Verdict, "lost") {
			t.Errorf("verdict %q speaks of losses in a capture without any", v.Verdict)
		}
	}
}

// The profile opens in go tool pprof, and its total is the trace's
// sample count.
func TestProfileOpensInGoToolPprofWithEverySample(t *testing.T) {
	tr := parsed(t)
	// A second sample of web, a stack of its own.
	more, err := Parse(strings.NewReader("web 4242 [000] 100.1: cpu-clock/freq=99/: \n\t 1 handle (/app)\n\t 2 main (/app)\n\nweb 4242 [000] 100.2: cpu-clock/freq=99/: \n\t 1 handle (/app)\n\t 2 main (/app)\n"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range more.Events {
		e.Stack = tr.intern(more.Stacks[e.Stack])
		tr.Events = append(tr.Events, e)
	}
	tr.SortEvents()
	path := filepath.Join(t.TempDir(), "profile.pb.gz")
	if err := os.WriteFile(path, tr.Profile(0, 0, 10_101_010), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=samples", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "of 3 total") || !regexp.MustCompile(`(?m)^\s+2\s+66\.67%.*handle$`).Match(out) {
		t.Errorf("pprof -top:\n%s", out)
	}
	out, err = exec.Command("go", "tool", "pprof", "-top", "-sample_index=cpu", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "of 30.30ms total") {
		t.Errorf("cpu time (3 × 10.1 ms): %v\n%s", err, out)
	}
	// The stall alone: the samples in [100.05 s, 100.15 s).
	if err := os.WriteFile(path, tr.Profile(100.05e9, 100.15e9, 10_101_010), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=samples", path).CombinedOutput(); err != nil || !strings.Contains(string(out), "of 1 total") {
		t.Errorf("the window's profile: %v\n%s", err, out)
	}
}
