package perf

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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
	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The everyday causes, each induced for real on this machine's kernel in
// cgroups the test makes and removes, caught by a real perf capture and
// explained on the node: the verdict must name the cause in the words an
// SRE acts on. Run them with
//
//	go test -count=1 -run 'TestPerfVerdict' ./agents/capture/perf

// testCgroups finds the hierarchies, or skips (fails under
// SPIKEHUNT_REQUIRE_PRIVILEGED=1) without them or root.
func testCgroups(t *testing.T) cgroupMounts {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "cgroups (root)", fmt.Errorf("running as uid %d", os.Geteuid()))
	}
	m, err := mountedCgroups()
	if err != nil {
		testenv.RequirePrivileged(t, "a cgroup hierarchy with the cpu controller", err)
	}
	return m
}

// makeCgroup makes /spikehunt-test-<name>-<pid> in a controller's
// hierarchy (the cpu one, or the memory one) and removes it at cleanup,
// after the processes in it are gone (register those after this). It
// returns the directory and the cgroup's path as /proc names it.
func makeCgroup(t *testing.T, m cgroupMounts, memory bool, name string) (dir, cgPath string) {
	t.Helper()
	mount, root := m.cpu, m.cpuRoot
	if memory {
		if m.memory == "" {
			testenv.RequirePrivileged(t, "the memory controller", errors.New("not mounted"))
		}
		mount, root = m.memory, m.memoryRoot
	}
	base := fmt.Sprintf("spikehunt-test-%s-%d", name, os.Getpid())
	dir = filepath.Join(mount, base)
	if err := os.Mkdir(dir, 0o755); err != nil {
		testenv.RequirePrivileged(t, "making a cgroup", err)
	}
	t.Cleanup(func() {
		// A cgroup is removable once its last task has exited.
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := os.Remove(dir)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("remove %s: %v", dir, err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	if root == "" || root == "/" {
		return dir, "/" + base
	}
	return dir, root + "/" + base
}

func writeCgroupFile(t *testing.T, dir, file, value string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		testenv.RequirePrivileged(t, "writing "+file, err)
	}
}

// requestProc is a process serving requests on one thread, one per line
// of its stdin, answering "done" (helper_linux_test.go, or a shell loop).
type requestProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	tid int
}

func startRequestProc(t *testing.T, cmd *exec.Cmd) *requestProc {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := &requestProc{cmd: cmd, in: in, out: bufio.NewReader(outPipe)}
	line, err := p.out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "tid ") {
		t.Fatalf("request process said %q, %v", line, err)
	}
	p.tid, _ = strconv.Atoi(strings.TrimSpace(line[4:]))
	return p
}

// startHelper starts the test binary as a request process.
func startHelper(t *testing.T) *requestProc {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), requestHelperEnv+"=1")
	return startRequestProc(t, cmd)
}

// spinner is a shell whose every request counts to its number in shell
// arithmetic: CPU work on one thread, with no language runtime to park
// it. work is the count that takes the CPU time asked of startSpinner on
// this machine.
type spinner struct {
	*requestProc
	work string
}

// startSpinner starts a spinner and calibrates it: the count that takes
// cpu of CPU time, from the fastest of three counts to 20,000 (CPUs
// differ tenfold in how fast a shell counts).
func startSpinner(t *testing.T, cpu time.Duration) spinner {
	t.Helper()
	p := startRequestProc(t, exec.Command("/bin/sh", "-c", `echo tid $$; while read n; do i=0; while [ $i -lt $n ]; do i=$((i+1)); done; echo done; done`))
	const probe = 20000
	fastest := time.Duration(math.MaxInt64)
	for range 3 {
		fastest = min(fastest, p.serve(t, "/calibrate", strconv.Itoa(probe)).Duration)
	}
	n := int(float64(probe) * cpu.Seconds() / fastest.Seconds())
	t.Logf("the spinner counts to %d in %v: %d is %v of CPU", probe, fastest, n, cpu)
	return spinner{p, strconv.Itoa(n)}
}

// join moves the process into a cgroup.
func (p *requestProc) join(t *testing.T, dir string) {
	t.Helper()
	writeCgroupFile(t, dir, "cgroup.procs", strconv.Itoa(p.cmd.Process.Pid))
}

// serve runs one request and returns it as the agent would see it.
func (p *requestProc) serve(t *testing.T, endpoint, req string) telemetry.Request {
	t.Helper()
	start := time.Now()
	if _, err := io.WriteString(p.in, req+"\n"); err != nil {
		t.Fatal(err)
	}
	line, err := p.out.ReadString('\n')
	d := time.Since(start)
	if err != nil || strings.TrimSpace(line) != "done" {
		t.Fatalf("request %q: %q, %v", req, line, err)
	}
	return telemetry.Request{Service: "web", Endpoint: endpoint, Start: start, Duration: d, Status: "200", ThreadID: uint32(p.tid), Weight: 1}
}

// explainCause arms a perf capture whose trigger is threshold, calls arm
// (if not nil), runs the request, calls served (if not nil), and returns
// the verdict of its thread. The request must reach the threshold: a
// cause that was not induced fails here, not in the verdict's assertions.
func explainCause(t *testing.T, id string, threshold time.Duration, run func() telemetry.Request, arm, served func()) explain.RequestVerdict {
	t.Helper()
	e, _ := perfEngineGoverned(t, capture.GovernConfig{Nice: 10})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	spec := capture.Spec{ID: id, Backend: capture.Perf, Pre: 4 * time.Second, Post: 500 * time.Millisecond, RingKB: 16 << 10,
		Trigger: capture.Trigger{Service: "web", Latency: threshold, Cooldown: time.Minute}}
	if _, err := e.Arm(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if arm != nil {
		arm()
	}
	time.Sleep(300 * time.Millisecond)
	q := run()
	if served != nil {
		served()
	}
	t.Logf("the request took %v on thread %d", q.Duration, q.ThreadID)
	if q.Duration < threshold {
		t.Fatalf("the request took %v, under the %v the cause should have made it take", q.Duration, threshold)
	}
	e.Observe(&q)
	st, err := e.Wait(ctx, spec.ID)
	if err != nil || st.State != control.Collected {
		t.Fatalf("capture %v: %s %v", st.State, st.Error, err)
	}
	a := readAnalysis(t, st)
	for _, n := range st.Metadata.Notes {
		if strings.HasPrefix(n, "cgroups:") {
			t.Log(n)
		}
	}
	for _, v := range a.Requests {
		if v.Request.ThreadID == q.ThreadID {
			t.Logf("verdict: %s", v.Verdict)
			if dir := os.Getenv(causeFixturesEnv); dir != "" {
				writeCauseFixture(t, dir, id, st, a, v)
			}
			return v
		}
	}
	t.Fatalf("no verdict for thread %d: %+v", q.ThreadID, a.Requests)
	return explain.RequestVerdict{}
}

// causeFixturesEnv names a directory where explainCause leaves each
// capture's fixture for explain's unit tests (explain/testdata/causes).
const causeFixturesEnv = "SPIKEHUNT_CAUSE_FIXTURES"

// writeCauseFixture cuts the capture's perf script text (explain's
// ScriptFields) to the request's time, ±50 ms, and to the events that
// name its thread or are timer samples (each CPU's occupant), as
// <id>.perf.txt; and writes what the verdict needs beside it, as
// <id>.json: the request, the clock, the cgroups it used and the verdict
// it gave.
func writeCauseFixture(t *testing.T, dir, id string, st control.Status, a explain.Analysis, v explain.RequestVerdict) {
	t.Helper()
	off := st.Metadata.Clock.Offset
	from, to := v.Request.Start.Add(-off-50*time.Millisecond).UnixNano(), v.Request.End.Add(-off+50*time.Millisecond).UnixNano()
	tid := strconv.Itoa(int(v.Request.ThreadID))
	// The header names a thread as "pid/tid", the fields as "pid=tid".
	named := regexp.MustCompile(`(^|[ =/])` + tid + `( |$)`)
	var out strings.Builder
	for _, f := range st.Metadata.Files {
		if !strings.HasPrefix(f.Name, "perf.data") {
			continue
		}
		text, err := exec.Command("perf", "script", "-i", filepath.Join(st.Location, f.Name), "--ns", "-F", explain.ScriptFields).Output()
		if err != nil {
			t.Fatal(err)
		}
		// An event is its header line and its chain's frames, one a
		// line, each beginning with a tab.
		var block []string
		flush := func() {
			if len(block) == 0 {
				return
			}
			head := block[0]
			m := scriptTime.FindStringSubmatch(head)
			at, ok := time.Duration(0), false
			if m != nil {
				at, ok = perfScriptTime(m[1])
			}
			if ok && int64(at) >= from && int64(at) < to && (strings.Contains(head, " cpu-clock") || named.MatchString(head)) {
				for _, l := range block {
					out.WriteString(l + "\n")
				}
				if len(block) > 1 {
					out.WriteString("\n")
				}
			}
			block = block[:0]
		}
		for line := range strings.Lines(string(text)) {
			line = strings.TrimRight(line, "\n")
			switch {
			case strings.TrimSpace(line) == "":
			case strings.HasPrefix(line, "\t"):
				if len(block) > 0 {
					block = append(block, line)
				}
			default:
				flush()
				block = append(block, line)
			}
		}
		flush()
	}
	if err := os.WriteFile(filepath.Join(dir, id+".perf.txt"), []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	verdict := v.Verdict // without the note of lost events: the unit test explains the request alone
	if i := strings.LastIndex(verdict, " ["); i >= 0 && strings.HasSuffix(verdict, " events lost in this capture]") {
		verdict = verdict[:i]
	}
	b, err := json.MarshalIndent(map[string]any{"request": v.Request, "clock": st.Metadata.Clock, "cgroups": a.Cgroups, "verdict": verdict}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, id+".json"), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

var scriptTime = regexp.MustCompile(` (\d+\.\d+): `)

// A thread in a cgroup with a quota of 10 ms per 100 ms that does some
// 50 ms of CPU work per request: it is throttled four or five times a
// request, runnable while its cgroup waits for the next period. The
// cgroup has ten times the default CPU shares (weight), so that on a
// machine whose other tasks keep the CPUs busy the quota, not their
// share of the CPU, is what holds it back.
func TestPerfVerdictNamesTheCPUQuotaThatThrottledTheRequest(t *testing.T) {
	m := testCgroups(t)
	dir, cg := makeCgroup(t, m, false, "throttled")
	if m.cpuV2 {
		writeCgroupFile(t, dir, "cpu.max", "10000 100000")
		writeCgroupFile(t, dir, "cpu.weight", "1000")
	} else {
		writeCgroupFile(t, dir, "cpu.cfs_period_us", "100000")
		writeCgroupFile(t, dir, "cpu.cfs_quota_us", "10000")
		writeCgroupFile(t, dir, "cpu.shares", "10240")
	}
	p := startSpinner(t, 50*time.Millisecond)
	p.join(t, dir)
	v := explainCause(t, "verdict-throttled", 250*time.Millisecond, func() telemetry.Request { return p.serve(t, "/throttled", p.work) }, nil, nil)
	t.Logf("throttling %+v", v.Throttled)
	if v.Throttled == nil || v.Throttled.Cgroup != cg || v.Throttled.Times == 0 {
		t.Fatalf("throttling %+v, want %s's", v.Throttled, cg)
	}
	want := "while its cgroup " + cg + " was CPU-throttled (quota 0.1 CPU: 10 ms per 100 ms;"
	if !strings.HasPrefix(v.Verdict, "runnable ") || !strings.Contains(v.Verdict, want) {
		t.Errorf("verdict %q, want runnable … %q", v.Verdict, want)
	}
}

// A request thread and a CPU hog, both pinned to one CPU, the hog in
// another cgroup with ten times the CPU shares (weight): the request
// waits behind the hog (first in line even on a machine whose other
// tasks keep that CPU busy: the hog's cgroup outweighs ten of them),
// which the verdict names with its cgroup.
func TestPerfVerdictNamesTheNoisyNeighbourAndItsCgroup(t *testing.T) {
	m := testCgroups(t)
	victimDir, victim := makeCgroup(t, m, false, "victim")
	hogDir, neighbour := makeCgroup(t, m, false, "neighbour")
	if m.cpuV2 {
		writeCgroupFile(t, hogDir, "cpu.weight", "1000")
		writeCgroupFile(t, victimDir, "cpu.weight", "100")
	} else {
		writeCgroupFile(t, hogDir, "cpu.shares", "10240")
		writeCgroupFile(t, victimDir, "cpu.shares", "1024")
	}
	cpu := runtime.NumCPU() - 1
	var set unix.CPUSet
	set.Set(cpu)
	p := startSpinner(t, 50*time.Millisecond)
	p.join(t, victimDir)
	if err := unix.SchedSetaffinity(p.cmd.Process.Pid, &set); err != nil {
		t.Fatal(err)
	}
	hogPath := filepath.Join(t.TempDir(), "noisyhog")
	if err := os.Symlink("/bin/sh", hogPath); err != nil {
		t.Fatal(err)
	}
	var hog *exec.Cmd
	v := explainCause(t, "verdict-neighbour", 250*time.Millisecond, func() telemetry.Request { return p.serve(t, "/starved", p.work) },
		func() {
			// After arming: perf enables its events on each CPU in turn.
			hog = exec.Command(hogPath, "-c", "while :; do :; done")
			hog.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := hog.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { hog.Process.Kill(); hog.Wait() })
			if err := unix.SchedSetaffinity(hog.Process.Pid, &set); err != nil {
				t.Fatal(err)
			}
			writeCgroupFile(t, hogDir, "cgroup.procs", strconv.Itoa(hog.Process.Pid))
		},
		func() {
			// Stopped, not killed: the dump and the analysis that
			// follow run at nice 10 and would wait behind it, and the
			// capture names its cgroup from /proc at seal time, as it
			// would a neighbour that lives on.
			hog.Process.Signal(syscall.SIGSTOP)
		})
	// The recorder, perf, shares the pinned CPU too; on a machine whose
	// CPUs are busy with other work (make test) it may hold it longer
	// than the hog. It is never who the request waited behind.
	for _, b := range v.RunnableBehind {
		if strings.HasPrefix(b.Who, "perf[") {
			t.Errorf("the recorder is named among who the request waited behind: %+v", v.RunnableBehind)
		}
	}
	if v.Recorder != nil {
		t.Logf("the recorder %s held CPU %d for %v of the request's wait", v.Recorder.Who, cpu, v.Recorder.NS)
	}
	if v.Cgroup != victim {
		t.Errorf("the request's cgroup is %q, want %s", v.Cgroup, victim)
	}
	if len(v.RunnableBehind) == 0 || !strings.HasPrefix(v.RunnableBehind[0].Who, "noisyhog[") || v.RunnableBehind[0].Cgroup != neighbour {
		t.Fatalf("runnable behind %+v, want noisyhog of %s", v.RunnableBehind, neighbour)
	}
	want := fmt.Sprintf("behind noisyhog[%d] of %s on CPU %d", hog.Process.Pid, neighbour, cpu)
	if !strings.HasPrefix(v.Verdict, "runnable ") || !strings.Contains(v.Verdict, want) {
		t.Errorf("verdict %q, want runnable … %q", v.Verdict, want)
	}
}

// A request that writes 192 MiB from a memory cgroup limited to 32 MiB:
// its page cache fills the limit, and each further page it dirties is
// charged after reclaiming the cgroup's own pages (and, on cgroup v1,
// waiting for their writeback).
func TestPerfVerdictNamesDirectReclaimOfTheMemoryCgroup(t *testing.T) {
	m := testCgroups(t)
	dir, cg := makeCgroup(t, m, true, "reclaim")
	if m.memoryV2 {
		writeCgroupFile(t, dir, "memory.max", strconv.Itoa(32<<20))
	} else {
		writeCgroupFile(t, dir, "memory.limit_in_bytes", strconv.Itoa(32<<20))
	}
	p := startHelper(t)
	p.join(t, dir)
	file := filepath.Join(t.TempDir(), "written")
	// Once before the capture: the cgroup starts at its limit.
	p.serve(t, "/warm", "write "+file+" 64")
	v := explainCause(t, "verdict-reclaim", 100*time.Millisecond, func() telemetry.Request { return p.serve(t, "/write", "write "+file+" 192") }, nil, nil)
	if v.Reclaim == nil || v.Reclaim.What != "memory cgroup reclaim" || v.Reclaim.LimitBytes != 32<<20 {
		t.Fatalf("reclaim %+v, want the memory cgroup's with its 32 MiB limit", v.Reclaim)
	}
	// First when it took a quarter of the request or more; after the
	// state when the machine's other work kept the thread runnable for
	// most of it.
	want := "in direct reclaim of its memory cgroup " + cg + " (limit 32 MiB) for "
	if !strings.Contains(v.Verdict, want) {
		t.Errorf("verdict %q, want %q", v.Verdict, want)
	}
}

// A request that reads a 16 MiB file through a mapping, after dropping
// its page cache and with readahead off: each page is a major fault that
// waits for the disk.
func TestPerfVerdictNamesTheMajorFaults(t *testing.T) {
	m := testCgroups(t)
	dir, _ := makeCgroup(t, m, false, "faults")
	file := filepath.Join(t.TempDir(), "mapped")
	if err := os.WriteFile(file, make([]byte, 16<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	p := startHelper(t)
	p.join(t, dir)
	v := explainCause(t, "verdict-faults", 100*time.Millisecond, func() telemetry.Request { return p.serve(t, "/mapped", "fault "+file) }, nil, nil)
	if v.MajorFaults == nil || v.MajorFaults.Waits < 2 {
		t.Fatalf("major faults %+v, want the file's", v.MajorFaults)
	}
	if !regexp.MustCompile(`(^|; )waited \d+ ms on major page faults \(\d+ faults\)`).MatchString(v.Verdict) {
		t.Errorf("verdict %q, want the wait on major page faults", v.Verdict)
	}
}

// BenchmarkQuotaSampler is what the armed perf recorder adds for the
// throttling verdict: one sample of the cpu.stat of 100 cgroups with a
// CPU quota (made by the benchmark), as the sampler takes one every
// interval, and the walk that finds them (every 30 s).
//
//	capture.quota_sample_100_cgroups_us  one sample of the 100 cgroups
//	capture.quota_sampler_cpu_pct        % of one core at a sample a second (the interval of a pre-window of 4 s or more)
//	capture.quota_walk_ms                one walk of the cpu hierarchy
func BenchmarkQuotaSampler(b *testing.B) {
	m, err := mountedCgroups()
	if err != nil || os.Geteuid() != 0 {
		testenv.RequirePrivileged(b, "cgroups (root)", fmt.Errorf("%v, uid %d", err, os.Geteuid()))
	}
	base := filepath.Join(m.cpu, fmt.Sprintf("spikehunt-bench-quotas-%d", os.Getpid()))
	if err := os.Mkdir(base, 0o755); err != nil {
		b.Fatal(err)
	}
	var made []string
	b.Cleanup(func() {
		for _, d := range append(made, base) {
			os.Remove(d)
		}
	})
	for i := range 100 {
		d := filepath.Join(base, fmt.Sprintf("pod%d", i))
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
		made = append(made, d)
		file, value := "cpu.cfs_quota_us", "50000"
		if m.cpuV2 {
			file, value = "cpu.max", "50000 100000"
		}
		if err := os.WriteFile(filepath.Join(d, file), []byte(value), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	s := newQuotaSampler(m, 4*time.Second)
	t0 := time.Now()
	s.walk()
	walk := time.Since(t0)
	if n := len(s.quotas); n < 100 {
		b.Fatalf("the walk found %d quotas, want the 100 made", n)
	}
	s.walked = time.Now()
	b.ResetTimer()
	n := max(b.N, 200)
	t0 = time.Now()
	for range n {
		s.sample(time.Now())
	}
	per := time.Since(t0) / time.Duration(n)
	b.ReportMetric(float64(per.Microseconds()), "capture.quota_sample_100_cgroups_us:µs")
	b.ReportMetric(100*per.Seconds()/s.interval.Seconds()+100*walk.Seconds()/rewalkEvery.Seconds(), "capture.quota_sampler_cpu_pct:%")
	b.ReportMetric(float64(walk.Microseconds())/1000, "capture.quota_walk_ms:ms")
}
