package explain

import (
	"sort"
)

// State is what a thread was doing over a segment of its timeline.
type State uint8

const (
	StateUnknown  State = iota // no event tells (before its first, or lost)
	StateOnCPU                 // running
	StateRunnable              // ready, waiting for a CPU
	StateBlocked               // sleeping or in uninterruptible wait, until a wakeup
)

func (s State) String() string {
	return [...]string{"unknown", "on-cpu", "runnable", "blocked"}[s]
}

// Segment is one stretch of a thread's timeline, [Start, End) in the
// trace's nanoseconds.
type Segment struct {
	State      State
	Start, End int64
	CPU        int32 // where it ran, or the CPU it waited for (-1: not known)
	// For a blocked segment: the call chain it blocked in (-1: not
	// recorded), the state it left in (S, D), and who woke it.
	Stack      int32
	LeftAs     string
	WokenBy    *Task
	WokenOnCPU int32
}

// Timeline returns thread tid's segments that overlap [from, to), clipped
// to it, in time order. Events must be in time order (SortEvents).
func (tr *Trace) Timeline(tid int32, from, to int64) []Segment {
	var out []Segment
	cur := Segment{State: StateUnknown, Start: from, CPU: -1, Stack: -1, WokenOnCPU: -1}
	begin := func(s Segment) {
		if s.Start < cur.Start {
			s.Start = cur.Start
		}
		cur.End = s.Start
		if cur.End > cur.Start && cur.End > from && cur.Start < to {
			c := cur
			c.Start, c.End = max(c.Start, from), min(c.End, to)
			if c.End > c.Start {
				out = append(out, c)
			}
		}
		cur = s
	}
	// Start from the thread's first event, whenever it is: what it did
	// before from follows from it.
	first := true
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.T >= to {
			break
		}
		switch {
		case e.Kind == KindSwitch && e.Task.TID == tid:
			if first {
				cur.State, cur.Start, cur.CPU = StateOnCPU, -1<<62, e.CPU
			}
			next := Segment{Start: e.T, CPU: e.CPU, Stack: -1, WokenOnCPU: -1, LeftAs: e.PrevState}
			if len(e.PrevState) > 0 && e.PrevState[0] == 'R' {
				next.State = StateRunnable
			} else {
				next.State = StateBlocked
				next.Stack = e.Stack
			}
			if cur.State == StateBlocked && next.State == StateBlocked && !first {
				// The same switch again, with its call chain (the
				// profile records blocking switches twice, each event
				// with its own time stamp a few µs apart): a thread
				// cannot block twice without running in between.
				if e.Stack >= 0 {
					cur.Stack = e.Stack
				}
				continue
			}
			begin(next)
		case e.Kind == KindSwitch && e.Next.TID == tid:
			if first {
				cur.State, cur.Start = StateRunnable, -1<<62
			}
			begin(Segment{State: StateOnCPU, Start: e.T, CPU: e.CPU, Stack: -1, WokenOnCPU: -1})
		case e.Kind == KindSample && e.Task.TID == tid:
			// A sample of the thread: it runs, whether or not the
			// switch that gave it the CPU was recorded (this kernel
			// leaves out some switches away from the idle task).
			if first {
				cur.State, cur.Start, cur.CPU = StateOnCPU, -1<<62, e.CPU
			}
			if cur.State == StateOnCPU {
				cur.CPU = e.CPU
				first = false
				continue
			}
			begin(Segment{State: StateOnCPU, Start: e.T, CPU: e.CPU, Stack: -1, WokenOnCPU: -1})
		case e.Kind == KindWakeup && e.Target.TID == tid:
			if first {
				cur.State, cur.Start = StateBlocked, -1<<62
			}
			if cur.State != StateBlocked && cur.State != StateUnknown {
				continue // a wakeup of a thread already runnable
			}
			if cur.State == StateBlocked {
				w := e.Task
				cur.WokenBy, cur.WokenOnCPU = &w, e.CPU
			}
			begin(Segment{State: StateRunnable, Start: e.T, CPU: -1, Stack: -1, WokenOnCPU: -1})
		default:
			continue
		}
		first = false
	}
	begin(Segment{Start: to})
	// A runnable segment waits for the CPU it was next switched in on.
	for i := range out {
		if out[i].State == StateRunnable && out[i].CPU < 0 && i+1 < len(out) && out[i+1].State == StateOnCPU {
			out[i].CPU = out[i+1].CPU
		}
	}
	return out
}

// Occupants returns who had CPU cpu during [from, to): each thread's time
// on it, longest first. The timer samples say it where there are at least
// minSamples of them (each is the CPU's current thread at an instant, so a
// lost or unrecorded switch does not hand the rest of the interval to the
// wrong thread); the switches say it for a shorter interval.
func (tr *Trace) Occupants(cpu int32, from, to int64) []Share {
	if s := tr.sampledOccupants(cpu, from, to); s != nil {
		return s
	}
	return tr.switchedOccupants(cpu, from, to)
}

// minSamples is how many samples sampledOccupants wants: at 99 Hz, 30 ms.
const minSamples = 3

func (tr *Trace) sampledOccupants(cpu int32, from, to int64) []Share {
	by := map[Task]int64{}
	n := 0
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.T >= to {
			break
		}
		if e.Kind == KindSample && e.CPU == cpu && e.T >= from {
			by[e.Task]++
			n++
		}
	}
	if n < minSamples {
		return nil
	}
	for t, c := range by {
		by[t] = (to - from) * c / int64(n)
	}
	return sortShares(by)
}

// switchedOccupants reads the occupants from the switches on cpu.
func (tr *Trace) switchedOccupants(cpu int32, from, to int64) []Share {
	var (
		cur   *Task
		since int64 = from
		by          = map[Task]int64{}
	)
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.Kind != KindSwitch || e.CPU != cpu {
			continue
		}
		if e.T >= to {
			break
		}
		if cur == nil {
			p := e.Task
			cur = &p
		}
		if e.T > from {
			by[*cur] += e.T - max(since, from)
		}
		n := e.Next
		cur, since = &n, e.T
	}
	if cur != nil {
		by[*cur] += to - max(since, from)
	}
	return sortShares(by)
}

// Share is a thread's or a function's part of some time.
type Share struct {
	Task Task
	Name string
	NS   int64
}

func sortShares(by map[Task]int64) []Share {
	out := make([]Share, 0, len(by))
	for t, ns := range by {
		if ns > 0 {
			out = append(out, Share{Task: t, NS: ns})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].NS != out[j].NS {
			return out[i].NS > out[j].NS
		}
		return out[i].Task.TID < out[j].Task.TID
	})
	return out
}

// SortEvents puts the events in time order (perf script writes them so
// already; the sort keeps ties in their order).
func (tr *Trace) SortEvents() {
	sort.SliceStable(tr.Events, func(i, j int) bool { return tr.Events[i].T < tr.Events[j].T })
}
