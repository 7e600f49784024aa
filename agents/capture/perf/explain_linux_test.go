package perf

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/capture/internal/capturetest"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// readAnalysis reads the explain.json a collected capture holds.
func readAnalysis(t *testing.T, st control.Status) explain.Analysis {
	t.Helper()
	if _, ok := st.Metadata.FileNamed(ExplainFile); !ok {
		t.Fatalf("the artifact has no %s: files %v, notes %q", ExplainFile, st.Metadata.Files, st.Metadata.Notes)
	}
	b, err := os.ReadFile(filepath.Join(st.Location, ExplainFile))
	if err != nil {
		t.Fatal(err)
	}
	var a explain.Analysis
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// A request whose thread sleeps 1 s in nanosleep: the capture's analysis,
// made on this node from perf's own trace, names that thread, finds it
// blocked about a second with a chain through the sleep, woken by its
// timer. The request is sleep(1), a process of its own beside the test
// server's load: a Go thread can be parked by the runtime in futex around
// its syscall, which the trace would rightly show instead.
func TestPerfAnalysisSaysTheSlowRequestsThreadBlockedInNanosleep(t *testing.T) {
	e, _ := perfEngineGoverned(t, capture.GovernConfig{Nice: 10})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := capturetest.StartSlowServer(t, e.Observe)
	// A trace that lost events may lack the blocking switch's chain, and
	// the verdict then says so; on a machine loaded by the rest of make
	// test that happens, so a capture with losses and no chain is taken
	// again, up to three times. Without losses, a missing chain fails.
	var (
		st   control.Status
		slow telemetry.Request
		a    explain.Analysis
	)
	for attempt := 1; ; attempt++ {
		spec := capture.Spec{ID: fmt.Sprintf("explain-sleep-%d", attempt), Backend: capture.Perf, Pre: 2 * time.Second, Post: 500 * time.Millisecond, RingKB: 32 << 10,
			Trigger: capture.Trigger{Service: "web", Latency: 500 * time.Millisecond, Cooldown: time.Minute}}
		if _, err := e.Arm(ctx, spec); err != nil {
			t.Fatal(err)
		}
		lctx, lcancel := context.WithCancel(ctx)
		go srv.Load(lctx, 100)
		time.Sleep(300 * time.Millisecond)
		sleeper := exec.Command("/bin/sleep", "1")
		start := time.Now()
		if err := sleeper.Start(); err != nil {
			t.Fatal(err)
		}
		sleeper.Wait()
		slow = telemetry.Request{Service: "web", Endpoint: "/slow", Start: start, Duration: time.Since(start),
			Status: "200", ThreadID: uint32(sleeper.Process.Pid), Weight: 1}
		e.Observe(&slow)
		var err error
		st, err = e.Wait(ctx, spec.ID)
		lcancel()
		if err != nil || st.State != control.Collected {
			t.Fatalf("capture %v: %s %v", st.State, st.Error, err)
		}
		a = readAnalysis(t, st)
		if len(a.Requests) == 0 {
			t.Fatalf("no request explained; analysis %+v", a)
		}
		if a.Requests[0].BlockingCall != "" || a.Lost == 0 || attempt == 3 {
			break
		}
		t.Logf("attempt %d: the trace lost %d events and the blocking chain with them (%s); again", attempt, a.Lost, a.Requests[0].Verdict)
		e.Forget(spec.ID)
	}
	v := a.Requests[0]
	t.Logf("verdict: %s", v.Verdict)
	t.Logf("segments: %+v", v.Segments)
	if v.Request.ThreadID != slow.ThreadID || v.Request.Endpoint != "/slow" {
		t.Fatalf("the slowest request explained is %+v, want the /slow one on thread %d", v.Request, slow.ThreadID)
	}
	if v.Blocked < 900*time.Millisecond || v.Blocked > 1100*time.Millisecond {
		t.Errorf("blocked %v, want about 1 s", v.Blocked)
	}
	if !strings.Contains(v.BlockingCall, "nanosleep") || !strings.Contains(strings.Join(v.BlockedIn, " "), "nanosleep") {
		t.Errorf("blocking call %q in %v, want the nanosleep", v.BlockingCall, v.BlockedIn)
	}
	if v.WokenBy != "its timer" {
		t.Errorf("woken by %q, want its timer", v.WokenBy)
	}
	if !strings.Contains(v.Thread, "[") || !strings.HasPrefix(v.Verdict, "blocked ") || !strings.Contains(v.Verdict, "nanosleep") {
		t.Errorf("verdict %q does not say where the thread blocked", v.Verdict)
	}
	if a.Samples == 0 || len(a.TopStacks) == 0 {
		t.Errorf("no on-CPU samples in the analysis: %+v", a)
	}
	folded, err := os.ReadFile(filepath.Join(st.Location, FoldedFile))
	if err != nil || len(folded) == 0 {
		t.Errorf("%s: %d bytes, %v", FoldedFile, len(folded), err)
	}
	// The pprof profile opens in go tool pprof and holds every sample
	// perf took in the window.
	out, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=samples", filepath.Join(st.Location, ProfileFile)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("of %d total", a.Samples)) {
		t.Errorf("go tool pprof -top %s: %v, want %d samples in all:\n%s", ProfileFile, err, a.Samples, out)
	}
	if _, ok := st.Metadata.FileNamed(StallProfileFile); !ok {
		t.Errorf("no %s in %v", StallProfileFile, st.Metadata.Files)
	}
	// The artifact's own report, sealed with the rest: the verdict under
	// its heading, the thread's timeline (mostly blocked) and the flame
	// graph of every sample.
	f, ok := st.Metadata.FileNamed(explain.ReportFile)
	if !ok || len(f.SHA256) != 64 {
		t.Fatalf("no sealed %s in %v", explain.ReportFile, st.Metadata.Files)
	}
	page, err := os.ReadFile(filepath.Join(st.Location, explain.ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	h := string(page)
	if !strings.Contains(h, html.EscapeString(v.Verdict)) || !strings.Contains(h, `aria-label="thread timeline of `+html.EscapeString(v.Thread)+`"`) {
		t.Errorf("%s does not name %s with its verdict %q", explain.ReportFile, v.Thread, v.Verdict)
	}
	var blockedPx, barPx float64
	for _, m := range regexp.MustCompile(`<rect class="seg (\S+)" x="[\d.]+" y="\d+" width="([\d.]+)"`).FindAllStringSubmatch(strings.SplitN(h, `class="timeline"`, 3)[1], -1) {
		w, _ := strconv.ParseFloat(m[2], 64)
		barPx += w
		if m[1] == "blocked" {
			blockedPx += w
		}
	}
	if barPx == 0 || blockedPx/barPx < 0.8 {
		t.Errorf("the slowest request's timeline is %.0f of %.0f px blocked, want most of it", blockedPx, barPx)
	}
	// The flame graph draws the samples that were not idle, its root
	// holding all of them; the idle task's share is a line beside it.
	root := regexp.MustCompile(`<title>all: (\d+) samples, 100\.0%</title>`).FindStringSubmatch(h)
	switch n := 0; {
	case root == nil && !strings.Contains(h, "idle (swapper) 100.0% of samples"):
		t.Errorf("%s has no flame graph of the %d samples, and does not say they were all idle", explain.ReportFile, a.Samples)
	case root != nil:
		n, _ = strconv.Atoi(root[1])
		if n < 1 || n > int(a.Samples) {
			t.Errorf("%s's flame graph holds %d samples, want 1 to the capture's %d", explain.ReportFile, n, a.Samples)
		}
	}
}

// A request whose thread is runnable but starved: a real-time CPU hog
// (SCHED_FIFO) pinned to the same CPU takes all of it the kernel lets
// real-time tasks take (95% of each second), so the request's few ms of
// work wait most of a second, whatever else the machine runs. The verdict
// is "runnable, behind" the hog, named. The recorders run at nice 10
// without the idle IO class here: a dump at the idle class waits for a
// disk the rest of make test keeps busy.
func TestPerfAnalysisSaysTheStarvedRequestWaitedBehindTheHog(t *testing.T) {
	e, _ := perfEngineGoverned(t, capture.GovernConfig{Nice: 10})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cpu := runtime.NumCPU() - 1

	// Armed first: perf, at the engine's nice 10, enables its events by
	// running on each CPU in turn, and would wait behind the hog. A ring
	// of 16 MiB per CPU holds the second or so of the request; perf at
	// nice 10 on a loaded machine takes seconds to write a bigger one.
	spec := capture.Spec{ID: "explain-hog", Backend: capture.Perf, Pre: 8 * time.Second, Post: 500 * time.Millisecond, RingKB: 16 << 10,
		Trigger: capture.Trigger{Service: "web", Latency: 300 * time.Millisecond, Cooldown: time.Minute}}
	if _, err := e.Arm(ctx, spec); err != nil {
		t.Fatal(err)
	}

	// The hog: a shell loop whose command name is cpuhog (the name of
	// the link it runs through), pinned and real-time.
	dir := t.TempDir()
	hogPath := filepath.Join(dir, "cpuhog")
	if err := os.Symlink("/bin/sh", hogPath); err != nil {
		t.Fatal(err)
	}
	hog := exec.Command(hogPath, "-c", "while :; do :; done")
	hog.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hog.Process.Kill(); hog.Wait() })
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(hog.Process.Pid, &set); err != nil {
		t.Fatal(err)
	}
	if err := unix.SchedSetAttr(hog.Process.Pid, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: 1}, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)

	// The request: a single-threaded process (its thread is the whole
	// request, as an app's handler thread would be, and no language
	// runtime parks it), started on the hog's CPU at nice 0, counting to
	// 150,000 in shell arithmetic (some 120 ms of CPU alone: more than the
	// 5% of each second the kernel keeps for other tasks beside a
	// real-time one).
	done := make(chan telemetry.Request)
	go func() {
		runtime.LockOSThread() // the child inherits this thread's CPU mask
		defer runtime.UnlockOSThread()
		var all unix.CPUSet
		unix.SchedGetaffinity(0, &all)
		unix.SchedSetaffinity(0, &set)
		work := exec.Command("/bin/sh", "-c", "i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done")
		start := time.Now()
		err := work.Start()
		unix.SchedSetaffinity(0, &all)
		if err != nil {
			t.Error(err)
			close(done)
			return
		}
		work.Wait()
		done <- telemetry.Request{Service: "web", Endpoint: "/starved", Start: start, Duration: time.Since(start),
			Status: "200", ThreadID: uint32(work.Process.Pid), Weight: 1}
	}()
	q := <-done
	// The hog has done its part: the dump and the analysis that follow
	// run at nice 10 and would wait behind it too.
	hog.Process.Kill()
	e.Observe(&q)
	t.Logf("the starved request took %v on thread %d", q.Duration, q.ThreadID)
	if q.Duration < 300*time.Millisecond {
		t.Fatalf("the request took %v: the hog did not starve it (is CPU %d shared with something else?)", q.Duration, cpu)
	}
	st, err := e.Wait(ctx, spec.ID)
	if err != nil || st.State != control.Collected {
		t.Fatalf("capture %v: %s %v", st.State, st.Error, err)
	}
	a := readAnalysis(t, st)
	if len(a.Requests) == 0 {
		t.Fatalf("no request explained; analysis %+v", a)
	}
	v := a.Requests[0]
	t.Logf("verdict: %s", v.Verdict)
	if v.Request.ThreadID != q.ThreadID {
		t.Fatalf("explained %+v, want thread %d", v.Request, q.ThreadID)
	}
	if v.Runnable < q.Duration/2 || v.Runnable < v.OnCPU || v.Runnable < v.Blocked {
		t.Errorf("runnable %v, on CPU %v, blocked %v of %v: want mostly runnable", v.Runnable, v.OnCPU, v.Blocked, q.Duration)
	}
	if len(v.RunnableBehind) == 0 {
		t.Logf("segments %+v; request %v … %v, clock offset %v", v.Segments, q.Start, q.Start.Add(q.Duration), st.Metadata.Clock.Offset)
		// What the trace holds on that CPU during the request.
		for _, f := range st.Metadata.Files {
			if !strings.HasPrefix(f.Name, "perf.data") {
				continue
			}
			out, _ := exec.Command("perf", "script", "-i", filepath.Join(st.Location, f.Name), "--ns", "-F", "comm,tid,cpu,time,event").Output()
			from, to := q.Start.Add(-st.Metadata.Clock.Offset), q.Start.Add(q.Duration).Add(-st.Metadata.Clock.Offset)
			counts := map[string]int{}
			for line := range strings.Lines(string(out)) {
				fields := strings.Fields(line)
				for i, fld := range fields {
					if strings.HasPrefix(fld, "[") && i+2 < len(fields) {
						ts, ok := perfScriptTime(fields[i+1])
						at := time.Unix(0, int64(ts))
						counts["all "+fld]++
						if ok && !at.Before(time.Unix(0, from.UnixNano())) && at.Before(time.Unix(0, to.UnixNano())) {
							counts[fld+" "+fields[i+2]]++
						}
						break
					}
				}
			}
			t.Logf("%s: events in the request's time by CPU, task and event: %v", f.Name, counts)
		}
	}
	if len(v.RunnableBehind) == 0 || !strings.HasPrefix(v.RunnableBehind[0].Who, "cpuhog[") || v.RunnableCPU != int32(cpu) {
		t.Errorf("runnable behind %+v on CPU %d, want cpuhog on CPU %d", v.RunnableBehind, v.RunnableCPU, cpu)
	}
	if !strings.HasPrefix(v.Verdict, "runnable ") || !strings.Contains(v.Verdict, "behind cpuhog[") {
		t.Errorf("verdict %q does not name the hog", v.Verdict)
	}
}
