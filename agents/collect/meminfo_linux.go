package collect

import (
	"bytes"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// /proc/meminfo: kernel slab memory (the pause-frames story (docs/field-stories.md): a NIC offload made kernel
// memory grow). SReclaimable and SUnreclaim exist since 2.6.19.

func init() { registerSampler("meminfo", fastCadence, newMeminfoSampler) }

type meminfoSampler struct {
	env        *env
	fileCache  // files stay open between passes; Close closes them
	buf        []byte
	resetTally // levels do not reset, but the sampler interface asks
}

func newMeminfoSampler(e *env) (sampler, error) { return &meminfoSampler{env: e}, nil }

// sample emits levels, not deltas: each point is a gauge with Start == End
// == the reading's wall time, from the first reading on. The two kinds
// add up to Slab, which is therefore not emitted itself, so that summing
// over spikehunt.memory.slab.kind gives the total; a kernel without the
// split reports kind "total".
func (s *meminfoSampler) sample(dst []telemetry.Point) ([]telemetry.Point, error) {
	var err error
	if s.buf, err = s.read(s.env.procPath("meminfo"), s.buf); err != nil {
		return dst, err
	}
	at := s.env.tl.wall(s.env.tl.now())
	m, err := parseMeminfo(s.buf)
	if err != nil {
		return dst, err
	}
	out := sink{pts: dst}
	if m.hasSplit {
		out.gauge(at, "spikehunt.memory.slab", "By", float64(m.reclaimable), telemetry.Str("spikehunt.memory.slab.kind", "reclaimable"))
		out.gauge(at, "spikehunt.memory.slab", "By", float64(m.unreclaimable), telemetry.Str("spikehunt.memory.slab.kind", "unreclaimable"))
	} else {
		out.gauge(at, "spikehunt.memory.slab", "By", float64(m.slab), telemetry.Str("spikehunt.memory.slab.kind", "total"))
	}
	return out.pts, nil
}

// slabBytes are the slab lines of /proc/meminfo, in bytes.
type slabBytes struct {
	slab, reclaimable, unreclaimable uint64
	hasSlab, hasSplit                bool
}

// parseMeminfo reads Slab, SReclaimable and SUnreclaim. meminfo says "kB"
// and means KiB.
func parseMeminfo(b []byte) (slabBytes, error) {
	var m slabBytes
	var seen [3]bool
	dsts := [3]*uint64{&m.slab, &m.reclaimable, &m.unreclaimable}
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		key, rest := nextField(line)
		var i int
		switch string(key) {
		case "Slab:":
			i = 0
		case "SReclaimable:":
			i = 1
		case "SUnreclaim:":
			i = 2
		default:
			continue
		}
		f, rest := nextField(rest)
		v, err := parseUint(f)
		if err != nil {
			return m, malformed("/proc/meminfo %s %v", key, err)
		}
		if unit, _ := nextField(rest); !bytes.Equal(unit, []byte("kB")) {
			return m, malformed("/proc/meminfo %s: unit %q, want kB", key, unit)
		}
		if v > (1<<64-1)/1024 {
			return m, malformed("/proc/meminfo %s: out of range", key)
		}
		*dsts[i] = v * 1024
		seen[i] = true
	}
	m.hasSlab, m.hasSplit = seen[0], seen[1] && seen[2]
	if !m.hasSlab {
		return m, malformed("/proc/meminfo: no Slab line")
	}
	return m, nil
}
