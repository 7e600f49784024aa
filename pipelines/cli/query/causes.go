package query

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/workload"
)

// The everyday causes' sentences: a workload cgroup's throttling or CPU,
// direct reclaim, a TCP listen queue. Each says what an SRE acts on: which
// pod or unit, how much, against what baseline.

// WorkloadName shows a cgroup as people name it: "pod shop/checkout-7d9"
// for a Kubernetes pod (namespace/pod, with its container after a second
// slash), the unit itself for systemd ("system.slice/backup.service").
func WorkloadName(device string) string {
	if device == "" {
		return "a cgroup"
	}
	// "pod <uid>": a pod the agent could not name (no pod watch).
	if workload.IsSystemdUnit(device) || device == "other" || strings.HasPrefix(device, "pod ") {
		return device
	}
	return "pod " + device
}

// CFSPeriods are a CPU-throttled workload's CFS bandwidth periods, read
// from the counters of the pattern's stalls: per second, the periods it
// had runnable tasks in and those it was throttled in, during a stall (the
// counter interval of the window with the most throttled periods, as a
// suspect's during is its highest rate) and at baseline (the median
// interval before it); each the median over the pattern's stalls. The JSON
// keys are part of the CLI's interface.
type CFSPeriods struct {
	During            float64 `json:"during"`
	ThrottledDuring   float64 `json:"throttled_during"`
	Baseline          float64 `json:"baseline"`
	ThrottledBaseline float64 `json:"throttled_baseline"`
	// LimitCPUs is its CPU limit, the CFS quota over its period, as the
	// agent reports it (spikehunt.cgroup.cpu.limit); 0 when it has none
	// or it was not reported.
	LimitCPUs float64 `json:"limit_cpus"`
}

// throttleMetrics are the families a CPU-throttled workload is a suspect
// by, whose sentence gives its CFS periods.
var throttleMetrics = map[string]bool{"spikehunt.cgroup.cpu.throttled_time": true, "spikehunt.cgroup.cpu.throttled_periods": true}

// causeWords is the sentence for a family of an everyday cause: the
// opening, which leaves a parenthesis open for the caller to add to and
// close; the tail that follows it ("" or ": …"); and, when the figure the
// sentence gives is the stall's excess put back into the stall (a share of
// periods, which has a ceiling), that figure as read over a counter step
// (what a coarse step's note quotes), else "".
type causeWords struct{ open, tail, read string }

// causeSentence words a family of an everyday cause. during is the figure
// to give (as read, but for a share); undilute puts the stall's excess of another rate of the same
// counters back into the stall in the same way. ok is false for other
// families.
func causeSentence(x PatternSuspect, during float64, undilute func(during, baseline float64) float64) (causeWords, bool) {
	switch x.Metric {
	case "spikehunt.cgroup.cpu.throttled_time", "spikehunt.cgroup.cpu.throttled_periods":
		return throttleSentence(x, during, undilute), true
	case "spikehunt.cgroup.cpu.usage":
		// Which CPUs a cgroup ran on is in neither its cpu.stat nor
		// cpuacct.usage (the agent reads no per-CPU or cpuset file), so the
		// sentence names no CPUs.
		return causeWords{open: fmt.Sprintf("%s used %s CPUs during the stalls (baseline %s",
			WorkloadName(x.Device), rate(during), rate(x.Baseline))}, true
	case "spikehunt.cgroup.pressure.stall_time":
		return causeWords{open: fmt.Sprintf("%s stalled on %s: ~%s s per second during the stalls (baseline %s s",
			WorkloadName(x.Device), orDash(x.Mode), rate(during), rate(x.Baseline))}, true
	case "spikehunt.cgroup.memory.events":
		what := "hit its memory limit"
		switch x.Mode {
		case "high":
			what = "went over its memory.high"
		case "oom", "oom_kill":
			what = "ran out of memory (" + x.Mode + ")"
		}
		return causeWords{open: fmt.Sprintf("%s %s %s×/s during the stalls (baseline %s",
			WorkloadName(x.Device), what, grouped(during), grouped(x.Baseline)), tail: ": its allocating tasks reclaim in the cgroup"}, true
	case "spikehunt.memory.reclaim.scanned":
		return causeWords{open: fmt.Sprintf("direct reclaim: %s pages/s scanned by allocating tasks (baseline %s",
			grouped(during), grouped(x.Baseline))}, true
	case "spikehunt.memory.reclaim.stalls":
		return causeWords{open: fmt.Sprintf("direct reclaim: allocating tasks stalled %s×/s (baseline %s",
			grouped(during), grouped(x.Baseline))}, true
	case "spikehunt.memory.compaction.stalls":
		return causeWords{open: fmt.Sprintf("memory compaction stalled allocating tasks %s×/s (baseline %s",
			grouped(during), grouped(x.Baseline))}, true
	case diskLatencyMetric:
		// Latency per IO is not diluted by the step's quiet seconds, as a
		// rate is, but by its other IOs, whose count the family does not
		// carry: the figure is the one read.
		perIO := ioLatency(x.During)
		return causeWords{open: fmt.Sprintf("%s IOs on %s took ~%s each during the stalls (baseline %s",
			orDash(x.Mode), orDash(x.Device), perIO, ioLatency(x.Baseline))}, true
	case "spikehunt.tcp.listen_overflows":
		return causeWords{open: fmt.Sprintf("the TCP listen queue overflowed %s×/s (baseline %s",
			grouped(during), grouped(x.Baseline)), tail: ": clients retry their SYN after 1 s"}, true
	case "spikehunt.tcp.listen_drops":
		return causeWords{open: fmt.Sprintf("the TCP listen queue dropped %s SYNs/s (baseline %s",
			grouped(during), grouped(x.Baseline)), tail: ": clients retry after 1 s"}, true
	}
	return causeWords{}, false
}

// throttleSentence says in how many of its CFS periods a workload was
// throttled during the stalls, against its limit and its baseline: "pod
// shop/checkout-7d9 was CPU-throttled in 9 of 10 periods during the
// stalls (limit 0.5 CPU; baseline 0". Without its periods it gives the
// throttled time.
func throttleSentence(x PatternSuspect, during float64, undilute func(during, baseline float64) float64) causeWords {
	var limit string
	c := x.CFS
	if c != nil && c.LimitCPUs > 0 {
		unit := "CPUs"
		if c.LimitCPUs <= 1 {
			unit = "CPU"
		}
		limit = "limit " + rate(c.LimitCPUs) + " " + unit + "; "
	}
	if c == nil || c.During <= 0 || c.ThrottledDuring <= 0 {
		if x.Metric != "spikehunt.cgroup.cpu.throttled_time" {
			return causeWords{open: fmt.Sprintf("%s was CPU-throttled in %s periods/s during the stalls (%sbaseline %s",
				WorkloadName(x.Device), rate(during), limit, rate(x.Baseline))}
		}
		return causeWords{open: fmt.Sprintf("%s was CPU-throttled: ~%s s of throttled time per second during the stalls (%sbaseline %s s",
			WorkloadName(x.Device), rate(during), limit, rate(x.Baseline))}
	}
	periods := undilute(c.During, c.Baseline)
	throttled := math.Min(undilute(c.ThrottledDuring, c.ThrottledBaseline), periods)
	baseline := "0"
	if b := rate(c.ThrottledBaseline); b != "0" {
		baseline = b + " of " + rate(c.Baseline)
	}
	return causeWords{
		open: fmt.Sprintf("%s was CPU-throttled in %s of %s periods during the stalls (%sbaseline %s",
			WorkloadName(x.Device), rate(throttled), rate(periods), limit, baseline),
		read: rate(c.ThrottledDuring) + " of " + rate(c.During) + " periods",
	}
}

// grouped renders a count per second as rate does, with its thousands
// grouped from 1,000 up: "3,100".
func grouped(v float64) string {
	if math.Abs(v) < 1000 || math.IsInf(v, 0) || math.IsNaN(v) {
		return rate(v)
	}
	digits := strconv.FormatFloat(math.Abs(math.Round(v)), 'f', 0, 64)
	var b strings.Builder
	if v < 0 {
		b.WriteByte('-')
	}
	for i, d := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return b.String()
}

// The suspects' windows around a spike window, as the detector's defaults
// set them (docs/detection.md): the counter intervals overlapping
// [start − suspectMargin, end + suspectMargin] are during the stall, those
// inside [start − suspectBaseline, start − suspectGuard] its baseline.
const (
	suspectMargin   = time.Second
	suspectBaseline = 30 * time.Minute
	suspectGuard    = 30 * time.Second
	// suspectSlot is the grain of the join between windows and counters.
	suspectSlot = 5 * time.Minute
)
