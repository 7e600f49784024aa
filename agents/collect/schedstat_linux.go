package collect

import (
	"bytes"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// /proc/schedstat: per-CPU run delay, the time runnable tasks waited on
// that CPU's run queue, and the number of timeslices run. The file exists
// only with CONFIG_SCHEDSTATS (many distribution kernels have it; minimal
// and cloud kernels often do not: then "not supported"). The cpuN lines
// have kept their first nine fields since format version 15; later
// versions change only the domain lines, which are skipped.

func init() { registerSampler("schedstat", fastCadence, newSchedstatSampler) }

type schedstatSampler struct {
	env       *env
	fileCache // files stay open between passes; Close closes them
	buf       []byte
	readings
	resetTally
	counts counterSet[schedKey]
}

type schedKey struct {
	cpu        int
	timeslices bool // else run delay
}

func newSchedstatSampler(e *env) (sampler, error) {
	s := &schedstatSampler{env: e}
	s.counts = newCounterSet[schedKey](&s.resetTally)
	return s, nil
}

func (s *schedstatSampler) sample(dst []telemetry.Point) ([]telemetry.Point, error) {
	var err error
	if s.buf, err = s.read(s.env.procPath("schedstat"), s.buf); err != nil {
		return dst, err
	}
	now := s.env.tl.now()
	cpus, err := parseSchedstat(s.buf)
	if err != nil {
		return dst, err
	}
	out := sink{pts: dst}
	out.start, out.end, out.emit = s.advance(s.env.tl, now)
	for _, c := range cpus {
		if d, ok := s.counts.delta(schedKey{c.cpu, false}, c.runDelayNs); ok {
			out.add("spikehunt.cpu.run_delay", "s", float64(d)/1e9, cpuAttr(c.cpu))
		}
		if d, ok := s.counts.delta(schedKey{c.cpu, true}, c.timeslices); ok {
			out.add("spikehunt.cpu.timeslices", "{timeslice}", float64(d), cpuAttr(c.cpu))
		}
	}
	s.counts.commit()
	return out.pts, nil
}

type schedCPU struct {
	cpu        int
	runDelayNs uint64 // field 8: rq->rq_sched_info.run_delay, nanoseconds
	timeslices uint64 // field 9: rq->rq_sched_info.pcount
}

// parseSchedstat reads the cpuN lines of /proc/schedstat:
//
//	cpu0 yld_count 0 sched_count sched_goidle ttwu_count ttwu_local rq_cpu_time run_delay pcount
//
// The kernel documents run_delay in jiffies in older texts; it has been
// nanoseconds (sched_clock) since 2.6.23.
func parseSchedstat(b []byte) ([]schedCPU, error) {
	var out []schedCPU
	var sawVersion bool
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		name, rest := nextField(line)
		switch {
		case bytes.Equal(name, []byte("version")):
			v, _ := nextField(rest)
			if n, err := parseUint(v); err != nil || n < 15 {
				return nil, malformed("/proc/schedstat: unsupported version %q (want 15 or later)", v)
			}
			sawVersion = true
		case bytes.HasPrefix(name, cpuPrefix) && len(name) > len(cpuPrefix):
			cpu, err := parseCPUName(name, cpuPrefix)
			if err != nil {
				return nil, err
			}
			var vals [9]uint64
			for i := range vals {
				var f []byte
				f, rest = nextField(rest)
				if vals[i], err = parseUint(f); err != nil {
					return nil, malformed("/proc/schedstat %s field %d: %v", name, i+1, err)
				}
			}
			out = append(out, schedCPU{cpu: cpu, runDelayNs: vals[7], timeslices: vals[8]})
		}
	}
	if !sawVersion || len(out) == 0 {
		return nil, malformed("/proc/schedstat: no version line or no cpuN line")
	}
	return out, nil
}
