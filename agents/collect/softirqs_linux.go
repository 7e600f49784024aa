package collect

import (
	"bytes"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// /proc/softirqs (Linux 2.6.31+): how many times each softirq vector ran on
// each CPU. NET_RX concentrated on a few CPUs is the signature of receive
// work that RSS or RPS does not spread.

func init() { registerSampler("softirqs", fastCadence, newSoftirqsSampler) }

type softirqsSampler struct {
	env       *env
	fileCache // files stay open between passes; Close closes them
	buf       []byte
	readings
	resetTally
	counts rowSet[string] // by vector
	cols   []colDelta
}

func newSoftirqsSampler(e *env) (sampler, error) {
	s := &softirqsSampler{env: e}
	s.counts = newRowSet[string](&s.resetTally)
	return s, nil
}

func (s *softirqsSampler) sample(dst []telemetry.Point) ([]telemetry.Point, error) {
	var err error
	if s.buf, err = s.read(s.env.procPath("softirqs"), s.buf); err != nil {
		return dst, err
	}
	now := s.env.tl.now()
	snap, err := parseSoftirqs(s.buf)
	if err != nil {
		return dst, err
	}
	out := sink{pts: dst}
	out.start, out.end, out.emit = s.advance(s.env.tl, now)
	s.counts.begin(snap.cpus)
	for _, v := range snap.vectors {
		s.cols = s.counts.deltas(v.name, v.perCPU, s.cols[:0])
		if len(s.cols) == 0 || !out.emit {
			continue
		}
		vector := telemetry.Str("spikehunt.softirq.vector", v.name)
		for _, c := range s.cols {
			out.add("spikehunt.softirqs", "{softirq}", float64(c.delta), cpuAttr(snap.cpus[c.col]), vector)
		}
	}
	s.counts.commit()
	return out.pts, nil
}

// softirqSnapshot is one reading of /proc/softirqs: cpus are the CPU
// numbers of the columns, from the header.
type softirqSnapshot struct {
	cpus    []int
	vectors []softirqVector
}

type softirqVector struct {
	name   string // HI, TIMER, NET_TX, NET_RX, BLOCK, …
	perCPU []uint64
}

var upperCPUPrefix = []byte("CPU")

// parseSoftirqs parses /proc/softirqs. Vector names are taken as the kernel
// prints them, so a vector added by a newer kernel is reported too.
func parseSoftirqs(b []byte) (softirqSnapshot, error) {
	var snap softirqSnapshot
	header, b := nextLine(b)
	cpus, err := parseCPUHeader(header)
	if err != nil {
		return snap, err
	}
	snap.cpus = cpus
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		name, rest := nextField(line)
		if len(name) == 0 {
			continue
		}
		if len(name) < 2 || name[len(name)-1] != ':' {
			return snap, malformed("/proc/softirqs: bad vector %q", name)
		}
		v := softirqVector{name: string(name[:len(name)-1]), perCPU: make([]uint64, 0, len(cpus))}
		for {
			var f []byte
			if f, rest = nextField(rest); len(f) == 0 {
				break
			}
			n, err := parseUint(f)
			if err != nil {
				return snap, malformed("/proc/softirqs %s: %v", v.name, err)
			}
			v.perCPU = append(v.perCPU, n)
		}
		if len(v.perCPU) != len(cpus) {
			return snap, malformed("/proc/softirqs %s: %d values for %d CPUs", v.name, len(v.perCPU), len(cpus))
		}
		snap.vectors = append(snap.vectors, v)
	}
	return snap, nil
}

// parseCPUHeader parses a "CPU0 CPU1 …" header. The numbers are read, not
// counted: /proc/interrupts lists online CPUs only, so after an unplug
// the columns skip numbers.
// The kernel prints them in increasing order; anything else is malformed.
func parseCPUHeader(line []byte) ([]int, error) {
	var cpus []int
	for rest := line; ; {
		var f []byte
		if f, rest = nextField(rest); len(f) == 0 {
			break
		}
		cpu, err := parseCPUName(f, upperCPUPrefix)
		if err != nil {
			return nil, err
		}
		if n := len(cpus); n > 0 && cpu <= cpus[n-1] {
			return nil, malformed("CPU header %q: CPU%d out of order", bytes.TrimSpace(line), cpu)
		}
		cpus = append(cpus, cpu)
	}
	if len(cpus) == 0 {
		return nil, malformed("no CPU in header %q", bytes.TrimSpace(line))
	}
	return cpus, nil
}
