package explain

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// What happened around a request's thread while it was served. A thread
// blocked on a futex, or runnable, is often only waiting for the real
// cause to pass elsewhere: its process's other threads in reclaim or in
// block IO (holding the lock, the pool slot or the runtime's attention it
// waits for), or softirq work that took the CPU it runs on. The verdict
// names them after the thread's own state, as "meanwhile".

// SoftirqUse is the softirq work on a CPU the request's thread ran on, or
// waited for, while it was served, from the timer samples there.
type SoftirqUse struct {
	CPU     int32   `json:"cpu"`
	Samples int     `json:"samples"`
	Softirq int     `json:"softirq"`
	Share   float64 `json:"share"`
	// Kind is the softirq most of those samples were in ("NET_RX",
	// "TIMER", …; "" when their chains do not say) and KindShare its
	// part of the CPU.
	Kind      string  `json:"kind,omitempty"`
	KindShare float64 `json:"kind_share,omitempty"`
}

// softirqKinds name a softirq by its handler's frame.
var softirqKinds = []struct{ frame, kind string }{
	{"net_rx_action", "NET_RX"}, {"net_tx_action", "NET_TX"}, {"blk_done_softirq", "BLOCK"},
	{"run_timer_softirq", "TIMER"}, {"hrtimer_run_softirq", "HRTIMER"}, {"tasklet_action", "TASKLET"},
	{"rcu_core", "RCU"}, {"sched_balance_softirq", "SCHED"}, {"run_rebalance_domains", "SCHED"},
}

func softirqKind(stack []string) string {
	for _, f := range stack {
		for _, k := range softirqKinds {
			if f == k.frame || strings.HasPrefix(f, k.frame) {
				return k.kind
			}
		}
	}
	return ""
}

// softirqDuring is the CPU of cpus whose samples in [from, to) held the
// largest share of softirq work; nil without samples.
func (tr *Trace) softirqDuring(cpus map[int32]bool, from, to int64) *SoftirqUse {
	type count struct {
		n, soft int
		kinds   map[string]int
	}
	by := map[int32]*count{}
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.T >= to {
			break
		}
		if e.Kind != KindSample || e.T < from || !cpus[e.CPU] {
			continue
		}
		c := by[e.CPU]
		if c == nil {
			c = &count{kinds: map[string]int{}}
			by[e.CPU] = c
		}
		c.n++
		if e.Stack >= 0 && hasAny(tr.Stacks[e.Stack], softirqFrames) {
			c.soft++
			c.kinds[softirqKind(tr.Stacks[e.Stack])]++
		}
	}
	var best *SoftirqUse
	for cpu, c := range by {
		u := &SoftirqUse{CPU: cpu, Samples: c.n, Softirq: c.soft, Share: float64(c.soft) / float64(c.n)}
		top := 0
		for k, n := range c.kinds {
			if k != "" && (n > top || n == top && k < u.Kind) {
				u.Kind, top = k, n
			}
		}
		u.KindShare = float64(top) / float64(c.n)
		if best == nil || u.Share > best.Share || u.Share == best.Share && u.CPU < best.CPU {
			best = u
		}
	}
	return best
}

// softirqMatters: softirq work held a fifth or more of the CPU's samples,
// at least minSamples of them, and time enough to be a tenth of the
// request (share × duration); less is the background every CPU has.
func (u *SoftirqUse) matters(total time.Duration) bool {
	return u != nil && u.Softirq >= minSamples && u.Share >= 0.2 && time.Duration(u.Share*float64(total))*10 >= total
}

// clause: "NET_RX softirq work (network receive processing) took 78 % of
// CPU 1, where it ran".
func (u *SoftirqUse) clause() string {
	what := "softirq work"
	switch u.Kind {
	case "":
	case "NET_RX":
		what = "NET_RX softirq work (network receive processing)"
	case "NET_TX":
		what = "NET_TX softirq work (network transmit processing)"
	case "BLOCK":
		what = "BLOCK softirq work (block IO completions)"
	default:
		what = u.Kind + " softirq work"
	}
	return fmt.Sprintf("%s took %d %% of CPU %d, where it ran", what, int(u.Share*100+0.5), u.CPU)
}

// blockIOFrames mark a wait for a block device's IO in a blocked chain
// that went through io_schedule: direct IO, a bio waited for, writeback
// or a buffer head, a journal commit.
var blockIOFrames = []string{"blkdev_", "blk_", "submit_bio_wait", "bio_await", "iomap_dio", "__blockdev_direct_IO", "dio_",
	"folio_wait_writeback", "wait_on_page_writeback", "__wait_on_buffer", "wait_on_buffer", "jbd2", "fdatawait"}

// blockIOWait: the chain waits for a block device.
func blockIOWait(stack []string) bool {
	return hasAny(stack, []string{"io_schedule"}) && hasAny(stack, blockIOFrames)
}

// ProcessWork is what the request's process's other threads did while it
// was served: their time in reclaim (of any kind, the longest kind) and
// blocked on block IO, summed over the threads.
type ProcessWork struct {
	PID     int32       `json:"pid"`
	Reclaim *KernelWork `json:"reclaim,omitempty"`
	// BlockIO is their blocked time in block device waits (What "block
	// IO"; Waits the stretches) and Stack the chain of the longest.
	BlockIO *KernelWork `json:"block_io,omitempty"`
	Stack   []string    `json:"block_io_stack,omitempty"`
	// Threads are how many threads each held.
	ReclaimThreads int `json:"reclaim_threads,omitempty"`
	IOThreads      int `json:"io_threads,omitempty"`
}

// samplePeriod is the timer's spacing on one CPU: the median gap between
// a CPU's consecutive samples (a sample per period on each CPU, idle or
// not), or 0 without two samples on a CPU.
func (tr *Trace) samplePeriod() int64 {
	if tr.period != 0 {
		return tr.period
	}
	last := map[int32]int64{}
	var gaps []int64
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.Kind != KindSample {
			continue
		}
		if t, ok := last[e.CPU]; ok && e.T > t && e.T-t < int64(time.Second) {
			gaps = append(gaps, e.T-t)
		}
		last[e.CPU] = e.T
		if len(gaps) >= 4096 {
			break
		}
	}
	if len(gaps) == 0 {
		return 0
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	tr.period = gaps[len(gaps)/2]
	return tr.period
}

// processWork sums, over [from, to), the reclaim and block IO of the
// threads of tid's process other than tid: their blocked stretches whose
// chains say it, and their timer samples whose chains say reclaim (one
// period each). nil when the trace does not name tid's process.
func (tr *Trace) processWork(tid int32, from, to int64) *ProcessWork {
	pid, ok := tr.procs[tid]
	if !ok || pid <= 0 {
		return nil
	}
	mine := func(t int32) bool { return t != tid && t > 0 && tr.procs[t] == pid }
	type open struct {
		start int64
		stack int32
	}
	blocked := map[int32]*open{}
	pw := &ProcessWork{PID: pid}
	reclaim := map[string]*KernelWork{}
	reclaimBy := map[string]map[int32]bool{}
	ioBy := map[int32]bool{}
	var longestIO int64
	closeAt := func(t int32, at int64) {
		o := blocked[t]
		if o == nil {
			return
		}
		delete(blocked, t)
		d := min(at, to) - max(o.start, from)
		if d <= 0 || o.stack < 0 {
			return
		}
		st := tr.Stacks[o.stack]
		if what := memoryWork(st); what != "" && what != "major faults" {
			w := reclaim[what]
			if w == nil {
				w = &KernelWork{What: what}
				reclaim[what], reclaimBy[what] = w, map[int32]bool{}
			}
			w.Blocked += time.Duration(d)
			w.Waits++
			reclaimBy[what][t] = true
		} else if blockIOWait(st) {
			if pw.BlockIO == nil {
				pw.BlockIO = &KernelWork{What: "block IO"}
			}
			pw.BlockIO.Blocked += time.Duration(d)
			pw.BlockIO.Waits++
			ioBy[t] = true
			if d > longestIO {
				longestIO, pw.Stack = d, st
			}
		}
	}
	period := tr.samplePeriod()
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.T >= to {
			break
		}
		switch e.Kind {
		case KindSwitch:
			if mine(e.Task.TID) && len(e.PrevState) > 0 && e.PrevState[0] == 'R' {
				closeAt(e.Task.TID, e.T) // it ran: a stretch left open by a lost wakeup ends
			}
			if mine(e.Task.TID) && len(e.PrevState) > 0 && e.PrevState[0] != 'R' {
				if o := blocked[e.Task.TID]; o != nil {
					// The blocking switch again, with its chain.
					if e.Stack >= 0 {
						o.stack = e.Stack
					}
				} else {
					blocked[e.Task.TID] = &open{start: e.T, stack: e.Stack}
				}
			}
			if mine(e.Next.TID) {
				closeAt(e.Next.TID, e.T)
			}
		case KindWakeup:
			if mine(e.Target.TID) {
				closeAt(e.Target.TID, e.T)
			}
		case KindSample:
			if mine(e.Task.TID) {
				closeAt(e.Task.TID, e.T)
			}
			if e.T < from || !mine(e.Task.TID) || e.Stack < 0 || period == 0 {
				continue
			}
			if what := memoryWork(tr.Stacks[e.Stack]); what != "" && what != "major faults" {
				w := reclaim[what]
				if w == nil {
					w = &KernelWork{What: what}
					reclaim[what], reclaimBy[what] = w, map[int32]bool{}
				}
				w.OnCPU += time.Duration(period)
				reclaimBy[what][e.Task.TID] = true
			}
		}
	}
	// Those still blocked at the request's end were blocked until then.
	for t := range blocked {
		closeAt(t, to)
	}
	for what, w := range reclaim {
		w.NS = w.OnCPU + w.Blocked
		if pw.Reclaim == nil || w.NS > pw.Reclaim.NS {
			pw.Reclaim, pw.ReclaimThreads = w, len(reclaimBy[what])
		}
	}
	if pw.BlockIO != nil {
		pw.BlockIO.NS = pw.BlockIO.Blocked
		pw.IOThreads = len(ioBy)
	}
	if pw.Reclaim == nil && pw.BlockIO == nil {
		return nil
	}
	return pw
}

// clauses are what a verdict says of the process's threads: the reclaim
// when it held a tenth of the request's time or more, the block IO when
// it held a quarter (summed over threads, so a few threads waiting on a
// disk for the whole request say it); nil when neither did.
func (pw *ProcessWork) clauses(total time.Duration) []string {
	if pw == nil {
		return nil
	}
	var out []string
	if w := pw.Reclaim; w != nil && w.NS >= time.Millisecond && w.NS*10 >= total {
		var s string
		switch w.What {
		case "memory cgroup reclaim":
			s = "in direct reclaim of their memory cgroup"
			if w.Cgroup != "" {
				s += " " + w.Cgroup
			}
			if w.LimitBytes > 0 {
				s += " (limit " + bytesIEC(w.LimitBytes) + ")"
			}
		case "compaction":
			s = "in memory compaction"
		default:
			s = "in direct reclaim (the host was short of free memory)"
		}
		out = append(out, fmt.Sprintf("%s of its process %s %s for %s in all", otherThreads(pw.ReclaimThreads), were(pw.ReclaimThreads), s, ms(w.NS)))
	}
	if w := pw.BlockIO; w != nil && w.NS*4 >= total {
		s := fmt.Sprintf("%s of its process %s blocked in IO on a block device (%s in all", otherThreads(pw.IOThreads), were(pw.IOThreads), ms(w.NS))
		if len(pw.Stack) > 0 {
			s += "; stack " + shortStack(pw.Stack, 4)
		}
		out = append(out, s+")")
	}
	return out
}

func were(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}

func otherThreads(n int) string {
	if n == 1 {
		return "another thread"
	}
	return fmt.Sprintf("%d other threads", n)
}

// threadCPUs are the CPUs the thread ran on, waited for, or blocked
// from (where it is woken, unless it migrates) over segs.
func threadCPUs(segs []Segment) map[int32]bool {
	cpus := map[int32]bool{}
	for _, s := range segs {
		if s.CPU >= 0 {
			cpus[s.CPU] = true
		}
	}
	return cpus
}
