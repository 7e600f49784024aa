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
// Lines of other events (block, irq) and comments are skipped; the trace
// records no call chains, so every event's Stack is -1. A sched line that
// does not parse is an error wrapping ErrFtraceSyntax naming the line, and
// the events before it are kept. The trace's Limits bound what is kept.
func (tr *Trace) ReadFtrace(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), tr.lim.MaxLine)
	n := 0
	for sc.Scan() {
		n++
		ev, ok, err := parseFtraceSched(sc.Text())
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
		tr.Events = append(tr.Events, ev)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%w: line %d is longer than %d bytes", ErrFtraceSyntax, n+1, tr.lim.MaxLine)
		}
		return err
	}
	return nil
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
	// The header is read from the right: a comm may hold any byte, but
	// the time, the flags and [cpu] after it do not.
	head := strings.Fields(line[:i])
	if len(head) < 3 {
		return ev, false, fmt.Errorf("header %.80q", line[:i])
	}
	t, err := parseTime(head[len(head)-1])
	if err != nil {
		return ev, false, err
	}
	ev.T = t
	cpuAt := -1
	for k := len(head) - 2; k >= max(0, len(head)-3); k-- {
		if s, ok := strings.CutPrefix(head[k], "["); ok && strings.HasSuffix(s, "]") {
			cpuAt = k
			break
		}
	}
	if cpuAt < 1 {
		return ev, false, fmt.Errorf("no [cpu] in %.80q", line[:i])
	}
	cpu, err := strconv.ParseUint(strings.Trim(head[cpuAt], "[]"), 10, 31)
	if err != nil {
		return ev, false, fmt.Errorf("cpu %.20q", head[cpuAt])
	}
	ev.CPU = int32(cpu)
	// "comm-pid", or "comm-pid (tgid)" with the record-tgid option.
	taskEnd := cpuAt
	if strings.HasSuffix(head[taskEnd-1], ")") && taskEnd >= 2 {
		for taskEnd--; taskEnd > 0 && !strings.HasPrefix(head[taskEnd], "("); taskEnd-- {
		}
	}
	task := strings.Join(head[:max(taskEnd, 1)], " ")
	dash := strings.LastIndexByte(task, '-')
	if dash < 0 {
		return ev, false, fmt.Errorf("task %.40q has no -pid", task)
	}
	if ev.Task.TID = atoi32(task[dash+1:]); ev.Task.TID < 0 {
		return ev, false, fmt.Errorf("task %.40q has no -pid", task)
	}
	ev.Task.Comm = task[:dash]
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
