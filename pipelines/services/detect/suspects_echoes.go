package detect

import (
	"slices"
	"strings"
)

// Causes before their echoes. Some counters rise with a stall because
// another counter's cause makes them rise: they are true, and they deviate
// as much as the cause or more, but they name the wrong thing to fix. In
// one window's rows, an echo that ranks above rows that account for it
// goes just after the last of them. Only two kinds of rows are echoes, and neither
// accounts for anything, so a row moves only down, past causes, and the
// order settles.
//
// IO pressure. The kernel's PSI io says tasks waited on IO, not why. A
// task in direct reclaim that waits for the writeback of the pages it
// would free is stalled on memory and on IO at once: PSI counts the wait
// in both. When the two rise together, the IO stall is the reclaim's, and
// memory is the cause to name (the cause lab's (c), docs/causes.md); a
// disk stall alone leaves memory pressure flat. IO pressure of a kind
// (some, full) is accounted for by the memory pressure of the same kind
// whose rise is at least leafShare of its own; when the window has no
// memory pressure row of that kind (one kind may rise without the other
// making the rows), by memory pressure of the other kind on the same
// terms. It is accounted for as well by the direct evidence of reclaim:
// a workload's hits of its memory limit, pages scanned or stalls in
// direct reclaim, compaction stalls. And a disk whose IOs got slow in the
// same window names the device the tasks waited on (the lab's (f)); an IO
// stall above the disks, in a filter layer, leaves every disk's latency
// flat and PSI io stands alone.
//
// A workload cgroup's CPU. A cgroup's CPU time is the time its tasks had
// the CPU, and part of it was not theirs to spend:
//   - a softirq that runs on the way out of an interrupt runs in the task it
//     interrupted, and on a kernel without IRQ time accounting
//     (CONFIG_IRQ_TIME_ACCOUNTING, off in many distributions' kernels) its
//     time is charged to that task's cgroup. A NET_RX storm on the CPU a
//     service runs on raises the service's own CPU (the lab's (e)). The
//     softirq (or hard IRQ) time of a CPU whose rise is at least the
//     cgroup's accounts for it.
//   - a workload at its memory limit reclaims in its own tasks, on its own
//     CPU time (the lab's (c)). Its own memory-limit hits account for it.
//
// Neither accounts for a neighbour's CPU: a batch job's rise is its own,
// and far above any softirq rise that comes with it.
const pressureMetric = "spikehunt.pressure.stall_time"

// The rows that are a cause's direct evidence of reclaim.
var reclaimEvidence = []string{
	"spikehunt.cgroup.memory.events",
	"spikehunt.memory.reclaim.scanned",
	"spikehunt.memory.reclaim.stalls",
	"spikehunt.memory.compaction.stalls",
}

// causesBeforeEchoes moves, in one window's rows, each echo to just after
// the last row below it that accounts for it (past one, then past the
// next from there).
func causesBeforeEchoes(window []suspectRow) {
	for i := 0; i < len(window); i++ {
		e := window[i]
		if !isEcho(e) {
			continue
		}
		for j := i + 1; j < len(window); j++ {
			if accountsFor(window, window[j], e) {
				copy(window[i:j], window[i+1:j+1])
				window[j] = e
				i-- // window[i] is a new row now
				break
			}
		}
	}
}

func isEcho(r suspectRow) bool {
	return isIOPressure(r) || r.Metric == cgroupCPUUsage
}

func isIOPressure(r suspectRow) bool { return r.Metric == pressureMetric && r.Device == "io" }

const cgroupCPUUsage = cgroupPrefix + "cpu.usage"

// accountsFor says whether row c of window accounts for the echo e.
func accountsFor(window []suspectRow, c, e suspectRow) bool {
	rise := func(r suspectRow) float64 { return r.During - r.Baseline }
	if isIOPressure(e) {
		switch {
		case c.Metric == diskLatencyMetric:
			return true
		case c.Metric == pressureMetric && c.Device == "memory":
			if c.Mode != e.Mode && hasMemoryPressure(window, e.Mode) {
				return false
			}
			return rise(c) >= leafShare*rise(e)
		}
		return slices.Contains(reclaimEvidence, c.Metric)
	}
	// A cgroup's CPU.
	switch {
	case c.Metric == "system.cpu.time" && (c.Mode == "softirq" || c.Mode == "irq"):
		return rise(c) >= rise(e)
	case c.Metric == "spikehunt.cgroup.memory.events":
		return c.Device == e.Device || strings.HasPrefix(c.Device, e.Device+"/")
	}
	return false
}

// hasMemoryPressure says whether window has a memory pressure row of the
// kind mode.
func hasMemoryPressure(window []suspectRow, mode string) bool {
	for _, r := range window {
		if r.Metric == pressureMetric && r.Device == "memory" && r.Mode == mode {
			return true
		}
	}
	return false
}
