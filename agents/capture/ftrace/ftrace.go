// Package ftrace is the ftrace flight recorder: a tracefs instance of its
// own per capture (the snapshot buffer at Fire, or a relay of two
// instances where the kernel has none), and the parser of the trace text.
// It implements capture.Backend; the agent's cmd constructs it.
package ftrace

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/agents/capture"
)

// DefaultTraceFS is where tracefs is mounted on kernels since 4.1.
const DefaultTraceFS = "/sys/kernel/tracing"

// Config configures the ftrace flight recorder.
type Config struct {
	// TraceFS is the tracefs mount; "" is DefaultTraceFS. Point it
	// elsewhere only for a tracefs mounted elsewhere (the agent's
	// --path.tracefs), never at a copied tree: a recorder makes
	// instances, which only the kernel can.
	TraceFS string
	// Profiles resolves Spec.Profile (events and ring size).
	Profiles *capture.Profiles
}

// File names an ftrace recorder leaves in its dir.
const (
	FtracePreFile  = "ftrace-pre.txt"
	FtracePostFile = "ftrace-post.txt"
)

// ftraceInstancePrefix starts the name of every tracefs instance the agent
// makes, so that an operator can tell them from others and clean up after
// a crash: rmdir /sys/kernel/tracing/instances/spikehunt-*.
const ftraceInstancePrefix = "spikehunt-"

// ftraceRelaySuffix names the second instance a recorder makes on kernels
// without snapshot support. '+' is not allowed in a capture id, so the
// name cannot be another capture's instance.
const ftraceRelaySuffix = "+post"

// ftraceEventPath turns a profile's event ("sched/sched_switch", or a whole
// subsystem "irq") into its directory under events/. It refuses anything
// that is not one or two plain names, so that a profile cannot reach
// another tracefs file.
func ftraceEventPath(ev string) (string, error) {
	sys, name, two := strings.Cut(ev, "/")
	if !ftraceIdent(sys) || two && !ftraceIdent(name) {
		return "", fmt.Errorf("%w: tracefs event %q: use subsystem/event (sched/sched_switch) or a subsystem (irq)", capture.ErrInvalid, ev)
	}
	return "events/" + ev, nil
}

func ftraceIdent(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// ringStats is one per_cpu/cpuN/stats file of a tracefs ring buffer.
type ringStats struct {
	Entries uint64
	// Overrun counts events the ring overwrote before anyone read them
	// (the ring is in overwrite mode: a flight recorder's normal state,
	// but the oldest part of the window is gone).
	Overrun uint64
	// CommitOverrun counts events lost because nested writers (an
	// interrupt during an event) filled a whole page.
	CommitOverrun uint64
	// Dropped counts events refused because the ring was full in
	// non-overwrite mode, or lost to a ring too small for them; the line
	// exists since Linux 3.16.
	Dropped    uint64
	HasDropped bool
}

// lost is every event of this ring that is not in its trace.
func (s ringStats) lost() uint64 { return s.Overrun + s.CommitOverrun + s.Dropped }

// parseRingStats reads a per_cpu/cpuN/stats file:
//
//	entries: 61510
//	overrun: 0
//	commit overrun: 0
//	bytes: 3218064
//	oldest event ts: 12099.527086
//	now ts: 12104.557778
//	dropped events: 0
//	read events: 0
//
// The overrun line is required; the other counters default to zero.
func parseRingStats(b []byte) (ringStats, error) {
	var s ringStats
	seen := false
	for line := range bytes.Lines(b) {
		key, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *uint64
		switch string(bytes.TrimSpace(key)) {
		case "entries":
			dst = &s.Entries
		case "overrun":
			dst, seen = &s.Overrun, true
		case "commit overrun":
			dst = &s.CommitOverrun
		case "dropped events":
			dst, s.HasDropped = &s.Dropped, true
		default:
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(val)), 10, 64)
		if err != nil {
			return ringStats{}, fmt.Errorf("ring stats: %s: %w", bytes.TrimSpace(key), err)
		}
		*dst = n
	}
	if !seen {
		return ringStats{}, fmt.Errorf("ring stats: no overrun line")
	}
	return s, nil
}

// FtraceEvent is one event line of a tracefs trace or snapshot file.
type FtraceEvent struct {
	// Task is the comm of the task that was running (the kernel keeps
	// 15 bytes of it); PID is its thread id.
	Task string
	PID  int
	CPU  int
	// Flags is the irq-info column ("d.h2."), empty when the trace
	// option irq-info is off.
	Flags string
	// TS is the timestamp on the trace clock, since that clock's zero.
	// With trace_clock mono it is CLOCK_MONOTONIC.
	TS time.Duration
	// Event is the event's name ("sched_switch"), Body what follows it.
	Event string
	Body  string
}

// Field returns the value of name=value in the body, up to the next space
// (so a comm with a space in it comes back cut short; pids and numbers
// never do).
func (e FtraceEvent) Field(name string) (string, bool) {
	for rest := e.Body; rest != ""; {
		var tok string
		tok, rest, _ = strings.Cut(rest, " ")
		if v, ok := strings.CutPrefix(tok, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// ParseFtraceLine reads one line of a trace file in the default format:
//
//	kube-apiserver-27994   [000] d..2. 12099.539701: sched_switch: prev_comm=…
//
// that is task-pid, an optional "(tgid)" column, [cpu], optional flags,
// a seconds.fraction timestamp (a nanosecond trace clock: local, global,
// mono, mono_raw, boot, tai) and the event. Comments, "[LOST n EVENTS]"
// lines and function-tracer lines are not events and return false. A
// task name may hold any byte, including "[1] ": the parser tries each
// "[digits] " from the left until the rest parses.
func ParseFtraceLine(line []byte) (FtraceEvent, bool) {
	s := strings.TrimRight(string(line), "\r\n")
	if t := strings.TrimLeft(s, " "); t == "" || t[0] == '#' {
		return FtraceEvent{}, false
	}
	for from := 0; from < len(s); {
		i := strings.Index(s[from:], "[")
		if i < 0 {
			break
		}
		i += from
		from = i + 1
		j := strings.Index(s[i:], "] ")
		if j < 0 {
			break
		}
		j += i
		cpu, ok := ftraceUint(s[i+1 : j])
		if !ok {
			continue
		}
		task, pid, ok := ftraceTaskPID(s[:i])
		if !ok {
			continue
		}
		ev, ok := ftraceTail(s[j+2:])
		if !ok {
			continue
		}
		ev.Task, ev.PID, ev.CPU = task, pid, cpu
		return ev, true
	}
	return FtraceEvent{}, false
}

// ftraceTaskPID splits "  comm-123 (  456) " into comm and 123.
func ftraceTaskPID(s string) (string, int, bool) {
	s = strings.TrimRight(s, " ")
	if strings.HasSuffix(s, ")") {
		k := strings.LastIndex(s, "(")
		if k < 0 {
			return "", 0, false
		}
		s = strings.TrimRight(s[:k], " ")
	}
	k := strings.LastIndex(s, "-")
	if k < 0 {
		return "", 0, false
	}
	pid, ok := ftraceUint(s[k+1:])
	if !ok {
		return "", 0, false
	}
	return strings.TrimLeft(s[:k], " "), pid, true
}

// ftraceTail parses "d..2. 12099.539701: sched_switch: body".
func ftraceTail(s string) (FtraceEvent, bool) {
	var ev FtraceEvent
	s = strings.TrimLeft(s, " ")
	tok, rest, ok := strings.Cut(s, " ")
	if !ok {
		return ev, false
	}
	if !strings.HasSuffix(tok, ":") {
		// Not the timestamp: the irq-info flags, then the timestamp.
		ev.Flags = tok
		tok, rest, ok = strings.Cut(strings.TrimLeft(rest, " "), " ")
		if !ok || !strings.HasSuffix(tok, ":") {
			return ev, false
		}
	}
	ts, ok := ftraceSeconds(strings.TrimSuffix(tok, ":"))
	if !ok {
		return ev, false
	}
	ev.TS = ts
	name, body, _ := strings.Cut(strings.TrimLeft(rest, " "), " ")
	if !strings.HasSuffix(name, ":") || len(name) == 1 {
		return ev, false
	}
	ev.Event = strings.TrimSuffix(name, ":")
	ev.Body = body
	return ev, true
}

// ftraceSeconds parses "12099.539701" (1 to 9 fraction digits) exactly,
// without a float's rounding.
func ftraceSeconds(s string) (time.Duration, bool) {
	sec, frac, ok := strings.Cut(s, ".")
	if !ok || frac == "" || len(frac) > 9 {
		return 0, false
	}
	n, ok := ftraceUint(sec)
	// A Duration holds 292 years; a trace clock counts from boot.
	if !ok || n > 1<<33 {
		return 0, false
	}
	f, ok := ftraceUint(frac)
	if !ok {
		return 0, false
	}
	for i := len(frac); i < 9; i++ {
		f *= 10
	}
	return time.Duration(n)*time.Second + time.Duration(f), true
}

// ftraceUint parses a decimal of at most 18 digits, so it cannot overflow.
func ftraceUint(s string) (int, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
