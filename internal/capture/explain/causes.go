package explain

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The everyday causes a verdict names beside the scheduler's three
// states: a CPU quota that throttled the request's own cgroup, a task of
// another cgroup that held its CPU, direct reclaim or compaction, and
// major page faults. The first two need the host's cgroups (Host, given
// by the recorder that read them around the capture); the last two are
// read from the trace's call chains alone, so any recorder with blocking
// stacks or sampled stacks gets them.

// Host is what a recorder read of the host beside its trace. A capture
// explained without it (an older artifact, a recorder that reads none) is
// explained from the trace alone: no cgroup is named.
type Host struct {
	// Task names a thread's cgroups (read from /proc/<tid>/cgroup when
	// the capture is sealed); false when the thread is gone. It is asked
	// only for the threads a verdict names.
	Task func(tid int32) (TaskCgroups, bool)
	// Quotas are the cgroups that had a CFS quota while the capture was
	// armed, each with its cpu.stat sampled around the window.
	Quotas []CPUQuota
	// Listen is the host's TCP listen queue counters sampled while the
	// capture was armed (the recorder's network namespace), in time order.
	Listen []ListenStat
}

// ListenStat is one reading of the TCP counters of listen queues
// (/proc/net/netstat TcpExt): SYNs and handshakes dropped because an
// accept queue was full (ListenOverflows), and every drop at a listener,
// those included (ListenDrops).
type ListenStat struct {
	At        time.Time `json:"at"`
	Overflows uint64    `json:"listen_overflows"`
	Drops     uint64    `json:"listen_drops"`
}

// ListenOverflows is the counters' growth over the samples that bracket
// a request.
type ListenOverflows struct {
	Overflows uint64    `json:"listen_overflows"`
	Drops     uint64    `json:"listen_drops"`
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
}

// listenDuring is the listen queues' drops between the samples that
// bracket [from, to]; nil when none grew or none bracket it.
func (h *Host) listenDuring(from, to time.Time) *ListenOverflows {
	a, b := -1, -1
	for k, s := range h.Listen {
		if !s.At.After(from) {
			a = k
		}
		if !s.At.Before(to) && b < 0 {
			b = k
		}
	}
	if a < 0 || b <= a {
		return nil
	}
	sa, sb := h.Listen[a], h.Listen[b]
	if sb.Overflows <= sa.Overflows && sb.Drops <= sa.Drops {
		return nil
	}
	return &ListenOverflows{Overflows: sb.Overflows - min(sa.Overflows, sb.Overflows), Drops: sb.Drops - min(sa.Drops, sb.Drops), From: sa.At, To: sb.At}
}

// synRetry is the client's first SYN retransmission timeout (the
// kernel's TCP_TIMEOUT_INIT, 1 s; RFC 6298): a request whose SYN was
// dropped took at least that, less a little for the clocks.
const synRetry = 950 * time.Millisecond

// clause: the listen queue as the request's story, "" when nothing
// overflowed. A request of a second or more may have waited for a SYN
// retry; a shorter one, in the full accept queue itself. The host's
// counters cannot say which listener overflowed: the verdict says it of
// the host, and "likely" of the request.
func (l *ListenOverflows) clause(total time.Duration) string {
	if l == nil {
		return ""
	}
	n, what := l.Overflows, "overflowed"
	if n == 0 {
		n, what = l.Drops, "dropped connections"
	}
	if n == 0 {
		return ""
	}
	s := fmt.Sprintf("the host's TCP listen queues %s %d %s while it was served", what, n, times(n))
	if total < synRetry {
		return "waited before its handler ran, likely in a full accept queue: " + s
	}
	return "waited before its handler ran, likely for a SYN retry: " + s +
		" (a SYN or handshake that finds the accept queue full is dropped, and the client sends it again after 1 s or more)"
}

func times(n uint64) string {
	if n == 1 {
		return "time"
	}
	return "times"
}

// Cgroups is what the verdicts of an analysis used of the Host: the
// evidence behind "throttled" and "of another cgroup", kept in
// explain.json.
type Cgroups struct {
	Tasks  []TaskCgroups `json:"tasks,omitempty"`
	Quotas []CPUQuota    `json:"cpu_quotas,omitempty"`
}

// TaskCgroups are one thread's cgroups, as paths in their controller's
// hierarchy ("/kubepods/burstable/pod…/…").
type TaskCgroups struct {
	TID    int32  `json:"tid"`
	CPU    string `json:"cpu"`
	Memory string `json:"memory,omitempty"`
	// MemoryLimit is the lowest hard limit on Memory's path (v1
	// memory.limit_in_bytes, v2 memory.max) and MemoryHigh the lowest v2
	// memory.high, in bytes; 0 is none.
	MemoryLimit int64 `json:"memory_limit_bytes,omitempty"`
	MemoryHigh  int64 `json:"memory_high_bytes,omitempty"`
}

// CPUQuota is a cgroup with a CFS bandwidth quota (v1 cpu.cfs_quota_us
// over cpu.cfs_period_us, v2 cpu.max) and its cpu.stat over time.
type CPUQuota struct {
	Cgroup   string    `json:"cgroup"`
	QuotaUS  int64     `json:"quota_us"`
	PeriodUS int64     `json:"period_us"`
	Samples  []CPUStat `json:"samples"`
}

// CPUStat is one reading of a cgroup's cpu.stat: its CFS periods, how
// many of them ended throttled, and the time its run queues spent
// throttled (summed over CPUs; v1 throttled_time, v2 throttled_usec).
type CPUStat struct {
	At          time.Time     `json:"at"`
	Periods     uint64        `json:"nr_periods"`
	Throttled   uint64        `json:"nr_throttled"`
	ThrottledNS time.Duration `json:"throttled_ns"`
}

// Throttling is a request's cgroup being CPU-throttled while it was
// served: the quota, and the counters' growth over the samples that
// bracket the request.
type Throttling struct {
	Cgroup      string        `json:"cgroup"`
	QuotaUS     int64         `json:"quota_us"`
	PeriodUS    int64         `json:"period_us"`
	Times       uint64        `json:"nr_throttled"`
	ThrottledNS time.Duration `json:"throttled_ns"`
	From        time.Time     `json:"from"` // the samples the counts are between
	To          time.Time     `json:"to"`
}

// KernelWork is time a request's thread spent in one kind of kernel work
// on behalf of its memory: on CPU (its samples' share) and blocked (its
// blocking switches' chains).
type KernelWork struct {
	// What is "memory cgroup reclaim", "direct reclaim", "compaction" or
	// "major faults".
	What    string        `json:"what"`
	NS      time.Duration `json:"ns"`
	OnCPU   time.Duration `json:"on_cpu_ns"`
	Blocked time.Duration `json:"blocked_ns"`
	// Waits is how many blocked stretches it held: for major faults,
	// the faults that waited.
	Waits int `json:"waits,omitempty"`
	// For reclaim of a memory cgroup: the cgroup and its limits.
	Cgroup     string `json:"cgroup,omitempty"`
	LimitBytes int64  `json:"limit_bytes,omitempty"`
	HighBytes  int64  `json:"high_bytes,omitempty"`
}

// Frames that say what a chain is doing. Reclaim on behalf of a memory
// cgroup, before the generic frames it shares with the node's direct
// reclaim.
var (
	memcgReclaimFrames = []string{"try_to_free_mem_cgroup_pages", "mem_cgroup_handle_over_high", "reclaim_high"}
	reclaimFrames      = []string{"__alloc_pages_direct_reclaim", "__perform_reclaim", "try_to_free_pages", "do_try_to_free_pages",
		"shrink_node", "shrink_lruvec", "shrink_zones", "shrink_folio_list", "shrink_page_list", "reclaim_throttle"}
	compactFrames = []string{"__alloc_pages_direct_compact", "try_to_compact_pages", "compact_zone_order", "compact_zone"}
	faultFrames   = []string{"handle_mm_fault", "do_user_addr_fault", "exc_page_fault"}
	// A fault that waited for its page to be read: the file's
	// (filemap_fault and its read or shared fault) or swap's.
	majorFaultFrames = []string{"filemap_fault", "do_read_fault", "do_shared_fault", "do_swap_page", "swap_read_folio", "swap_readpage",
		"folio_wait_bit", "__folio_lock", "filemap_read_folio", "page_cache_ra_"}
)

// memoryWork classifies a chain: "" when it is none of the kinds.
func memoryWork(stack []string) string {
	switch {
	case hasExact(stack, memcgReclaimFrames):
		return "memory cgroup reclaim"
	case hasExact(stack, compactFrames):
		return "compaction"
	case hasExact(stack, reclaimFrames):
		return "direct reclaim"
	case hasExact(stack, faultFrames) && hasAny(stack, majorFaultFrames):
		return "major faults"
	}
	return ""
}

// hasExact: some frame is one of names (hasAny matches parts).
func hasExact(stack []string, names []string) bool {
	for _, f := range stack {
		for _, n := range names {
			if f == n {
				return true
			}
		}
	}
	return false
}

// memoryCauses sums the thread's kernel memory work over its timeline:
// each blocked stretch whose chain says it, and the share of its on-CPU
// time whose samples do. It returns the reclaim (of any kind) and the
// major faults, nil where there were none.
func (tr *Trace) memoryCauses(tid int32, segs []Segment, from, to int64, onCPU time.Duration) (reclaim, faults *KernelWork) {
	by := map[string]*KernelWork{}
	get := func(what string) *KernelWork {
		w := by[what]
		if w == nil {
			w = &KernelWork{What: what}
			by[what] = w
		}
		return w
	}
	for _, s := range segs {
		if s.State != StateBlocked || s.Stack < 0 {
			continue
		}
		if what := memoryWork(tr.Stacks[s.Stack]); what != "" {
			w := get(what)
			w.Blocked += time.Duration(s.End - s.Start)
			w.Waits++
		}
	}
	samples, kinds := 0, map[string]int{}
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.T >= to {
			break
		}
		if e.Kind != KindSample || e.Task.TID != tid || e.T < from {
			continue
		}
		samples++
		if e.Stack >= 0 {
			if what := memoryWork(tr.Stacks[e.Stack]); what != "" && what != "major faults" {
				kinds[what]++
			}
		}
	}
	for what, n := range kinds {
		get(what).OnCPU = onCPU * time.Duration(n) / time.Duration(samples)
	}
	for _, w := range by {
		w.NS = w.OnCPU + w.Blocked
		if w.What == "major faults" {
			faults = w
		} else if reclaim == nil || w.NS > reclaim.NS {
			reclaim = w
		}
	}
	return reclaim, faults
}

// throttling finds the quota on cpuPath or one of its ancestors that
// throttled while [from, to] (wall clock) was served: the innermost one
// whose counters grew between the samples that bracket it.
func (h *Host) throttling(cpuPath string, from, to time.Time) *Throttling {
	for p := cpuPath; ; p = parentCgroup(p) {
		for i := range h.Quotas {
			q := &h.Quotas[i]
			if q.Cgroup != p {
				continue
			}
			a, b := -1, -1
			for k, s := range q.Samples {
				if !s.At.After(from) {
					a = k
				}
				if !s.At.Before(to) && b < 0 {
					b = k
				}
			}
			if a < 0 || b < 0 || b <= a {
				continue
			}
			sa, sb := q.Samples[a], q.Samples[b]
			if sb.Throttled > sa.Throttled {
				return &Throttling{Cgroup: q.Cgroup, QuotaUS: q.QuotaUS, PeriodUS: q.PeriodUS,
					Times: sb.Throttled - sa.Throttled, ThrottledNS: sb.ThrottledNS - sa.ThrottledNS, From: sa.At, To: sb.At}
			}
		}
		if p == "/" || p == "" {
			return nil
		}
	}
}

// parentCgroup is "/a" for "/a/b", "/" for "/a".
func parentCgroup(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// cgroupName is how a verdict names a cgroup: its path, "the root
// cgroup" for "/".
func cgroupName(p string) string {
	if p == "/" {
		return "the root cgroup"
	}
	return p
}

// hostCauses fills the verdict's cgroup findings from the host: the
// thread's cgroup, its throttling, each runnable-behind task's cgroup,
// and the memory limits of its reclaim. used collects what was read.
func (v *RequestVerdict) hostCauses(h *Host, used *Cgroups, behind []Task) {
	if h == nil || h.Task == nil {
		return
	}
	seen := map[int32]bool{}
	task := func(tid int32) (TaskCgroups, bool) {
		tc, ok := h.Task(tid)
		if ok && !seen[tid] && used != nil {
			seen[tid] = true
			used.Tasks = append(used.Tasks, tc)
		}
		return tc, ok
	}
	v.Listen = h.listenDuring(v.Request.Start, v.Request.End)
	own, ok := task(int32(v.Request.ThreadID))
	if ok {
		v.Cgroup = own.CPU
		if th := h.throttling(own.CPU, v.Request.Start, v.Request.End); th != nil {
			v.Throttled = th
			if used != nil {
				for _, q := range h.Quotas {
					if q.Cgroup == th.Cgroup && !hasQuota(used.Quotas, q.Cgroup) {
						used.Quotas = append(used.Quotas, q)
					}
				}
			}
		}
		if v.Reclaim != nil && v.Reclaim.What == "memory cgroup reclaim" {
			v.Reclaim.Cgroup, v.Reclaim.LimitBytes, v.Reclaim.HighBytes = own.Memory, own.MemoryLimit, own.MemoryHigh
		}
		// The process's other threads are in its memory cgroup too.
		if v.Process != nil && v.Process.Reclaim != nil && v.Process.Reclaim.What == "memory cgroup reclaim" {
			w := v.Process.Reclaim
			w.Cgroup, w.LimitBytes, w.HighBytes = own.Memory, own.MemoryLimit, own.MemoryHigh
		}
	}
	for i, t := range behind {
		if t.TID == 0 || i >= len(v.RunnableBehind) {
			continue
		}
		if tc, ok := task(t.TID); ok {
			v.RunnableBehind[i].Cgroup = tc.CPU
		}
	}
}

func hasQuota(qs []CPUQuota, cgroup string) bool {
	for _, q := range qs {
		if q.Cgroup == cgroup {
			return true
		}
	}
	return false
}

// throttled reports whether the runnable time is (in part) the quota's:
// the cgroup was throttled while the request ran, for a quarter of the
// runnable time or more; only, when for half of it or more, so that who
// else held the CPU is not the story. The counters sum every CPU's
// throttled time over the samples' bracket, so they can only be
// generous; a thread that also waited behind others (a busy CPU drains
// its quota slowly) is throttled for less of its runnable time.
func (v *RequestVerdict) throttled() (throttled, only bool) {
	if v.Throttled == nil || v.Throttled.Times == 0 || v.Throttled.ThrottledNS*4 < v.Runnable {
		return false, false
	}
	return true, v.Throttled.ThrottledNS*2 >= v.Runnable
}

// clause: "while its cgroup /kubepods/…/pod… was CPU-throttled (quota
// 0.5 CPU: 50 ms per 100 ms; throttled 4 times, 380 ms, meanwhile)".
func (t *Throttling) clause() string {
	cpus := float64(t.QuotaUS) / float64(max(t.PeriodUS, 1))
	times := "times"
	if t.Times == 1 {
		times = "time"
	}
	return "while " + t.said(cpus, times) + ", meanwhile)"
}

// said: "its cgroup /x was CPU-throttled (quota 0.5 CPU: 50 ms per 100
// ms; throttled 4 times, 380 ms", without the closing parenthesis.
func (t *Throttling) said(cpus float64, times string) string {
	return fmt.Sprintf("its cgroup %s was CPU-throttled (quota %s CPU: %s per %s; throttled %d %s, %s",
		t.Cgroup, strconv.FormatFloat(float64(int64(cpus*100+0.5))/100, 'f', -1, 64),
		ms(time.Duration(t.QuotaUS)*time.Microsecond), ms(time.Duration(t.PeriodUS)*time.Microsecond), t.Times, times, ms(t.ThrottledNS))
}

// throttledAround is the throttling as what happened around a thread
// that was not runnable (blocked on a futex, a lock, a channel): its
// cgroup's other threads, the ones it waited for, were held back, for a
// quarter of the request or more. "" otherwise.
func (v *RequestVerdict) throttledAround(total time.Duration) string {
	t := v.Throttled
	if t == nil || t.Times == 0 || t.ThrottledNS*4 < total {
		return ""
	}
	times := "times"
	if t.Times == 1 {
		times = "time"
	}
	return t.said(float64(t.QuotaUS)/float64(max(t.PeriodUS, 1)), times) + ")"
}

// memoryCause is the memory cause that took 1/part or more of the
// request, the longest: "in direct reclaim of its memory cgroup /x
// (limit 256 MiB) for 120 ms", "waited 90 ms on major page faults (3
// faults)"; "" when none did. A quarter of the request leads the verdict;
// a tenth follows its state.
func (v *RequestVerdict) memoryCause(total time.Duration, part int64) string {
	var w *KernelWork
	for _, c := range []*KernelWork{v.Reclaim, v.MajorFaults} {
		if c != nil && c.NS >= time.Millisecond && int64(c.NS)*part >= int64(total) && (w == nil || c.NS > w.NS) {
			w = c
		}
	}
	if w == nil {
		return ""
	}
	switch w.What {
	case "major faults":
		n := "faults"
		if w.Waits == 1 {
			n = "fault"
		}
		return fmt.Sprintf("waited %s on major page faults (%d %s)", ms(w.NS), w.Waits, n)
	case "memory cgroup reclaim":
		var lim []string
		if w.LimitBytes > 0 {
			lim = append(lim, "limit "+bytesIEC(w.LimitBytes))
		}
		if w.HighBytes > 0 {
			lim = append(lim, "high "+bytesIEC(w.HighBytes))
		}
		s := "in direct reclaim of its memory cgroup"
		if w.Cgroup != "" {
			s += " " + w.Cgroup
		}
		if len(lim) > 0 {
			s += " (" + strings.Join(lim, ", ") + ")"
		}
		return s + " for " + ms(w.NS)
	case "compaction":
		return "in memory compaction (an allocation waiting for contiguous pages) for " + ms(w.NS)
	default:
		return "in direct reclaim (the host was short of free memory) for " + ms(w.NS)
	}
}

// bytesIEC is a size as a limit is read: "256 MiB", "1.5 GiB".
func bytesIEC(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, u := float64(n), 0
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	return strconv.FormatFloat(float64(int64(f*10+0.5))/10, 'f', -1, 64) + " " + units[u]
}
