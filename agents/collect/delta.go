package collect

import (
	"slices"
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// counterSet turns successive readings of cumulative kernel counters into
// deltas, one series per key. It holds the previous reading of every series
// and the reading in progress; commit makes the latter the former.
//
// Rules, the same for every sampler:
//   - a series seen for the first time yields nothing (its baseline): a CPU
//     that comes online or an interface that appears starts a new series;
//   - a value lower than the previous one is a reset (driver reload, CPU
//     re-plugged, or a 32-bit counter wrapping): nothing is emitted for that
//     series this reading, the tally counts it, and the next reading resumes
//     from the new value. A wrap is not told apart from a reset on purpose:
//     guessing wrong would invent up to 4 Gi events;
//   - a series missing from a reading is forgotten (a CPU went offline, an
//     interface was deleted);
//   - a delta is never negative.
type counterSet[K comparable] struct {
	prev, cur map[K]uint64
	tally     *resetTally
}

func newCounterSet[K comparable](t *resetTally) counterSet[K] {
	return counterSet[K]{prev: map[K]uint64{}, cur: map[K]uint64{}, tally: t}
}

// delta records v as the current value of series k and returns its increase
// since the previous reading; ok is false when there is nothing to emit.
func (c *counterSet[K]) delta(k K, v uint64) (d uint64, ok bool) {
	c.cur[k] = v
	old, seen := c.prev[k]
	switch {
	case !seen:
		return 0, false
	case v < old:
		c.tally.n++
		return 0, false
	}
	return v - old, true
}

// commit ends a reading. Call it only after a reading parsed completely, so
// that a malformed file never leaves half a baseline behind.
func (c *counterSet[K]) commit() {
	c.prev, c.cur = c.cur, c.prev
	clear(c.cur)
}

// rowSet is counterSet for series that come as rows of values: per-CPU
// columns under one header of CPU numbers (/proc/softirqs,
// /proc/interrupts), or a fixed list of fields (an interface's counters,
// a CPU's modes). One map entry per row rather than per row × column: on a
// 1,000-IRQ × 128-CPU host, 1k map operations per pass instead of 128k.
// The rules are counterSet's, applied per column.
type rowSet[K comparable] struct {
	prev, cur         map[K][]uint64
	prevCPUs, curCPUs []int
	sameCPUs          bool // the header did not change since the previous reading
	tally             *resetTally
}

func newRowSet[K comparable](t *resetTally) rowSet[K] {
	return rowSet[K]{prev: map[K][]uint64{}, cur: map[K][]uint64{}, tally: t}
}

// begin starts a reading whose columns are the CPUs cpus, in increasing
// order (parseCPUHeader checks it), or fixed fields when cpus is nil.
func (r *rowSet[K]) begin(cpus []int) {
	r.curCPUs = cpus
	r.sameCPUs = slices.Equal(r.prevCPUs, cpus)
}

// colDelta is the increase of one column of a row.
type colDelta struct {
	col   int
	delta uint64
}

// deltas records row k, whose values are one per column (the caller gives
// up vals), and appends a colDelta to dst for each column that has one to
// emit.
func (r *rowSet[K]) deltas(k K, vals []uint64, dst []colDelta) []colDelta {
	r.cur[k] = vals
	old, seen := r.prev[k]
	if !seen {
		return dst
	}
	for i, v := range vals {
		j := i
		if !r.sameCPUs { // a CPU went on- or offline: match columns by CPU number
			var found bool
			if j, found = slices.BinarySearch(r.prevCPUs, r.curCPUs[i]); !found {
				continue
			}
		}
		if j >= len(old) {
			continue
		}
		if v < old[j] {
			r.tally.n++
			continue
		}
		dst = append(dst, colDelta{i, v - old[j]})
	}
	return dst
}

func (r *rowSet[K]) commit() {
	r.prev, r.cur = r.cur, r.prev
	clear(r.cur)
	r.prevCPUs = r.curCPUs
}

// resetTally counts counter resets until the Collector collects them.
type resetTally struct{ n int }

func (t *resetTally) takeResets() int {
	n := t.n
	t.n = 0
	return n
}

// sink collects the points of one reading. start and end bound the measured
// interval; emit is false on a baseline reading, when only the counter
// state is updated.
type sink struct {
	pts        []telemetry.Point
	start, end time.Time
	emit       bool
	arena      []telemetry.Attr // attributes are carved from here, see attrs
}

// add appends a delta over [start, end], unless this reading is a
// baseline.
func (s *sink) add(metric, unit string, v float64, attrs ...telemetry.Attr) {
	if !s.emit {
		return
	}
	s.pts = append(s.pts, telemetry.Point{Metric: metric, Unit: unit, Start: s.start, End: s.end, Value: v, Attrs: s.attrs(attrs)})
}

// gauge appends the current level of something (bytes in the slab, I/Os in
// flight) read at wall time at: Start equals End, which is how the exporter
// tells a level from a delta.
func (s *sink) gauge(at time.Time, metric, unit string, v float64, attrs ...telemetry.Attr) {
	s.pts = append(s.pts, telemetry.Point{Metric: metric, Unit: unit, Start: at, End: at, Value: v, Attrs: s.attrs(attrs)})
}

// attrs copies a into a shared backing array, so that a pass of thousands
// of points makes a few allocations instead of one per point. Each Point
// gets a slice capped at its own length: appending to it reallocates
// rather than overwriting a neighbour.
func (s *sink) attrs(a []telemetry.Attr) []telemetry.Attr {
	if len(s.arena)+len(a) > cap(s.arena) {
		s.arena = make([]telemetry.Attr, 0, max(128, len(a)))
	}
	n := len(s.arena)
	s.arena = append(s.arena, a...)
	return s.arena[n : n+len(a) : n+len(a)]
}

// Attribute values are boxed into an interface, which allocates for every
// string that is not a constant and every integer above 255. A pass emits
// thousands of points, so samplers build each distinct attribute once (per
// pass, or once for all) and reuse it.

// cpuAttrs holds cpu.logical_number for the first 1024 CPUs.
var cpuAttrs = func() []telemetry.Attr {
	a := make([]telemetry.Attr, 1024)
	for i := range a {
		a[i] = telemetry.Int("cpu.logical_number", int64(i))
	}
	return a
}()

func cpuAttr(cpu int) telemetry.Attr {
	if cpu >= 0 && cpu < len(cpuAttrs) {
		return cpuAttrs[cpu]
	}
	return telemetry.Int("cpu.logical_number", int64(cpu))
}

// strAttrs builds one attribute per value.
func strAttrs(key string, values ...string) []telemetry.Attr {
	a := make([]telemetry.Attr, len(values))
	for i, v := range values {
		a[i] = telemetry.Str(key, v)
	}
	return a
}
