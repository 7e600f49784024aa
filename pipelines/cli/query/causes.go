package query

import (
	"fmt"
	"strings"

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

// causeSentence is the opening of the sentence for a family of an everyday
// cause, with during already undiluted; ok is false for other families.
// The caller closes the parenthesis the opening leaves open.
func causeSentence(x PatternSuspect, during float64) (s string, ok bool) {
	switch x.Metric {
	case "spikehunt.cgroup.cpu.throttled_time":
		return fmt.Sprintf("%s was CPU-throttled: ~%s s of throttled time per second during the stalls (baseline %s s",
			WorkloadName(x.Device), rate(during), rate(x.Baseline)), true
	case "spikehunt.cgroup.cpu.usage":
		return fmt.Sprintf("%s used %s CPUs during the stalls (baseline %s",
			WorkloadName(x.Device), rate(during), rate(x.Baseline)), true
	case "spikehunt.cgroup.pressure.stall_time":
		return fmt.Sprintf("%s stalled on %s: ~%s s per second during the stalls (baseline %s s",
			WorkloadName(x.Device), orDash(x.Mode), rate(during), rate(x.Baseline)), true
	case "spikehunt.cgroup.memory.events":
		what := "hit its memory limit"
		switch x.Mode {
		case "high":
			what = "went over its memory.high"
		case "oom", "oom_kill":
			what = "ran out of memory (" + x.Mode + ")"
		}
		return fmt.Sprintf("%s %s %s×/s during the stalls (baseline %s; its allocating tasks reclaim in the cgroup",
			WorkloadName(x.Device), what, rate(during), rate(x.Baseline)), true
	case "spikehunt.memory.reclaim.scanned":
		return fmt.Sprintf("direct reclaim: %s pages/s scanned by allocating tasks (baseline %s",
			rate(during), rate(x.Baseline)), true
	case "spikehunt.memory.reclaim.stalls":
		return fmt.Sprintf("direct reclaim: allocating tasks stalled %s×/s (baseline %s",
			rate(during), rate(x.Baseline)), true
	case "spikehunt.memory.compaction.stalls":
		return fmt.Sprintf("memory compaction stalled allocating tasks %s×/s (baseline %s",
			rate(during), rate(x.Baseline)), true
	case "spikehunt.tcp.listen_overflows":
		return fmt.Sprintf("the TCP listen queue overflowed %s×/s (baseline %s; clients retry their SYN after 1 s",
			rate(during), rate(x.Baseline)), true
	case "spikehunt.tcp.listen_drops":
		return fmt.Sprintf("the TCP listen queue dropped %s SYNs/s (baseline %s; clients retry after 1 s",
			rate(during), rate(x.Baseline)), true
	}
	return "", false
}
