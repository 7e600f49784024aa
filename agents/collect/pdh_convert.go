package collect

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// Windows has no cumulative per-CPU interrupt or DPC counters to read like
// /proc: PDH ("Processor Information" performance object) gives the share
// of time and the rate over the interval between two collections. This
// file turns those into the same Points as Linux: time shares become
// seconds over the measured interval, rates become counts. A DPC is the
// Windows counterpart of a softirq (the DPC flood (docs/field-stories.md): four CPUs pinned by NDIS
// DPCs), so its time is system.cpu.time with cpu.mode "dpc"; hardware
// interrupt time is cpu.mode "interrupt", as on Linux.
//
// It is platform-independent so that its tests run on Linux.

// pdhReading is one collection: per counter, the formatted value of each
// instance of the "Processor Information" object. Instances are named
// "<group>,<index>" ("0,3"), with totals "_Total" and "<group>,_Total".
type pdhReading struct {
	dpcTimePct       map[string]float64 // % DPC Time
	interruptTimePct map[string]float64 // % Interrupt Time
	dpcsQueued       map[string]float64 // DPCs Queued/sec
	interrupts       map[string]float64 // Interrupts/sec
}

// convertPDH returns the points of reading r over [start, end], sorted by
// CPU. groupBase[g] is the number of active logical processors in the
// groups before g, so that "1,3" is CPU groupBase[1]+3 on a host whose
// groups are not all 64 wide. Totals and instances it cannot place are
// skipped; their count is returned.
func convertPDH(r pdhReading, start, end time.Time, groupBase []int) (pts []telemetry.Point, skipped int) {
	secs := end.Sub(start).Seconds()
	if secs <= 0 {
		return nil, 0
	}
	type cpuValues struct {
		cpu                     int
		dpcPct, intrPct         float64
		dpcRate, intrRate       float64
		hasDPC, hasIntr         bool
		hasDPCRate, hasIntrRate bool
	}
	byCPU := map[int]*cpuValues{}
	get := func(instance string) *cpuValues {
		cpu, ok := pdhInstanceCPU(instance, groupBase)
		if !ok {
			if !strings.HasSuffix(instance, "_Total") {
				skipped++
			}
			return nil
		}
		v := byCPU[cpu]
		if v == nil {
			v = &cpuValues{cpu: cpu}
			byCPU[cpu] = v
		}
		return v
	}
	for inst, x := range r.dpcTimePct {
		if v := get(inst); v != nil {
			v.dpcPct, v.hasDPC = x, true
		}
	}
	for inst, x := range r.interruptTimePct {
		if v := get(inst); v != nil {
			v.intrPct, v.hasIntr = x, true
		}
	}
	for inst, x := range r.dpcsQueued {
		if v := get(inst); v != nil {
			v.dpcRate, v.hasDPCRate = x, true
		}
	}
	for inst, x := range r.interrupts {
		if v := get(inst); v != nil {
			v.intrRate, v.hasIntrRate = x, true
		}
	}
	cpus := make([]int, 0, len(byCPU))
	for cpu := range byCPU {
		cpus = append(cpus, cpu)
	}
	slices.Sort(cpus)
	out := sink{start: start, end: end, emit: true}
	for _, cpu := range cpus {
		v := byCPU[cpu]
		n := int64(cpu)
		if v.hasIntr {
			out.add("system.cpu.time", "s", pctToSeconds(v.intrPct, secs),
				telemetry.Int("cpu.logical_number", n), telemetry.Str("cpu.mode", "interrupt"))
		}
		if v.hasDPC {
			out.add("system.cpu.time", "s", pctToSeconds(v.dpcPct, secs),
				telemetry.Int("cpu.logical_number", n), telemetry.Str("cpu.mode", "dpc"))
		}
		if v.hasIntrRate {
			out.add("spikehunt.interrupts", "{interrupt}", max(v.intrRate, 0)*secs, telemetry.Int("cpu.logical_number", n))
		}
		if v.hasDPCRate {
			out.add("spikehunt.dpcs", "{dpc}", max(v.dpcRate, 0)*secs, telemetry.Int("cpu.logical_number", n))
		}
	}
	return out.pts, skipped
}

// pctToSeconds turns a share of one CPU's time into seconds of the
// interval. PDH's rounding can land a hair outside [0, 100]; a CPU cannot
// spend more than the interval, nor less than nothing.
func pctToSeconds(pct, secs float64) float64 {
	return min(max(pct, 0), 100) / 100 * secs
}

// pdhInstanceCPU maps an instance name to a logical CPU number: "g,i" of
// "Processor Information", or a plain "i" of the older "Processor" object.
func pdhInstanceCPU(instance string, groupBase []int) (int, bool) {
	g, i, grouped := strings.Cut(instance, ",")
	if !grouped {
		g, i = "0", instance
	}
	group, err1 := strconv.Atoi(g)
	index, err2 := strconv.Atoi(i)
	if err1 != nil || err2 != nil || group < 0 || index < 0 || group >= max(len(groupBase), 1) {
		return 0, false
	}
	base := 0
	if len(groupBase) > 0 {
		base = groupBase[group]
	}
	return base + index, true
}
