package collect

import (
	"bytes"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// /proc/stat: per-CPU time by mode and the context-switch count.

func init() { registerSampler("stat", fastCadence, newStatSampler) }

// userHZ is the unit of /proc/stat times. The kernel's internal HZ varies
// (100–1000) but /proc/stat is always reported in USER_HZ, which is 100 on
// every architecture Linux ships with the exception of Alpha (1024).
const userHZ = 100

// cpuModes names the first eight time fields of a cpuN line, in order, as
// cpu.mode values. irq is the OTel well-known "interrupt". semconv has no
// mode for softirq time; it is "softirq" here anyway because deferred
// network work (the seed-000 pathology) shows up nowhere else. guest and
// guest_nice (fields 9 and 10) are left out: the kernel already counts them
// in user and nice.
var cpuModes = [...]string{"user", "nice", "system", "idle", "iowait", "interrupt", "softirq", "steal"}

var cpuModeAttrs = strAttrs("cpu.mode", cpuModes[:]...)

type statSampler struct {
	env       *env
	fileCache // files stay open between passes; Close closes them
	buf       []byte
	readings
	resetTally
	times rowSet[int] // by CPU; columns are cpuModes
	ctxt  counterSet[struct{}]
	cols  []colDelta
}

func newStatSampler(e *env) (sampler, error) {
	s := &statSampler{env: e}
	s.times = newRowSet[int](&s.resetTally)
	s.ctxt = newCounterSet[struct{}](&s.resetTally)
	return s, nil
}

func (s *statSampler) sample(dst []telemetry.Point) ([]telemetry.Point, error) {
	var err error
	if s.buf, err = s.read(s.env.procPath("stat"), s.buf); err != nil {
		return dst, err
	}
	now := s.env.tl.now()
	st, err := parseStat(s.buf)
	if err != nil {
		return dst, err
	}
	out := sink{pts: dst}
	out.start, out.end, out.emit = s.advance(s.env.tl, now)
	s.times.begin(nil)
	for i := range st.cpus {
		c := &st.cpus[i]
		s.cols = s.times.deltas(c.cpu, c.ticks[:c.modes], s.cols[:0])
		for _, d := range s.cols {
			out.add("system.cpu.time", "s", float64(d.delta)/userHZ, cpuAttr(c.cpu), cpuModeAttrs[d.col])
		}
	}
	if st.hasCtxt {
		if d, ok := s.ctxt.delta(struct{}{}, st.contextSwitches); ok {
			out.add("spikehunt.context_switches", "{switch}", float64(d))
		}
	}
	s.times.commit()
	s.ctxt.commit()
	return out.pts, nil
}

// statSnapshot is one reading of /proc/stat.
type statSnapshot struct {
	cpus            []cpuTicks
	contextSwitches uint64
	hasCtxt         bool
}

// cpuTicks holds the first modes fields of a cpuN line, in USER_HZ ticks.
type cpuTicks struct {
	cpu   int
	modes int
	ticks [len(cpuModes)]uint64
}

var (
	cpuPrefix  = []byte("cpu")
	ctxtPrefix = []byte("ctxt")
)

// parseStat reads the cpuN and ctxt lines of /proc/stat; the aggregate
// "cpu" line and the rest are skipped. Offline CPUs have no line.
func parseStat(b []byte) (statSnapshot, error) {
	var st statSnapshot
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		name, rest := nextField(line)
		switch {
		case bytes.Equal(name, ctxtPrefix):
			f, _ := nextField(rest)
			v, err := parseUint(f)
			if err != nil {
				return st, malformed("/proc/stat ctxt: %v", err)
			}
			st.contextSwitches, st.hasCtxt = v, true
		case bytes.HasPrefix(name, cpuPrefix) && len(name) > len(cpuPrefix):
			cpu, err := parseCPUName(name, cpuPrefix)
			if err != nil {
				return st, err
			}
			c := cpuTicks{cpu: cpu}
			for c.modes < len(c.ticks) {
				var f []byte
				if f, rest = nextField(rest); len(f) == 0 {
					break
				}
				if c.ticks[c.modes], err = parseUint(f); err != nil {
					return st, malformed("/proc/stat %s: %v", name, err)
				}
				c.modes++
			}
			// user, nice, system, idle exist on every kernel since 2.4.
			if c.modes < 4 {
				return st, malformed("/proc/stat %s: %d time fields, want at least 4", name, c.modes)
			}
			st.cpus = append(st.cpus, c)
		}
	}
	if len(st.cpus) == 0 {
		return st, malformed("/proc/stat: no cpuN line")
	}
	return st, nil
}
