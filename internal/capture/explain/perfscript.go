package explain

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ScriptFields is the -F of the perf script run whose text Parse reads:
// each event's header on one line (task, process and thread, CPU, time,
// event, the tracepoint's fields) and its call chain, when recorded, one
// frame a line beneath it. The process ("pid/tid") lets a verdict ask
// what the request's other threads did; a text without it (an older
// artifact's, "tid" alone) still reads.
const ScriptFields = "comm,pid,tid,cpu,time,event,trace,ip,sym,dso"

// Kind is what an event is.
type Kind uint8

const (
	KindSample Kind = iota + 1 // cpu-clock: a thread on a CPU at an instant
	KindSwitch                 // sched:sched_switch: Prev leaves the CPU, Next takes it
	KindWakeup                 // sched:sched_wakeup: Target becomes runnable
)

// Task is a thread as the scheduler names it.
type Task struct {
	Comm string
	TID  int32
}

func (t Task) String() string { return fmt.Sprintf("%s[%d]", t.Comm, t.TID) }

// Event is one record of the trace. Times are perf's, in nanoseconds of the
// recording clock (CLOCK_MONOTONIC with -k mono).
type Event struct {
	Kind Kind
	T    int64
	CPU  int32
	// Task is who was on the CPU: the sampled thread, the one switching
	// out, or the waker.
	Task Task
	// PrevState is the state a switched-out thread left in: "R" or "R+"
	// (preempted, still runnable), "S" (sleeping), "D" (uninterruptible,
	// usually IO), "I" (idle kernel thread), ...
	PrevState string
	// Next is the thread a switch gives the CPU to; Target the thread a
	// wakeup makes runnable.
	Next, Target Task
	// Stack is the call chain, innermost frame first; -1 when none was
	// recorded (Trace.Stacks holds the frames).
	Stack int32
}

// Trace is a parsed perf script text.
type Trace struct {
	Events []Event
	// Stacks are the distinct call chains, innermost frame first.
	Stacks [][]string
	// Truncated says the text held more than the limits let Parse keep:
	// the conclusions cover the events before it.
	Truncated string

	stackIDs map[string]int32
	lim      Limits
	// procs maps a thread to its process, as the events' headers name
	// them (empty for a text without the pid field).
	procs map[int32]int32
	// period is the timer samples' spacing, read from them (0: not yet).
	period int64
	// recorder is the capture's own recording processes (SetRecorder).
	recorder map[int32]bool
}

// Limits bound what Parse keeps of a text: it comes from a file on the
// node and its size follows the ring, but a bound keeps one capture from
// taking the agent's memory.
type Limits struct {
	MaxEvents int // events kept; 0 means DefaultLimits'
	MaxFrames int // frames kept per call chain
	MaxLine   int // bytes of one line
}

// DefaultLimits: two million events (a 4 MiB-per-CPU ring of eight CPUs
// holds about a million), 64 frames, 64 KiB lines.
var DefaultLimits = Limits{MaxEvents: 2_000_000, MaxFrames: 64, MaxLine: 64 << 10}

// ErrSyntax marks text that is not perf script's output with ScriptFields.
var ErrSyntax = errors.New("explain: not perf script output")

// Parse reads one perf script text (ScriptFields) into a new Trace.
func Parse(r io.Reader, lim Limits) (*Trace, error) {
	tr := NewTrace(lim)
	err := tr.Read(r)
	return tr, err
}

// NewTrace returns an empty trace that keeps at most lim.
func NewTrace(lim Limits) *Trace {
	if lim.MaxEvents <= 0 {
		lim.MaxEvents = DefaultLimits.MaxEvents
	}
	if lim.MaxFrames <= 0 {
		lim.MaxFrames = DefaultLimits.MaxFrames
	}
	if lim.MaxLine <= 0 {
		lim.MaxLine = DefaultLimits.MaxLine
	}
	return &Trace{stackIDs: map[string]int32{}, lim: lim, procs: map[int32]int32{}}
}

// SetRecorder names the processes that recorded the trace (perf record):
// the CPU they took is the capture's overhead, which a verdict reports
// apart and never names as who a thread waited behind.
func (tr *Trace) SetRecorder(pids ...int32) {
	for _, p := range pids {
		if p <= 0 {
			continue
		}
		if tr.recorder == nil {
			tr.recorder = map[int32]bool{}
		}
		tr.recorder[p] = true
	}
}

// isRecorder: t is a thread of the recorder's (a thread the headers never
// placed in a process counts as its own process).
func (tr *Trace) isRecorder(t Task) bool {
	if len(tr.recorder) == 0 || t.TID <= 0 {
		return false
	}
	p, ok := tr.procs[t.TID]
	if !ok {
		p = t.TID
	}
	return tr.recorder[p]
}

// Read adds the events of one perf script text (ScriptFields): the dumps
// of one capture are read one after the other. Events it does not know
// are skipped; a line that is neither a header, a frame nor blank is an
// error wrapping ErrSyntax that names the line, and the events before it
// are kept.
func (tr *Trace) Read(r io.Reader) error {
	lim := tr.lim
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), lim.MaxLine)
	var (
		cur    *Event // the event whose call chain follows, if any
		frames []string
		keep   bool // cur is kept (a known event)
		n      int
	)
	flush := func() {
		if cur != nil && keep {
			if len(frames) > 0 {
				cur.Stack = tr.intern(frames)
			}
			tr.Events = append(tr.Events, *cur)
		}
		cur, frames, keep = nil, frames[:0], false
	}
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] == '\t' || (line[0] == ' ' && cur != nil && isFrame(line)):
			if cur == nil {
				return fmt.Errorf("%w: line %d: a call-chain frame without an event: %.80q", ErrSyntax, n, line)
			}
			if len(frames) < lim.MaxFrames {
				frames = append(frames, frameName(line))
			}
		default:
			flush()
			if len(tr.Events) >= lim.MaxEvents {
				tr.Truncated = fmt.Sprintf("only the first %d events were read", lim.MaxEvents)
				return nil
			}
			ev, pid, known, err := parseHeader(line)
			if err != nil {
				return fmt.Errorf("%w: line %d: %v: %.120q", ErrSyntax, n, err, line)
			}
			if pid > 0 && ev.Task.TID > 0 {
				tr.procs[ev.Task.TID] = pid
			}
			cur, keep = &ev, known
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%w: line %d is longer than %d bytes", ErrSyntax, n+1, lim.MaxLine)
		}
		return err
	}
	return nil
}

func (tr *Trace) intern(frames []string) int32 {
	key := strings.Join(frames, "\x00")
	if id, ok := tr.stackIDs[key]; ok {
		return id
	}
	id := int32(len(tr.Stacks))
	tr.Stacks = append(tr.Stacks, append([]string(nil), frames...))
	tr.stackIDs[key] = id
	return id
}

// isFrame: "   ffffffff821f8b58 __schedule ([kernel.kallsyms])".
func isFrame(line string) bool {
	f := strings.Fields(line)
	if len(f) == 0 {
		return false
	}
	_, err := strconv.ParseUint(f[0], 16, 64)
	return err == nil && !strings.Contains(line, "]: ") && !strings.Contains(line, ": ")
}

// frameName is a frame's symbol ("do_nanosleep"), or its address in its
// object when perf had no symbol ("[unknown] libc.so.6+0xcf503").
func frameName(line string) string {
	s := strings.TrimSpace(line)
	addr, rest, _ := strings.Cut(s, " ")
	sym, dso := rest, ""
	if i := strings.LastIndex(rest, " ("); i >= 0 && strings.HasSuffix(rest, ")") {
		sym, dso = rest[:i], rest[i+2:len(rest)-1]
	}
	sym = strings.TrimSpace(sym)
	if plus := strings.LastIndex(sym, "+0x"); plus > 0 {
		sym = sym[:plus]
	}
	if sym == "" || sym == "[unknown]" {
		if dso == "" || dso == "[unknown]" {
			return "[unknown]"
		}
		return "[unknown] " + dso[strings.LastIndex(dso, "/")+1:] + "+0x" + addr
	}
	return sym
}

// parseHeader reads "<comm> <pid>/<tid> [<cpu>] <sec>.<usec>: <event>:
// <fields>" (or "<comm> <tid> …" without the pid field, when pid is 0).
// The comm may hold spaces, so the line is read from the thread id on.
func parseHeader(line string) (ev Event, pid int32, known bool, err error) {
	ev, known, err = parseHeaderAs(line, &pid)
	return ev, pid, known, err
}

// parseHeaderAs is parseHeader, with the process written to *pid.
func parseHeaderAs(line string, pid *int32) (Event, bool, error) {
	ev := Event{Stack: -1}
	lb := strings.Index(line, " [")
	if lb < 0 {
		return ev, false, errors.New("no [cpu]")
	}
	rb := strings.Index(line[lb:], "] ")
	if rb < 0 {
		return ev, false, errors.New("no [cpu]")
	}
	rb += lb
	cpu, err := strconv.ParseInt(line[lb+2:rb], 10, 32)
	if err != nil || cpu < 0 {
		return ev, false, fmt.Errorf("cpu %q", line[lb+2:rb])
	}
	head := strings.TrimRight(line[:lb], " ")
	sp := strings.LastIndexByte(head, ' ')
	ids := strings.TrimSpace(head[sp+1:])
	if p, t, ok := strings.Cut(ids, "/"); ok {
		// The header's thread is the one on the CPU (the switch's
		// prev), so its process is known from here on.
		if n, err := strconv.ParseInt(p, 10, 32); err == nil && n > 0 {
			*pid = int32(n)
		}
		ids = t
	}
	tid, err := strconv.ParseInt(ids, 10, 32)
	if err != nil || tid < -1 {
		return ev, false, fmt.Errorf("thread id %q", head[sp+1:])
	}
	if tid == -1 {
		// perf knows no thread for the record (":-1 -1"): nothing to
		// place on a timeline.
		return ev, false, nil
	}
	ev.CPU = int32(cpu)
	ev.Task = Task{Comm: strings.TrimSpace(head[:max(sp, 0)]), TID: int32(tid)}
	rest := strings.TrimLeft(line[rb+2:], " ")
	ts, rest, ok := strings.Cut(rest, ": ")
	if !ok {
		ts, rest, ok = strings.Cut(rest, ":")
	}
	if !ok {
		return ev, false, errors.New("no time")
	}
	if ev.T, err = parseTime(ts); err != nil {
		return ev, false, err
	}
	name, fields, _ := strings.Cut(rest, ": ")
	name = strings.TrimSuffix(strings.TrimSpace(name), ":")
	switch {
	case name == "sched:sched_switch":
		ev.Kind = KindSwitch
		ev.PrevState = field(fields, "prev_state=", " ")
		ev.Next = Task{Comm: between(fields, "next_comm=", " next_pid="), TID: atoi32(field(fields, "next_pid=", " "))}
		if ev.PrevState == "" || ev.Next.TID < 0 {
			return ev, false, errors.New("sched_switch without prev_state or next_pid")
		}
		// The fields name the thread switching out; trust them over the
		// header, which is the same thread.
		if p := atoi32(field(fields, "prev_pid=", " ")); p >= 0 {
			ev.Task = Task{Comm: between(fields, "prev_comm=", " prev_pid="), TID: p}
		}
		return ev, true, nil
	case name == "sched:sched_wakeup" || name == "sched:sched_waking":
		ev.Kind = KindWakeup
		ev.Target = Task{Comm: between(fields, "comm=", " pid="), TID: atoi32(field(fields, " pid=", " "))}
		if ev.Target.TID < 0 {
			return ev, false, errors.New("sched_wakeup without pid")
		}
		return ev, name == "sched:sched_wakeup", nil
	case strings.HasPrefix(name, "cpu-clock") || strings.HasPrefix(name, "task-clock") || strings.HasPrefix(name, "cycles"):
		ev.Kind = KindSample
		return ev, true, nil
	}
	return ev, false, nil
}

// parseTime reads "22968.366557" (seconds, up to nanoseconds) exactly.
func parseTime(s string) (int64, error) {
	sec, frac, _ := strings.Cut(strings.TrimSpace(s), ".")
	a, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || a < 0 || a > 1<<33 || len(frac) > 9 {
		return 0, fmt.Errorf("time %q", s)
	}
	var b int64
	if frac != "" {
		if b, err = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64); err != nil || b < 0 {
			return 0, fmt.Errorf("time %q", s)
		}
	}
	return a*1e9 + b, nil
}

// field is the value after key up to sep (or the end).
func field(s, key, sep string) string {
	i := strings.Index(s, key)
	if i < 0 {
		return ""
	}
	v := s[i+len(key):]
	if j := strings.Index(v, sep); j >= 0 {
		v = v[:j]
	}
	return v
}

// between is the text after key up to end: a comm may hold spaces.
func between(s, key, end string) string {
	i := strings.Index(s, key)
	if i < 0 {
		return ""
	}
	v := s[i+len(key):]
	if j := strings.Index(v, end); j >= 0 {
		return v[:j]
	}
	return ""
}

func atoi32(s string) int32 {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 {
		return -1
	}
	return int32(n)
}
