package explain

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ReadFtrace adds the scheduler events of one ftrace trace text (a
// recorder's ftrace-pre.txt, then ftrace-post.txt) to the trace, so that
// the ftrace profile's threads have the same timelines as perf's:
//
//	bash-27955   [000] d..2. 34914.737509: sched_switch: prev_comm=bash prev_pid=27955 prev_prio=120 prev_state=S ==> next_comm=sleep next_pid=27967 next_prio=120
//	QueryCompPipeEx-27799 [001] d.s4. 34914.738439: sched_wakeup: comm=sleep pid=27967 prio=120 target_cpu=000
//
// A stacktrace trigger's "<stack trace>" and its " => frame" lines become
// the call chain of the switch before it on the same CPU by the same
// thread (the trigger fires after its event, on its CPU; other CPUs'
// events may come between in the merged text). Lines of other events
// (block, irq) and comments are skipped. A sched line that does not parse
// is an error wrapping ErrFtraceSyntax naming the line, and the events
// before it are kept. The trace's Limits bound what is kept.
func (tr *Trace) ReadFtrace(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), tr.lim.MaxLine)
	var (
		n          int
		lastSwitch = map[int32]int{} // CPU → index of its latest switch
		stackTo    = -1              // the switch the frames read belong to
		frames     []string
	)
	flush := func() {
		if stackTo >= 0 && len(frames) > 0 {
			tr.Events[stackTo].Stack = tr.intern(frames)
		}
		stackTo, frames = -1, frames[:0]
	}
	for sc.Scan() {
		n++
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, " => "); ok {
			if stackTo >= 0 && len(frames) < tr.lim.MaxFrames {
				frames = append(frames, ftraceFrame(f))
			}
			continue
		}
		flush()
		if i := strings.Index(line, ": <stack trace>"); i >= 0 {
			task, cpu, _, err := parseFtraceHead(line[:i])
			if err != nil {
				return fmt.Errorf("%w: line %d: %v", ErrFtraceSyntax, n, err)
			}
			if k, ok := lastSwitch[cpu]; ok && tr.Events[k].Task.TID == task.TID && tr.Events[k].Stack < 0 {
				stackTo = k
			}
			continue
		}
		ev, ok, err := parseFtraceSched(line)
		if err != nil {
			return fmt.Errorf("%w: line %d: %v", ErrFtraceSyntax, n, err)
		}
		if !ok {
			continue
		}
		if len(tr.Events) >= tr.lim.MaxEvents {
			tr.Truncated = fmt.Sprintf("only the first %d events were read", tr.lim.MaxEvents)
			return nil
		}
		if ev.Kind == KindSwitch {
			lastSwitch[ev.CPU] = len(tr.Events)
		}
		tr.Events = append(tr.Events, ev)
	}
	flush()
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%w: line %d is longer than %d bytes", ErrFtraceSyntax, n+1, tr.lim.MaxLine)
		}
		return err
	}
	return nil
}

// ftraceFrame is a stack trace line's function: "io_schedule", from
// "io_schedule", "io_schedule+0x42/0x70" (option sym-offset) or
// "io_schedule <ffffffff8a1b2c3d>" (sym-addr).
func ftraceFrame(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " +"); i > 0 {
		s = s[:i]
	}
	if s == "" {
		return "[unknown]"
	}
	return s
}

// parseFtraceSched reads one trace line; ok is false for a line that is
// not a sched_switch or sched_wakeup event.
func parseFtraceSched(line string) (Event, bool, error) {
	ev := Event{Stack: -1}
	name := ": sched_switch: "
	i := strings.Index(line, name)
	if i < 0 {
		name = ": sched_wakeup: "
		if i = strings.Index(line, name); i < 0 {
			return ev, false, nil
		}
	}
	task, cpu, t, err := parseFtraceHead(line[:i])
	if err != nil {
		return ev, false, err
	}
	ev.Task, ev.CPU, ev.T = task, cpu, t
	fields := line[i+len(name):]
	if name == ": sched_wakeup: " {
		ev.Kind = KindWakeup
		// " pid=" first: "comm=" may hold "pid=" itself.
		ev.Target = Task{Comm: between(" "+fields, " comm=", " pid="), TID: atoi32(field(fields, " pid=", " "))}
		if ev.Target.TID < 0 {
			return ev, false, errors.New("sched_wakeup without pid")
		}
		return ev, true, nil
	}
	ev.Kind = KindSwitch
	prev, next, ok := strings.Cut(fields, " ==> ")
	if !ok {
		return ev, false, errors.New("sched_switch without ==>")
	}
	ev.PrevState = field(prev, "prev_state=", " ")
	ev.Next = Task{Comm: between(" "+next, " next_comm=", " next_pid="), TID: atoi32(field(next, "next_pid=", " "))}
	if ev.PrevState == "" || ev.Next.TID < 0 {
		return ev, false, errors.New("sched_switch without prev_state or next_pid")
	}
	// The fields name the thread switching out; trust them over the
	// header, which is the same thread with its comm cut to the column.
	if p := atoi32(field(prev, "prev_pid=", " ")); p >= 0 {
		ev.Task = Task{Comm: between(" "+prev, " prev_comm=", " prev_pid="), TID: p}
	}
	return ev, true, nil
}

// parseFtraceHead reads "<comm>-<pid> [(<tgid>)] [<cpu>] [<flags>] <sec>.<frac>"
// from the right: a comm may hold any byte, but the time, the flags and
// [cpu] after it do not.
func parseFtraceHead(s string) (Task, int32, int64, error) {
	var task Task
	head := strings.Fields(s)
	if len(head) < 3 {
		return task, 0, 0, fmt.Errorf("header %.80q", s)
	}
	t, err := parseTime(head[len(head)-1])
	if err != nil {
		return task, 0, 0, err
	}
	cpuAt := -1
	for k := len(head) - 2; k >= max(0, len(head)-3); k-- {
		if c, ok := strings.CutPrefix(head[k], "["); ok && strings.HasSuffix(c, "]") {
			cpuAt = k
			break
		}
	}
	if cpuAt < 1 {
		return task, 0, 0, fmt.Errorf("no [cpu] in %.80q", s)
	}
	cpu, err := strconv.ParseUint(strings.Trim(head[cpuAt], "[]"), 10, 31)
	if err != nil {
		return task, 0, 0, fmt.Errorf("cpu %.20q", head[cpuAt])
	}
	// "comm-pid", or "comm-pid (tgid)" with the record-tgid option.
	taskEnd := cpuAt
	if strings.HasSuffix(head[taskEnd-1], ")") && taskEnd >= 2 {
		for taskEnd--; taskEnd > 0 && !strings.HasPrefix(head[taskEnd], "("); taskEnd-- {
		}
	}
	name := strings.Join(head[:max(taskEnd, 1)], " ")
	dash := strings.LastIndexByte(name, '-')
	if dash < 0 {
		return task, 0, 0, fmt.Errorf("task %.40q has no -pid", name)
	}
	if task.TID = atoi32(name[dash+1:]); task.TID < 0 {
		return task, 0, 0, fmt.Errorf("task %.40q has no -pid", name)
	}
	task.Comm = name[:dash]
	return task, int32(cpu), t, nil
}
