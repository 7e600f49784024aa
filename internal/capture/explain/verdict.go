package explain

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// RequestVerdict is what a slow request's thread did while it was served.
type RequestVerdict struct {
	Request  record.RequestRecord `json:"request"`
	Thread   string               `json:"thread"` // comm[tid], as the scheduler named it
	OnCPU    time.Duration        `json:"on_cpu_ns"`
	Runnable time.Duration        `json:"runnable_ns"`
	Blocked  time.Duration        `json:"blocked_ns"`
	Unknown  time.Duration        `json:"unknown_ns"` // no event tells: before the trace, or lost
	// BlockedIn is the longest blocked stretch's call chain, innermost
	// first, and BlockingCall the first frame of it that is not the
	// scheduler's own; WokenBy who ended that stretch.
	BlockedIn    []string `json:"blocked_in,omitempty"`
	BlockingCall string   `json:"blocking_call,omitempty"`
	LeftAs       string   `json:"left_as,omitempty"`
	WokenBy      string   `json:"woken_by,omitempty"`
	// RunnableBehind is who held the CPU while the thread waited for it,
	// longest first, and RunnableCPU that CPU.
	RunnableBehind []ShareView `json:"runnable_behind,omitempty"`
	RunnableCPU    int32       `json:"runnable_cpu"`
	// Recorder is the capture's own recorder's time on that CPU (its
	// busiest thread, with the sum of them all), left out of
	// RunnableBehind: overhead the capture added, not a cause.
	Recorder *ShareView `json:"runnable_behind_recorder,omitempty"`
	// Segments is the thread's timeline during the request.
	Segments []SegmentView `json:"segments"`
	// IO holds the blocked time against the block devices' requests
	// (the ftrace profile; nil without block events or blocked time).
	IO *WaitIO `json:"io,omitempty"`
	// Cgroup is the thread's cgroup (cpu controller), Throttled its CFS
	// quota's throttling while the request ran: both known only from a
	// recorder that read the host's cgroups (Host).
	Cgroup    string      `json:"cgroup,omitempty"`
	Throttled *Throttling `json:"throttled,omitempty"`
	// Reclaim and MajorFaults are its time in direct reclaim or
	// compaction, and waiting on major page faults, read from its
	// chains (causes.go); nil when there was none.
	Reclaim     *KernelWork `json:"reclaim,omitempty"`
	MajorFaults *KernelWork `json:"major_faults,omitempty"`
	// Softirq is the softirq work on the CPUs it ran on or waited for,
	// and Process what its process's other threads spent in reclaim and
	// block IO, while it was served (meanwhile.go); nil when the trace
	// has none.
	Softirq *SoftirqUse  `json:"softirq,omitempty"`
	Process *ProcessWork `json:"process,omitempty"`
	// Listen is the host's listen queue overflows while it was served,
	// known only from a recorder that sampled them (Host).
	Listen  *ListenOverflows `json:"listen,omitempty"`
	Verdict string           `json:"verdict"`
}

// ShareView is a Share as the analysis writes it.
type ShareView struct {
	Who string        `json:"who"`
	NS  time.Duration `json:"ns"`
	// Cgroup is the task's cgroup when the recorder read it (Host).
	Cgroup string `json:"cgroup,omitempty"`
}

// SegmentView is a Segment in wall-clock time.
type SegmentView struct {
	State string    `json:"state"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	CPU   int32     `json:"cpu"`
}

// schedulerFrames are the functions a blocked thread's chain passes
// through on its way to __schedule: they say that it slept, not why.
var schedulerFrames = map[string]bool{
	"__schedule": true, "schedule": true, "schedule_timeout": true, "io_schedule": true,
	"schedule_hrtimeout_range_clock": true, "schedule_hrtimeout_range": true, "io_schedule_timeout": true,
	"schedule_preempt_disabled": true, "preempt_schedule_common": true, "__cond_resched": true,
	"schedule_timeout_interruptible": true, "schedule_timeout_uninterruptible": true,
}

// isSchedulerFrame: the scheduler's own functions, and the tracing frames
// a chain recorded at the sched_switch tracepoint may start with.
func isSchedulerFrame(f string) bool {
	return schedulerFrames[f] || strings.HasPrefix(f, "__traceiter_") || strings.HasPrefix(f, "__bpf_trace_") ||
		strings.HasPrefix(f, "perf_trace_") || strings.HasPrefix(f, "trace_event_raw_event_")
}

// timerFrames mark a sleep that ends by itself: its wakeup comes from a
// timer, whoever's context it ran in. Not schedule_timeout nor
// schedule_hrtimeout: a wait for an IO completion, a futex or a socket
// goes through them with a timeout, and what ends it is the event.
var timerFrames = []string{"nanosleep", "msleep", "usleep"}

// ExplainRequest builds the verdict of one request from the trace. clock
// maps the trace's times to the wall clock (wall = ts + Offset).
func (tr *Trace) ExplainRequest(q record.RequestRecord, clock record.Clock) RequestVerdict {
	return tr.explainRequest(q, clock, nil, nil, nil)
}

// ExplainRequestOn is ExplainRequest with what the recorder read of the
// host (its cgroups), which names throttling and other cgroups' tasks.
func (tr *Trace) ExplainRequestOn(q record.RequestRecord, clock record.Clock, h *Host) RequestVerdict {
	return tr.explainRequest(q, clock, nil, h, nil)
}

// explainRequest is ExplainRequest, with the blocked time held against
// the window's block requests when io is not nil, and the host's cgroups
// when h is not nil (what it used of them added to used).
func (tr *Trace) explainRequest(q record.RequestRecord, clock record.Clock, io *BlockIO, h *Host, used *Cgroups) RequestVerdict {
	v := RequestVerdict{Request: q, RunnableCPU: -1, Thread: fmt.Sprintf("thread %d", q.ThreadID)}
	from := q.Start.UnixNano() - int64(clock.Offset)
	to := q.End.UnixNano() - int64(clock.Offset)
	if q.ThreadID == 0 || to <= from {
		v.Verdict = "no thread id was reported with this request: its thread's timeline cannot be found"
		return v
	}
	tid := int32(q.ThreadID)
	segs := tr.Timeline(tid, from, to)
	if name := tr.threadName(tid); name != "" {
		v.Thread = fmt.Sprintf("%s[%d]", name, tid)
	}
	var longestBlocked, longestRunnable *Segment
	for i := range segs {
		s := &segs[i]
		d := time.Duration(s.End - s.Start)
		switch s.State {
		case StateOnCPU:
			v.OnCPU += d
		case StateRunnable:
			v.Runnable += d
			if longestRunnable == nil || s.End-s.Start > longestRunnable.End-longestRunnable.Start {
				longestRunnable = s
			}
		case StateBlocked:
			v.Blocked += d
			if longestBlocked == nil || s.End-s.Start > longestBlocked.End-longestBlocked.Start {
				longestBlocked = s
			}
		default:
			v.Unknown += d
		}
		v.Segments = append(v.Segments, SegmentView{State: s.State.String(), CPU: s.CPU,
			Start: time.Unix(0, s.Start+int64(clock.Offset)).UTC(), End: time.Unix(0, s.End+int64(clock.Offset)).UTC()})
	}
	if longestBlocked != nil {
		v.LeftAs = longestBlocked.LeftAs
		if longestBlocked.Stack >= 0 {
			v.BlockedIn = tr.Stacks[longestBlocked.Stack]
			v.BlockingCall = blockingCall(v.BlockedIn)
		}
		switch {
		case hasAny(v.BlockedIn, timerFrames):
			v.WokenBy = "its timer"
		case longestBlocked.WokenBy != nil && longestBlocked.WokenBy.TID == 0:
			v.WokenBy = fmt.Sprintf("an interrupt on idle CPU %d", longestBlocked.WokenOnCPU)
		case longestBlocked.WokenBy != nil:
			v.WokenBy = fmt.Sprintf("%s on CPU %d", longestBlocked.WokenBy, longestBlocked.WokenOnCPU)
		}
	}
	var behind []Task
	if longestRunnable != nil && longestRunnable.CPU >= 0 {
		// Who held the CPU the thread waited for longest, summed over
		// every runnable stretch on it: a stretch the trace holds little
		// of (a ring that wrapped) is made up by the others.
		v.RunnableCPU = longestRunnable.CPU
		by, own := map[Task]int64{}, map[Task]int64{}
		for _, seg := range segs {
			if seg.State != StateRunnable || seg.CPU != v.RunnableCPU {
				continue
			}
			for _, s := range tr.Occupants(seg.CPU, seg.Start, seg.End) {
				switch {
				case s.Task.TID == tid:
				case tr.isRecorder(s.Task):
					own[s.Task] += s.NS
				default:
					by[s.Task] += s.NS
				}
			}
		}
		if shares := sortShares(own); len(shares) > 0 {
			v.Recorder = &ShareView{Who: shares[0].Task.String()}
			for _, s := range shares {
				v.Recorder.NS += time.Duration(s.NS)
			}
		}
		for _, s := range sortShares(by) {
			v.RunnableBehind = append(v.RunnableBehind, ShareView{Who: s.Task.String(), NS: time.Duration(s.NS)})
			behind = append(behind, s.Task)
			if len(v.RunnableBehind) == 3 {
				break
			}
		}
	}
	if io != nil {
		v.IO = waitIO(segs, io)
	}
	v.Reclaim, v.MajorFaults = tr.memoryCauses(tid, segs, from, to, v.OnCPU)
	if u := tr.softirqDuring(threadCPUs(segs), from, to); u != nil && u.Softirq > 0 {
		v.Softirq = u
	}
	v.Process = tr.processWork(tid, from, to)
	v.hostCauses(h, used, behind)
	v.Verdict = v.sentence()
	if v.IO != nil {
		v.Verdict += "; " + v.IO.Sentence
	}
	return v
}

// sentence is the one-line verdict: the largest of the three times, with
// what explains it.
func (v *RequestVerdict) sentence() string {
	total := v.OnCPU + v.Runnable + v.Blocked + v.Unknown
	if total == 0 {
		return "the request has no duration"
	}
	if v.Unknown*2 > total {
		return fmt.Sprintf("%s: no scheduler events for %s of its %s (it started before the trace, or events were lost)",
			v.Thread, ms(v.Unknown), ms(total))
	}
	var b strings.Builder
	lead := v.memoryCause(total, 4)
	if l := v.Listen.clause(total); l != "" {
		// Before the handler ran: the thread's timeline is then of
		// other work, and the listen queue is the story.
		b.WriteString(l)
		b.WriteString("; its thread: ")
	}
	if lead != "" {
		b.WriteString(lead)
		b.WriteString("; ")
	}
	switch {
	case v.Blocked >= v.Runnable && v.Blocked >= v.OnCPU:
		fmt.Fprintf(&b, "blocked %s", ms(v.Blocked))
		if v.IO == nil && blockIOWait(v.BlockedIn) && memoryWork(v.BlockedIn) == "" {
			// Reclaim that waits for writeback is reclaim; with the
			// block events (IO), their sentence names the device.
			b.WriteString(" waiting on a block device")
		}
		if v.BlockingCall != "" {
			fmt.Fprintf(&b, " in %s", v.BlockingCall)
		}
		if len(v.BlockedIn) > 0 {
			fmt.Fprintf(&b, " (stack %s)", shortStack(v.BlockedIn, 4))
		} else if v.LeftAs != "" {
			fmt.Fprintf(&b, " (state %s; the profile records no stack at blocking switches)", v.LeftAs)
		}
		if v.WokenBy != "" {
			fmt.Fprintf(&b, "; woken by %s", v.WokenBy)
		}
	case v.Runnable >= v.OnCPU:
		fmt.Fprintf(&b, "runnable %s", ms(v.Runnable))
		throttled, only := v.throttled()
		if throttled {
			fmt.Fprintf(&b, " %s", v.Throttled.clause())
		}
		if len(v.RunnableBehind) > 0 && !only {
			if throttled {
				b.WriteString(" and")
			}
			fmt.Fprintf(&b, " behind %s", v.RunnableBehind[0].Who)
			soft := v.behindKsoftirqd()
			if soft && v.Softirq != nil && v.Softirq.Kind != "" {
				// The softirq thread's work, named as the kernel does;
				// a kernel thread's cgroup (the root) says nothing.
				fmt.Fprintf(&b, " (%s softirq work)", v.Softirq.Kind)
			}
			// Another cgroup's task: the neighbour to name.
			if c := v.RunnableBehind[0].Cgroup; c != "" && v.Cgroup != "" && c != v.Cgroup && !soft {
				fmt.Fprintf(&b, " of %s", cgroupName(c))
			}
			fmt.Fprintf(&b, " on CPU %d", v.RunnableCPU)
		} else if v.RunnableCPU >= 0 && !throttled {
			fmt.Fprintf(&b, " waiting for CPU %d", v.RunnableCPU)
		}
	default:
		fmt.Fprintf(&b, "on CPU %s", ms(v.OnCPU))
	}
	// What happened around the thread: it waited on its process's other
	// threads, or for a CPU that softirq work held. A thread runnable
	// behind ksoftirqd says so already.
	var around []string
	if !v.mostlyRunnable() {
		// A runnable thread's throttling is in its state's clause.
		if c := v.throttledAround(total); c != "" {
			around = append(around, c)
		}
	}
	if v.Softirq.matters(total) && !v.behindKsoftirqd() {
		around = append(around, v.Softirq.clause())
	}
	around = append(around, v.Process.clauses(total)...)
	if c := v.recorderClause(); c != "" {
		around = append(around, c)
	}
	if len(around) > 0 {
		fmt.Fprintf(&b, "; meanwhile %s", strings.Join(around, ", and "))
	}
	if lead == "" {
		if c := v.memoryCause(total, 10); c != "" {
			fmt.Fprintf(&b, "; %s", c)
		}
	}
	fmt.Fprintf(&b, "; %s of the request on %s: on CPU %s, runnable %s, blocked %s", ms(total), v.Thread, ms(v.OnCPU), ms(v.Runnable), ms(v.Blocked))
	return b.String()
}

// recorderClause says how long the capture's own recorder held the CPU
// the thread waited for, when that was a tenth of its runnable time or
// more: the reader weighs the capture's overhead against the cause.
func (v *RequestVerdict) recorderClause() string {
	if v.Recorder == nil || v.Runnable <= 0 || 10*v.Recorder.NS < v.Runnable {
		return ""
	}
	return fmt.Sprintf("the capture's own recorder %s held CPU %d for %s of the runnable time", v.Recorder.Who, v.RunnableCPU, ms(v.Recorder.NS))
}

// mostlyRunnable: the verdict's state is runnable (sentence's order:
// blocked wins a tie, then runnable, then on CPU).
func (v *RequestVerdict) mostlyRunnable() bool {
	return !(v.Blocked >= v.Runnable && v.Blocked >= v.OnCPU) && v.Runnable >= v.OnCPU
}

// behindKsoftirqd: the verdict is runnable, and the CPU it waited for was
// ksoftirqd's most.
func (v *RequestVerdict) behindKsoftirqd() bool {
	return v.mostlyRunnable() && len(v.RunnableBehind) > 0 && strings.HasPrefix(v.RunnableBehind[0].Who, "ksoftirqd/")
}

// blockingCall is the first frame of a blocked chain that is not the
// scheduler's: do_nanosleep, futex_wait_queue, io_schedule's caller.
func blockingCall(stack []string) string {
	for _, f := range stack {
		if !isSchedulerFrame(f) {
			return f
		}
	}
	return ""
}

// shortStack is the chain's first n frames past the scheduler's, then the
// outermost user-space one if it was left out: "do_nanosleep ←
// hrtimer_nanosleep ← … ← clock_nanosleep@GLIBC_2.2.5".
func shortStack(stack []string, n int) string {
	var keep []string
	for _, f := range stack {
		if isSchedulerFrame(f) && len(keep) == 0 {
			continue
		}
		keep = append(keep, f)
	}
	if len(keep) <= n {
		return strings.Join(keep, " ← ")
	}
	last := ""
	for i := len(keep) - 1; i >= n; i-- {
		if keep[i] != "[unknown]" {
			last = keep[i]
			break
		}
	}
	out := strings.Join(keep[:n], " ← ")
	if last != "" {
		out += " ← … ← " + last
	}
	return out
}

func hasAny(stack []string, parts []string) bool {
	for _, f := range stack {
		for _, p := range parts {
			if strings.Contains(f, p) {
				return true
			}
		}
	}
	return false
}

// threadName is the name the trace gives tid, the latest one seen.
func (tr *Trace) threadName(tid int32) string {
	name := ""
	for i := range tr.Events {
		e := &tr.Events[i]
		switch {
		case e.Task.TID == tid:
			name = e.Task.Comm
		case e.Kind == KindSwitch && e.Next.TID == tid:
			name = e.Next.Comm
		case e.Kind == KindWakeup && e.Target.TID == tid:
			name = e.Target.Comm
		}
	}
	return name
}

// ms is a duration as people read it in a verdict: "998 ms", "1.25 s", "40 µs".
func ms(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%d ms", d.Round(time.Millisecond)/time.Millisecond)
	default:
		return fmt.Sprintf("%d µs", d.Round(time.Microsecond)/time.Microsecond)
	}
}

// SlowRequests picks the requests to explain: those at or above threshold
// (all when it is zero), slowest first, at most n.
func SlowRequests(reqs []record.RequestRecord, threshold time.Duration, n int) []record.RequestRecord {
	var out []record.RequestRecord
	for _, q := range reqs {
		// LatencyMS went through a float: a µs of slack keeps a request
		// exactly at the threshold.
		if threshold == 0 || time.Duration(q.LatencyMS*float64(time.Millisecond))+time.Microsecond >= threshold {
			out = append(out, q)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].LatencyMS > out[j].LatencyMS })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// VerdictGroup is requests whose verdicts say the same thing but for
// their times and thread: one line of the text output and the page
// instead of one a request.
type VerdictGroup struct {
	// Requests are the group's verdicts, slowest first: the first one's
	// verdict is the one shown.
	Requests []RequestVerdict
	// Endpoints are "service endpoint" and their counts, Threads the
	// threads, each in the order of their slowest request.
	Endpoints []Counted
	Threads   []string
}

// Counted is a name and how many requests it covers.
type Counted struct {
	Name string
	N    int
}

// durationWords are ms's output: "998 ms", "1.25 s", "40 µs".
var durationWords = regexp.MustCompile(`\d+(\.\d+)? (s|ms|µs)\b`)

// verdictShape is a verdict with its times and its thread's name taken
// out: what two requests share when they waited the same way.
func verdictShape(v RequestVerdict) string {
	s := v.Verdict
	if v.Thread != "" {
		s = strings.ReplaceAll(s, v.Thread, "<thread>")
	}
	return durationWords.ReplaceAllString(s, "<t>")
}

// GroupVerdicts folds the requests (slowest first, as Analysis.Requests)
// whose verdicts differ only in their times and thread, keeping the
// order of each group's slowest request. A stall that holds a dozen
// requests reads as one group, not a dozen copies of one sentence.
func GroupVerdicts(reqs []RequestVerdict) []VerdictGroup {
	var out []VerdictGroup
	at := map[string]int{}
	for _, v := range reqs {
		k := verdictShape(v)
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, VerdictGroup{})
		}
		g := &out[i]
		g.Requests = append(g.Requests, v)
		g.Endpoints = addCounted(g.Endpoints, v.Request.Service+" "+v.Request.Endpoint)
		if !slices.Contains(g.Threads, v.Thread) {
			g.Threads = append(g.Threads, v.Thread)
		}
	}
	return out
}

func addCounted(cs []Counted, name string) []Counted {
	for i := range cs {
		if cs[i].Name == name {
			cs[i].N++
			return cs
		}
	}
	return append(cs, Counted{Name: name, N: 1})
}

// Covers is what a group of more than one request covers, in words:
// "13 requests with this verdict, 342–1001 ms (checkout /v1/cart ×12,
// checkout /v1/orders/save ×1), on thread spikehunt[18335]", the
// endpoints most requests first; the times in the verdict shown are the
// slowest's.
func (g VerdictGroup) Covers() string {
	var eps []string
	by := slices.Clone(g.Endpoints)
	slices.SortStableFunc(by, func(a, b Counted) int { return b.N - a.N })
	for _, e := range by {
		eps = append(eps, fmt.Sprintf("%s ×%d", e.Name, e.N))
	}
	fast, slow := g.Requests[len(g.Requests)-1].Request.LatencyMS, g.Requests[0].Request.LatencyMS
	span := fmt.Sprintf("%.0f ms", slow)
	if fmt.Sprintf("%.0f", fast) != fmt.Sprintf("%.0f", slow) {
		span = fmt.Sprintf("%.0f–%.0f ms", fast, slow)
	}
	threads := "on thread " + g.Threads[0]
	if len(g.Threads) > 1 {
		threads = fmt.Sprintf("on %d threads (%s)", len(g.Threads), strings.Join(g.Threads, ", "))
	}
	return fmt.Sprintf("%d requests with this verdict, %s (%s), %s", len(g.Requests), span, strings.Join(eps, ", "), threads)
}
