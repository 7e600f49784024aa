package explain

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// ddTrace is this kernel's ftrace text of dd writing to a loop device
// (7,0) with oflag=direct,dsync: each write, then the flush the loop
// device completes after it, then the wakeup of dd.
const ddTrace = `# tracer: nop
              dd-32742   [000] ..... 35075.735379: block_rq_issue: 7,0 WS 4096 () 0 + 8 be,0,4 [dd]
              dd-32742   [000] d..5. 35075.735388: sched_wakeup: comm=kworker/u8:4 pid=12265 prio=120 target_cpu=000
              dd-32742   [000] d..2. 35075.735392: sched_switch: prev_comm=dd prev_pid=32742 prev_prio=120 prev_state=D ==> next_comm=kworker/u8:4 next_pid=12265 next_prio=120
    kworker/1:2H-12436   [001] d..2. 35075.735393: sched_switch: prev_comm=kworker/1:2H prev_pid=12436 prev_prio=100 prev_state=D ==> next_comm=swapper/1 next_pid=0 next_prio=120
              dd-32742   [000] d..2. 35075.735401: <stack trace>
 => trace_event_raw_event_sched_switch
 => __traceiter_sched_switch
 => __schedule
 => schedule
 => schedule_timeout
 => io_schedule_timeout
 => wait_for_completion_io_timeout
 => submit_bio_wait
 => __blkdev_direct_IO_simple+0x1a0/0x2b0
 => blkdev_write_iter
 => vfs_write
 => ksys_write
     ksoftirqd/1-22      [001] ..s.. 35075.735720: block_rq_complete: 7,0 WS () 0 + 8 be,0,4 [0]
    kworker/1:2H-12436   [001] ..... 35075.735736: block_rq_issue: 7,0 FF 0 () 0 + 0 none,0,0 [kworker/1:2H]
     ksoftirqd/1-22      [001] ..s.. 35075.735968: block_rq_complete: 7,0 FF () 18446744073709551615 + 0 none,0,0 [0]
     ksoftirqd/1-22      [001] d.s1. 35075.735969: block_rq_complete: 7,0 WS () 0 + 0 be,0,4 [0]
          <idle>-0       [000] dNh2. 35075.736023: sched_wakeup: comm=dd pid=32742 prio=120 target_cpu=000
          <idle>-0       [000] d..2. 35075.736056: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=dd next_pid=32742 next_prio=120
 my comm [1] x-77 (   77) [001] d..2. 35075.736060: sched_switch: prev_comm=my comm [1] x prev_pid=77 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
     jbd2/vda-8      [001] ..... 35075.736100: block_rq_issue: 254,0 W 4096 () 99 + 8 be,0,4 [jbd2/vda-8]
              dd-32742   [000] ..... 35075.736167: block_rq_issue: 7,0 WS 4096 () 8 + 8 be,0,4 [dd]
              dd-32742   [000] d..2. 35075.736179: sched_switch: prev_comm=dd prev_pid=32742 prev_prio=120 prev_state=D ==> next_comm=swapper/0 next_pid=0 next_prio=120
     ksoftirqd/1-22      [001] ..s.. 35075.736273: block_rq_complete: 7,0 WS () 8 + 8 be,0,4 [0]
     ksoftirqd/1-22      [001] ..s.. 35075.736280: block_rq_complete: 254,0 W () 99 + 8 be,0,4 [0]
          <idle>-0       [000] dNh2. 35075.736410: sched_wakeup: comm=dd pid=32742 prio=120 target_cpu=000
          <idle>-0       [000] d..2. 35075.736412: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=dd next_pid=32742 next_prio=120
              dd-32742   [000] ..... 35075.736420: block_rq_issue: 7,0 WS 4096 () 16 + 8 be,0,4 [dd]
              dd-32742   [000] d..2. 35075.736425: sched_switch: prev_comm=dd prev_pid=32742 prev_prio=120 prev_state=D ==> next_comm=swapper/0 next_pid=0 next_prio=120
     ksoftirqd/1-22      [001] ..s.. 35075.736600: block_rq_complete: 7,0 WS () 16 + 8 be,0,4 [0]
          <idle>-0       [000] dNh2. 35075.736620: sched_wakeup: comm=dd pid=32742 prio=120 target_cpu=000
          <idle>-0       [000] d..2. 35075.736625: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=dd next_pid=32742 next_prio=120
`

func TestReadFtraceGivesTheSchedulerEventsAsPerfScriptDoes(t *testing.T) {
	tr := NewTrace(Limits{})
	if err := tr.ReadFtrace(strings.NewReader(ddTrace)); err != nil {
		t.Fatal(err)
	}
	dd := Task{Comm: "dd", TID: 32742}
	want := []Event{
		{Kind: KindWakeup, T: 35075_735388_000, CPU: 0, Task: dd, Target: Task{"kworker/u8:4", 12265}, Stack: -1},
		{Kind: KindSwitch, T: 35075_735392_000, CPU: 0, Task: dd, PrevState: "D", Next: Task{"kworker/u8:4", 12265}, Stack: 0},
		{Kind: KindSwitch, T: 35075_735393_000, CPU: 1, Task: Task{"kworker/1:2H", 12436}, PrevState: "D", Next: Task{"swapper/1", 0}, Stack: -1},
		{Kind: KindWakeup, T: 35075_736023_000, CPU: 0, Task: Task{"<idle>", 0}, Target: dd, Stack: -1},
		{Kind: KindSwitch, T: 35075_736056_000, CPU: 0, Task: Task{"swapper/0", 0}, PrevState: "R", Next: dd, Stack: -1},
		{Kind: KindSwitch, T: 35075_736060_000, CPU: 1, Task: Task{"my comm [1] x", 77}, PrevState: "S", Next: Task{"swapper/1", 0}, Stack: -1},
		{Kind: KindSwitch, T: 35075_736179_000, CPU: 0, Task: dd, PrevState: "D", Next: Task{"swapper/0", 0}, Stack: -1},
		{Kind: KindWakeup, T: 35075_736410_000, CPU: 0, Task: Task{"<idle>", 0}, Target: dd, Stack: -1},
		{Kind: KindSwitch, T: 35075_736412_000, CPU: 0, Task: Task{"swapper/0", 0}, PrevState: "R", Next: dd, Stack: -1},
		{Kind: KindSwitch, T: 35075_736425_000, CPU: 0, Task: dd, PrevState: "D", Next: Task{"swapper/0", 0}, Stack: -1},
		{Kind: KindWakeup, T: 35075_736620_000, CPU: 0, Task: Task{"<idle>", 0}, Target: dd, Stack: -1},
		{Kind: KindSwitch, T: 35075_736625_000, CPU: 0, Task: Task{"swapper/0", 0}, PrevState: "R", Next: dd, Stack: -1},
	}
	if d := cmp.Diff(want, tr.Events); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	// The stack trace after dd's switch on CPU 0 is dd's, though
	// kworker's switch on CPU 1 came between them in the text.
	if d := cmp.Diff([][]string{{"trace_event_raw_event_sched_switch", "__traceiter_sched_switch", "__schedule", "schedule", "schedule_timeout", "io_schedule_timeout",
		"wait_for_completion_io_timeout", "submit_bio_wait", "__blkdev_direct_IO_simple", "blkdev_write_iter", "vfs_write", "ksys_write"}}, tr.Stacks); d != "" {
		t.Errorf("stacks (-want +got):\n%s", d)
	}
}

// The loop device's writes and flush cover most of each wait, and it is
// the device that completed last before most wakeups, not vda (254,0),
// whose unrelated write completed between the loop's and one wakeup.
func TestAVerdictHoldsTheBlockedTimeAgainstTheDeviceThatWokeTheThread(t *testing.T) {
	tr := NewTrace(Limits{})
	if err := tr.ReadFtrace(strings.NewReader(ddTrace)); err != nil {
		t.Fatal(err)
	}
	start, end := int64(35075_735370_000), int64(35075_736630_000)
	var io BlockIO
	io.KeepDuring(start, end)
	if err := io.ReadBlockIO(strings.NewReader(ddTrace)); err != nil {
		t.Fatal(err)
	}
	if io.UnmatchedCompletions != 0 || io.InFlightAtEnd != 0 {
		t.Errorf("the flush was not paired: %d unmatched completions, %d in flight", io.UnmatchedCompletions, io.InFlightAtEnd)
	}
	q := record.RequestRecord{Start: time.Unix(0, start), End: time.Unix(0, end), LatencyMS: 1.05, ThreadID: 32742}
	a := AnalyzeFtrace(tr, &io, &record.Metadata{}, []record.RequestRecord{q}, 0)
	v := a.Requests[0]
	if v.IO == nil {
		t.Fatalf("no IO verdict: %s", v.Verdict)
	}
	// Blocked 735392 → 736023, 736179 → 736410 and 736425 → 736620:
	// 1057 µs; the loop device busy 735392 → 735720, 735736 → 735968,
	// 736179 → 736273 and 736425 → 736600: 829 µs.
	if v.IO.Blocked != 1057*time.Microsecond || v.IO.Device != 829*time.Microsecond {
		t.Errorf("blocked %v, device %v; want 1057 µs and 829 µs", v.IO.Blocked, v.IO.Device)
	}
	if d := cmp.Diff([]string{"7,0"}, v.IO.Devices); d != "" || !v.IO.ByWakeup || v.IO.Where != "device" {
		t.Errorf("%+v (-want +got devices):\n%s", *v.IO, d)
	}
	// A wait with a timeout is not a sleep: the completion woke it, here
	// through an interrupt on the idle CPU, not "its timer".
	if v.WokenBy != "an interrupt on idle CPU 0" {
		t.Errorf("woken by %q, want the interrupt on idle CPU 0", v.WokenBy)
	}
	if v.BlockingCall != "wait_for_completion_io_timeout" ||
		!strings.HasPrefix(v.Verdict, "blocked 1 ms in wait_for_completion_io_timeout (stack wait_for_completion_io_timeout ← submit_bio_wait ← __blkdev_direct_IO_simple ← blkdev_write_iter") ||
		!strings.Contains(v.Verdict, "device latency explains it: device 7,0 was busy 829 µs of the 1 ms it was blocked") {
		t.Errorf("verdict %q", v.Verdict)
	}
}

func TestReadFtraceRefusesBrokenSchedLines(t *testing.T) {
	for _, in := range []string{
		"x-1 [000] d..2. nan: sched_switch: prev_comm=x prev_pid=1 prev_prio=120 prev_state=S ==> next_comm=y next_pid=2 next_prio=120\n",
		"x-1 d..2. 1.0: sched_switch: prev_comm=x prev_pid=1 prev_prio=120 prev_state=S ==> next_comm=y next_pid=2 next_prio=120\n",
		"x [000] d..2. 1.0: sched_wakeup: comm=y pid=2 prio=120 target_cpu=000\n",
		"x-1 [000] d..2. 1.0: sched_switch: prev_comm=x prev_pid=1 prev_prio=120 prev_state=S next_comm=y next_pid=2\n",
		"x-1 [000] d..2. 1.0: sched_wakeup: comm=y prio=120\n",
	} {
		tr := NewTrace(Limits{})
		if err := tr.ReadFtrace(strings.NewReader(in)); !errors.Is(err, ErrFtraceSyntax) {
			t.Errorf("%q: %v", in, err)
		}
	}
}

func FuzzReadFtrace(f *testing.F) {
	f.Add(ddTrace)
	f.Fuzz(func(t *testing.T, s string) {
		tr := NewTrace(Limits{MaxEvents: 1000})
		if err := tr.ReadFtrace(strings.NewReader(s)); err != nil && !errors.Is(err, ErrFtraceSyntax) {
			t.Fatal(err)
		}
		var io BlockIO
		io.KeepDuring(0, 1<<62)
		if err := io.ReadBlockIO(strings.NewReader(s)); err != nil && !errors.Is(err, ErrFtraceSyntax) {
			t.Fatal(err)
		}
		for _, e := range tr.Events {
			if e.Kind == KindSwitch || e.Kind == KindWakeup {
				q := record.RequestRecord{Start: time.Unix(0, e.T), End: time.Unix(0, e.T+1e6), ThreadID: uint32(max(e.Task.TID, 1))}
				AnalyzeFtrace(tr, &io, &record.Metadata{}, []record.RequestRecord{q}, 0)
				break
			}
		}
	})
}

// A thread that blocked 10,000 times during its request, on a device
// with 200,000 requests kept: the wait's figures in one pass, not one
// per stretch.
func BenchmarkWaitIOManyStretches(b *testing.B) {
	var io BlockIO
	for i := int64(0); i < 200_000; i++ {
		io.kept = append(io.kept, IOSpan{Dev: "7,0", Issue: i * 10_000, End: i*10_000 + 6_000})
	}
	var segs []Segment
	for i := int64(0); i < 10_000; i++ {
		segs = append(segs, Segment{State: StateBlocked, LeftAs: "D", Start: i * 200_000, End: i*200_000 + 150_000},
			Segment{State: StateRunnable, Start: i*200_000 + 150_000, End: i*200_000 + 200_000})
	}
	b.ReportAllocs()
	for b.Loop() {
		io.byEnd = nil
		if w := waitIO(segs, &io); w == nil || w.Where != "both" {
			b.Fatalf("%+v", w)
		}
	}
}
