package explain

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// synth writes perf script text as perf 6.1 does with ScriptFields: a
// header "comm pid/tid [cpu] sec.ns: event: fields", then a chain.
type synth struct{ b strings.Builder }

type proc struct {
	comm     string
	pid, tid int32
}

func (s *synth) chain(frames []string) {
	for i, f := range frames {
		fmt.Fprintf(&s.b, "\t%16x %s ([kernel.kallsyms])\n", uint64(0xffffffff81000000)+uint64(i*16), f)
	}
	s.b.WriteString("\n")
}

func (s *synth) header(p proc, cpu int, t time.Duration, event, fields string) {
	fmt.Fprintf(&s.b, "%16s %6d/%-6d [%03d] %d.%09d: %s: %s\n", p.comm, p.pid, p.tid, cpu, t/time.Second, t%time.Second, event, fields)
}

// block: p leaves cpu sleeping, the switch twice (the second with its
// chain, as the default profile records it).
func (s *synth) block(p proc, cpu int, t time.Duration, state string, frames []string) {
	f := fmt.Sprintf("prev_comm=%s prev_pid=%d prev_prio=120 prev_state=%s ==> next_comm=swapper/%d next_pid=0 next_prio=120", p.comm, p.tid, state, cpu)
	s.header(p, cpu, t, "sched:sched_switch", f)
	s.b.WriteString("\n")
	s.header(p, cpu, t+3*time.Microsecond, "sched:sched_switch", f)
	s.chain(append([]string{"__schedule", "schedule"}, frames...))
}

// wake: by wakes p on cpu, and p takes the CPU 10 µs later.
func (s *synth) wake(by, p proc, cpu int, t time.Duration) {
	s.header(by, cpu, t, "sched:sched_wakeup", fmt.Sprintf("comm=%s pid=%d prio=120 target_cpu=%03d", p.comm, p.tid, cpu))
	s.b.WriteString("\n")
	idle := proc{fmt.Sprintf("swapper/%d", cpu), 0, 0}
	s.header(idle, cpu, t+10*time.Microsecond, "sched:sched_switch",
		fmt.Sprintf("prev_comm=swapper/%d prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=%s next_pid=%d next_prio=120", cpu, p.comm, p.tid))
	s.b.WriteString("\n")
}

func (s *synth) sample(p proc, cpu int, t time.Duration, frames ...string) {
	s.header(p, cpu, t, "cpu-clock/freq=99/", "")
	s.chain(frames)
}

// samples: every 10 ms of [from, to) on cpu, the n-th from pick.
func (s *synth) samples(cpu int, from, to time.Duration, pick func(i int) (proc, []string)) {
	for i, t := 0, from; t < to; i, t = i+1, t+10*time.Millisecond {
		p, frames := pick(i)
		s.sample(p, cpu, t, frames...)
	}
}

func (s *synth) trace(t *testing.T) *Trace {
	t.Helper()
	tr, err := Parse(strings.NewReader(s.b.String()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	tr.SortEvents()
	return tr
}

var (
	app     = proc{"shop", 100, 101}
	app2    = proc{"shop", 100, 102}
	app3    = proc{"shop", 100, 103}
	other   = proc{"batch", 200, 201}
	idle1   = proc{"swapper", 0, 0}
	futexed = []string{"futex_wait_queue", "__futex_wait", "futex_wait", "do_futex", "__x64_sys_futex", "do_syscall_64"}
	netRX   = []string{"ipt_do_table", "nf_hook_slow", "ip_rcv", "__netif_receive_skb_one_core", "process_backlog", "__napi_poll", "net_rx_action", "handle_softirqs", "__irq_exit_rcu"}
)

// request is a request record for thread tid over [from, to) of the
// trace's clock (offset 0).
func request(tid int, from, to time.Duration) record.RequestRecord {
	return record.RequestRecord{Start: time.Unix(0, int64(from)).UTC(), End: time.Unix(0, int64(to)).UTC(),
		LatencyMS: float64(to-from) / 1e6, Service: "shop", Endpoint: "/fast", ThreadID: uint32(tid)}
}

func TestParseReadsTheProcessOfEachThread(t *testing.T) {
	var s synth
	s.sample(app2, 0, 10*time.Second, "main")
	s.block(app, 1, 10*time.Second, "S", futexed)
	tr := s.trace(t)
	if tr.procs[101] != 100 || tr.procs[102] != 100 {
		t.Errorf("procs %v", tr.procs)
	}
	// The text without the pid field still reads, without processes.
	old, err := Parse(strings.NewReader(script), Limits{})
	if err != nil || len(old.Events) != 7 || len(old.procs) != 0 {
		t.Errorf("old text: %v, %d events, procs %v", err, len(old.Events), old.procs)
	}
}

// A request's thread waits on a futex for its process's other threads,
// while NET_RX softirq work holds the CPU they all run on: the verdict
// says so after the thread's state.
func TestAVerdictNamesTheSoftirqWorkOnItsCPU(t *testing.T) {
	var s synth
	s.block(app, 1, 10*time.Second, "S", futexed)
	s.samples(1, 10*time.Second, 11*time.Second, func(i int) (proc, []string) {
		switch {
		case i%5 == 4:
			return idle1, []string{"default_idle"}
		case i%2 == 0:
			return proc{"ksoftirqd/1", 0, 22}, append(netRX[:len(netRX)-1:len(netRX)-1], "run_ksoftirqd", "smpboot_thread_fn")
		default:
			return app2, netRX
		}
	})
	s.wake(app2, app, 1, 11*time.Second)
	tr := s.trace(t)
	v := tr.ExplainRequest(request(101, 10*time.Second, 11*time.Second+20*time.Millisecond), record.Clock{})
	want := "blocked 1.00 s in futex_wait_queue (stack futex_wait_queue ← __futex_wait ← futex_wait ← do_futex ← … ← do_syscall_64); woken by shop[102] on CPU 1; " +
		"meanwhile NET_RX softirq work (network receive processing) took 80 % of CPU 1, where it ran; 1.02 s of the request on shop[101]"
	if !strings.HasPrefix(v.Verdict, want) {
		t.Errorf("verdict\n  %s\nwant\n  %s…", v.Verdict, want)
	}
	if v.Softirq == nil || v.Softirq.CPU != 1 || v.Softirq.Kind != "NET_RX" || v.Softirq.Samples != 100 || v.Softirq.Softirq != 80 {
		t.Errorf("softirq %+v", v.Softirq)
	}
	// Runnable behind ksoftirqd: the task is named, with its work.
	s = synth{}
	ksoftirqd := proc{"ksoftirqd/1", 0, 22}
	s.header(app, 1, 10*time.Second, "sched:sched_switch", "prev_comm=shop prev_pid=101 prev_prio=120 prev_state=R+ ==> next_comm=ksoftirqd/1 next_pid=22 next_prio=120")
	s.b.WriteString("\n")
	s.samples(1, 10*time.Second, 10500*time.Millisecond, func(int) (proc, []string) {
		return ksoftirqd, append(netRX[:len(netRX)-1:len(netRX)-1], "run_ksoftirqd", "smpboot_thread_fn")
	})
	s.header(ksoftirqd, 1, 10500*time.Millisecond, "sched:sched_switch", "prev_comm=ksoftirqd/1 prev_pid=22 prev_prio=120 prev_state=S ==> next_comm=shop next_pid=101 next_prio=120")
	s.b.WriteString("\n")
	v = s.trace(t).ExplainRequest(request(101, 10*time.Second, 10510*time.Millisecond), record.Clock{})
	if want := "runnable 500 ms behind ksoftirqd/1[22] (NET_RX softirq work) on CPU 1; 510 ms of the request"; !strings.HasPrefix(v.Verdict, want) || strings.Contains(v.Verdict, "meanwhile") {
		t.Errorf("behind ksoftirqd\n  %s\nwant\n  %s…", v.Verdict, want)
	}
	// The background softirq of a CPU (a tenth of it) is not named.
	s = synth{}
	s.block(app, 1, 10*time.Second, "S", futexed)
	s.samples(1, 10*time.Second, 11*time.Second, func(i int) (proc, []string) {
		if i%10 == 0 {
			return app2, netRX
		}
		return idle1, []string{"default_idle"}
	})
	s.wake(app2, app, 1, 11*time.Second)
	v = s.trace(t).ExplainRequest(request(101, 10*time.Second, 11*time.Second), record.Clock{})
	if strings.Contains(v.Verdict, "softirq") || v.Softirq == nil || v.Softirq.Softirq != 10 {
		t.Errorf("a tenth named: %s (%+v)", v.Verdict, v.Softirq)
	}
}

// A request's thread waits on a futex while two other threads of its
// process reclaim their memory cgroup (on CPU, and blocked in it); a
// thread of another process in reclaim meanwhile is not counted.
func TestAVerdictNamesItsProcessThreadsReclaim(t *testing.T) {
	reclaiming := []string{"shrink_folio_list", "shrink_lruvec", "shrink_node", "do_try_to_free_pages", "try_to_free_mem_cgroup_pages",
		"try_charge_memcg", "__mem_cgroup_charge", "do_anonymous_page", "handle_mm_fault", "do_user_addr_fault", "exc_page_fault"}
	var s synth
	s.block(app, 1, 10*time.Second, "S", futexed)
	s.samples(0, 10*time.Second, 10800*time.Millisecond, func(i int) (proc, []string) {
		switch i % 4 {
		case 0, 1:
			return app2, reclaiming
		case 2:
			return other, reclaiming
		}
		return idle1, []string{"default_idle"}
	})
	s.block(app3, 1, 10100*time.Millisecond, "D", append([]string{"io_schedule", "folio_wait_bit", "folio_wait_writeback"}, reclaiming...))
	s.wake(idle1, app3, 1, 10500*time.Millisecond)
	s.wake(app2, app, 1, 10800*time.Millisecond)
	tr := s.trace(t)
	h := &Host{Task: func(tid int32) (TaskCgroups, bool) {
		return TaskCgroups{TID: tid, CPU: "/shop.service", Memory: "/shop.service", MemoryLimit: 160 << 20}, true
	}}
	v := tr.ExplainRequestOn(request(101, 10*time.Second, 10820*time.Millisecond), record.Clock{}, h)
	// 40 samples of app2 in reclaim, 10 ms each, and app3 blocked in it
	// for 400 ms.
	want := "blocked 800 ms in futex_wait_queue (stack futex_wait_queue ← __futex_wait ← futex_wait ← do_futex ← … ← do_syscall_64); woken by shop[102] on CPU 1; " +
		"meanwhile 2 other threads of its process were in direct reclaim of their memory cgroup /shop.service (limit 160 MiB) for 800 ms in all; 820 ms of the request on shop[101]"
	if !strings.HasPrefix(v.Verdict, want) {
		t.Errorf("verdict\n  %s\nwant\n  %s…", v.Verdict, want)
	}
	if p := v.Process; p == nil || p.Reclaim == nil || p.Reclaim.OnCPU != 400*time.Millisecond || p.Reclaim.Blocked != 400*time.Millisecond || p.ReclaimThreads != 2 {
		t.Errorf("process %+v", v.Process)
	}
	// Without the host, the cgroup is not named but the reclaim is.
	v = tr.ExplainRequest(request(101, 10*time.Second, 10820*time.Millisecond), record.Clock{})
	if !strings.Contains(v.Verdict, "meanwhile 2 other threads of its process were in direct reclaim of their memory cgroup for 800 ms in all") {
		t.Errorf("without the host: %s", v.Verdict)
	}
}

var directWrite = []string{"io_schedule", "blk_io_schedule", "__blkdev_direct_IO_simple", "blkdev_direct_IO", "blkdev_write_iter", "vfs_write",
	"__x64_sys_pwrite64", "do_syscall_64"}

// A request's thread whose blocking switch the ring lost (its timeline
// starts blocked), woken by the device's worker, while its process's
// other threads were blocked in direct IO: the IO is named. A thread
// whose own chain is the block device's says so itself.
func TestAVerdictNamesBlockIO(t *testing.T) {
	var s synth
	kworker := proc{"kworker/u8:0", 0, 50}
	s.sample(app, 1, 9*time.Second, "main")
	s.block(app2, 0, 9500*time.Millisecond, "D", directWrite)
	s.block(app3, 1, 9600*time.Millisecond, "D", directWrite)
	// The request's own thread: its first event in the window is its
	// wakeup (the switch that blocked it was overwritten).
	s.wake(kworker, app3, 1, 11*time.Second)
	s.wake(kworker, app2, 0, 11500*time.Millisecond)
	s.wake(kworker, app, 0, 12*time.Second)
	tr := s.trace(t)
	// Thread 101's sample at 9 s is before the request; what follows is
	// lost up to the wakeup: it reads as blocked from its sample on.
	tr.Events = tr.Events[1:]
	v := tr.ExplainRequest(request(101, 10*time.Second, 12*time.Second+20*time.Millisecond), record.Clock{})
	want := "blocked 2.00 s; woken by kworker/u8:0[50] on CPU 0; meanwhile 2 other threads of its process were blocked in IO on a block device " +
		"(2.50 s in all; stack blk_io_schedule ← __blkdev_direct_IO_simple ← blkdev_direct_IO ← blkdev_write_iter ← … ← do_syscall_64); 2.02 s of the request"
	if !strings.HasPrefix(v.Verdict, want) {
		t.Errorf("verdict\n  %s\nwant\n  %s…", v.Verdict, want)
	}
	v = tr.ExplainRequest(request(102, 10*time.Second, 11500*time.Millisecond+20*time.Millisecond), record.Clock{})
	if want := "blocked 1.50 s waiting on a block device in blk_io_schedule (stack blk_io_schedule ← __blkdev_direct_IO_simple"; !strings.HasPrefix(v.Verdict, want) {
		t.Errorf("own chain\n  %s\nwant\n  %s…", v.Verdict, want)
	}
	for _, tc := range []struct {
		stack []string
		want  bool
	}{
		{directWrite, true},
		{[]string{"io_schedule", "folio_wait_bit", "folio_wait_writeback", "__filemap_fdatawait_range", "file_write_and_wait_range", "ext4_sync_file"}, true},
		{[]string{"io_schedule_timeout", "wait_for_completion_io_timeout", "submit_bio_wait", "blkdev_issue_flush"}, true},
		{futexed, false},
		{[]string{"schedule_timeout", "wait_for_completion", "blk_mq_freeze_queue"}, false}, // no io_schedule: not a wait for an IO
	} {
		if got := blockIOWait(tc.stack); got != tc.want {
			t.Errorf("blockIOWait(%v) = %v", tc.stack, got)
		}
	}
}

// The listen queues overflowed while a request of a second or more was
// served: the verdict leads with the SYN retry. A shorter request could
// not have waited for one, but for the full accept queue; no overflow,
// nothing said.
func TestAVerdictNamesTheListenQueueOverflow(t *testing.T) {
	var s synth
	s.block(app, 1, 10*time.Second, "S", futexed)
	s.wake(app2, app, 1, 11200*time.Millisecond)
	tr := s.trace(t)
	t0 := time.Unix(0, int64(9500*time.Millisecond))
	h := &Host{Task: func(tid int32) (TaskCgroups, bool) { return TaskCgroups{TID: tid, CPU: "/shop.service"}, true },
		Listen: []ListenStat{
			{At: t0, Overflows: 100, Drops: 100},
			{At: t0.Add(time.Second), Overflows: 285, Drops: 290},
			{At: t0.Add(2 * time.Second), Overflows: 285, Drops: 290},
		}}
	v := tr.ExplainRequestOn(request(101, 10*time.Second, 11200*time.Millisecond), record.Clock{}, h)
	want := "waited before its handler ran, likely for a SYN retry: the host's TCP listen queues overflowed 185 times while it was served " +
		"(a SYN or handshake that finds the accept queue full is dropped, and the client sends it again after 1 s or more); its thread: blocked 1.20 s in futex_wait_queue"
	if !strings.HasPrefix(v.Verdict, want) {
		t.Errorf("verdict\n  %s\nwant\n  %s…", v.Verdict, want)
	}
	if v.Listen == nil || v.Listen.Overflows != 185 || v.Listen.Drops != 190 {
		t.Errorf("listen %+v", v.Listen)
	}
	// Shorter than a SYN retry: the accept queue.
	v = tr.ExplainRequestOn(request(101, 10300*time.Millisecond, 11200*time.Millisecond), record.Clock{}, h)
	if want := "waited before its handler ran, likely in a full accept queue: the host's TCP listen queues overflowed 185 times while it was served; its thread: blocked 900 ms"; !strings.HasPrefix(v.Verdict, want) {
		t.Errorf("a 900 ms request\n  %s\nwant\n  %s…", v.Verdict, want)
	}
	// Nothing overflowed while it was served (the samples after it).
	v = tr.ExplainRequestOn(request(101, 10600*time.Millisecond, 11700*time.Millisecond), record.Clock{}, h)
	if strings.Contains(v.Verdict, "SYN") || v.Listen != nil {
		t.Errorf("no overflow during it: %s", v.Verdict)
	}
}

// A thread runnable behind the capture's own recorder (perf record, more
// of the CPU than the neighbour) is named behind the neighbour; the
// recorder's time is reported apart, with its share of the wait.
func TestTheRecorderIsNeverWhoTheThreadWaitedBehind(t *testing.T) {
	perf := proc{"perf", 900, 900}
	var s synth
	s.header(app, 1, 10*time.Second, "sched:sched_switch", "prev_comm=shop prev_pid=101 prev_prio=120 prev_state=R+ ==> next_comm=batch next_pid=201 next_prio=120")
	s.b.WriteString("\n")
	s.samples(1, 10*time.Second, 10500*time.Millisecond, func(i int) (proc, []string) {
		if i%5 < 3 {
			return perf, []string{"record__mmap_read_all", "cmd_record"}
		}
		return other, []string{"spin"}
	})
	s.header(other, 1, 10500*time.Millisecond, "sched:sched_switch", "prev_comm=batch prev_pid=201 prev_prio=120 prev_state=R ==> next_comm=shop next_pid=101 next_prio=120")
	s.b.WriteString("\n")
	q := request(101, 10*time.Second, 10510*time.Millisecond)

	// Without knowing its recorder, the analysis names perf: the fault
	// this guards against.
	if v := s.trace(t).ExplainRequest(q, record.Clock{}); !strings.HasPrefix(v.Verdict, "runnable 500 ms behind perf[900] on CPU 1") {
		t.Fatalf("without the recorder named: %s", v.Verdict)
	}
	tr := s.trace(t)
	tr.SetRecorder(900)
	v := tr.ExplainRequest(q, record.Clock{})
	want := "runnable 500 ms behind batch[201] on CPU 1; meanwhile the capture's own recorder perf[900] held CPU 1 for 300 ms of the runnable time; 510 ms of the request"
	if !strings.HasPrefix(v.Verdict, want) {
		t.Errorf("verdict\n  %s\nwant\n  %s…", v.Verdict, want)
	}
	if len(v.RunnableBehind) != 1 || v.RunnableBehind[0].Who != "batch[201]" || v.Recorder == nil || v.Recorder.Who != "perf[900]" || v.Recorder.NS != 300*time.Millisecond {
		t.Errorf("behind %+v, recorder %+v", v.RunnableBehind, v.Recorder)
	}
	// A recorder that took little of the wait is not worth a clause.
	s = synth{}
	s.header(app, 1, 10*time.Second, "sched:sched_switch", "prev_comm=shop prev_pid=101 prev_prio=120 prev_state=R+ ==> next_comm=batch next_pid=201 next_prio=120")
	s.b.WriteString("\n")
	s.samples(1, 10*time.Second, 10500*time.Millisecond, func(i int) (proc, []string) {
		if i%25 == 0 {
			return perf, []string{"record__mmap_read_all", "cmd_record"}
		}
		return other, []string{"spin"}
	})
	tr = s.trace(t)
	tr.SetRecorder(900)
	if v := tr.ExplainRequest(q, record.Clock{}); strings.Contains(v.Verdict, "recorder") || v.Recorder == nil {
		t.Errorf("a small share: %s (%+v)", v.Verdict, v.Recorder)
	}
}
