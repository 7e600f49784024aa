package collect

import (
	"bytes"
	"os"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// /proc/vmstat: the memory manager's event counters. Only the ones that
// put a latency stall on the allocating thread, or the page-cache levels
// behind one, are read out of its 150-odd lines:
//
//   - pgscan_direct: pages scanned by tasks that had to reclaim for
//     themselves because kswapd fell behind (direct reclaim), and
//     allocstall_<zone>: how many times a task entered it;
//   - compact_stall: a task compacted memory to get a contiguous block;
//   - pgmajfault: faults that waited for a read from disk;
//   - thp_collapse_alloc and thp_split_page: huge pages built by
//     khugepaged and split again, both of which take locks the
//     application's faults wait on;
//   - nr_dirty and nr_writeback: levels, pages waiting to be written and
//     being written; a writer over the dirty limit is throttled.
//
// 4.8 moved reclaim to per-node LRUs and renamed the counters:
// pgscan_direct_<zone> became pgscan_direct, and allocstall became
// allocstall_<zone>. The sampler reads either spelling and sums the zones.

func init() { registerSampler("vmstat", fastCadence, newVmstatSampler) }

// vmCounter indexes vmstatReading.counts.
type vmCounter int

const (
	vmScanDirect vmCounter = iota
	vmAllocStall
	vmCompactStall
	vmMajorFault
	vmTHPCollapse
	vmTHPSplit
	vmCounters
)

// vmCounterPoints names the metric of each counter.
var vmCounterPoints = [vmCounters]struct{ metric, unit string }{
	vmScanDirect:   {"spikehunt.memory.reclaim.scanned", "{page}"},
	vmAllocStall:   {"spikehunt.memory.reclaim.stalls", "{stall}"},
	vmCompactStall: {"spikehunt.memory.compaction.stalls", "{stall}"},
	vmMajorFault:   {"spikehunt.memory.major_faults", "{fault}"},
	vmTHPCollapse:  {"spikehunt.memory.thp.collapse_allocs", "{page}"},
	vmTHPSplit:     {"spikehunt.memory.thp.splits", "{page}"},
}

type vmstatSampler struct {
	env       *env
	fileCache // files stay open between passes; Close closes them
	buf       []byte
	readings
	resetTally
	counts   counterSet[vmCounter]
	pageSize float64
}

func newVmstatSampler(e *env) (sampler, error) {
	s := &vmstatSampler{env: e, pageSize: float64(os.Getpagesize())}
	s.counts = newCounterSet[vmCounter](&s.resetTally)
	return s, nil
}

func (s *vmstatSampler) sample(dst []telemetry.Point) ([]telemetry.Point, error) {
	var err error
	if s.buf, err = s.read(s.env.procPath("vmstat"), s.buf); err != nil {
		return dst, err
	}
	now := s.env.tl.now()
	v, err := parseVmstat(s.buf)
	if err != nil {
		return dst, err
	}
	out := sink{pts: dst}
	at := s.env.tl.wall(now)
	out.start, out.end, out.emit = s.advance(s.env.tl, now)
	for c := range vmCounters {
		if !v.has[c] {
			continue // THP counters are absent without CONFIG_TRANSPARENT_HUGEPAGE
		}
		if d, ok := s.counts.delta(c, v.counts[c]); ok {
			out.add(vmCounterPoints[c].metric, vmCounterPoints[c].unit, float64(d))
		}
	}
	s.counts.commit()
	// nr_dirty and nr_writeback count pages of the kernel's base size,
	// whatever the huge page configuration.
	out.gauge(at, "spikehunt.memory.dirty", "By", float64(v.dirtyPages)*s.pageSize)
	out.gauge(at, "spikehunt.memory.writeback", "By", float64(v.writebackPages)*s.pageSize)
	return out.pts, nil
}

// vmstatReading is what the sampler takes from /proc/vmstat.
type vmstatReading struct {
	counts                     [vmCounters]uint64
	has                        [vmCounters]bool
	dirtyPages, writebackPages uint64
}

// parseVmstat reads the named counters of /proc/vmstat ("name value" per
// line) and ignores the rest, which differ from kernel to kernel. nr_dirty,
// nr_writeback, pgmajfault and a direct-reclaim scan counter must be
// present: every kernel since 2.6 has them.
func parseVmstat(b []byte) (vmstatReading, error) {
	var v vmstatReading
	var seenDirty, seenWriteback bool
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		name, rest := nextField(line)
		if len(name) == 0 {
			continue
		}
		var dst *uint64
		c := vmCounter(-1)
		switch {
		case string(name) == "nr_dirty":
			dst, seenDirty = &v.dirtyPages, true
		case string(name) == "nr_writeback":
			dst, seenWriteback = &v.writebackPages, true
		case string(name) == "pgscan_direct_throttle":
			continue // tasks throttled in reclaim, not pages scanned
		case string(name) == "pgscan_direct" || bytes.HasPrefix(name, []byte("pgscan_direct_")):
			c = vmScanDirect
		case string(name) == "allocstall" || bytes.HasPrefix(name, []byte("allocstall_")):
			c = vmAllocStall
		case string(name) == "compact_stall":
			c = vmCompactStall
		case string(name) == "pgmajfault":
			c = vmMajorFault
		case string(name) == "thp_collapse_alloc":
			c = vmTHPCollapse
		case string(name) == "thp_split_page":
			c = vmTHPSplit
		default:
			continue
		}
		f, _ := nextField(rest)
		val, err := parseUint(f)
		if err != nil {
			return v, malformed("/proc/vmstat %s: %v", name, err)
		}
		if dst != nil {
			*dst = val
			continue
		}
		// Per-zone lines (pgscan_direct_normal, allocstall_movable) add up.
		if v.counts[c]+val < val {
			return v, malformed("/proc/vmstat %s: sum out of range", name)
		}
		v.counts[c] += val
		v.has[c] = true
	}
	switch {
	case !seenDirty || !seenWriteback:
		return v, malformed("/proc/vmstat: no nr_dirty or nr_writeback line")
	case !v.has[vmMajorFault]:
		return v, malformed("/proc/vmstat: no pgmajfault line")
	case !v.has[vmScanDirect]:
		return v, malformed("/proc/vmstat: no pgscan_direct line")
	}
	return v, nil
}
