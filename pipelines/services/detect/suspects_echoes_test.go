package detect

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The cause lab's windows of its detect/6 run that missed (c) and (e)
// (docs/causes.md, "detect/7"), as ranked by deviation, and what the echo
// rules make of them.
func TestCausesGoBeforeTheirEchoes(t *testing.T) {
	const (
		unit  = "spikehunt-causelab.slice/shop-reclaim.service"
		netrx = "spikehunt-causelab.slice/shop-netrx.service"
		hog   = "spikehunt-causelab.slice/hog-neighbour.service"
	)
	psi := func(id, device, mode string, during float64) suspectRow {
		return suspectRow{spikeID: id, Suspect: Suspect{Metric: pressureMetric, CPU: -1, Device: device, Mode: mode, During: during}}
	}
	cpu := func(id string, n int, mode string, base, during float64) suspectRow {
		return suspectRow{spikeID: id, Suspect: Suspect{Metric: "system.cpu.time", CPU: n, Mode: mode, Baseline: base, During: during}}
	}
	cg := func(id, metric, device, mode string, base, during float64) suspectRow {
		return suspectRow{spikeID: id, Suspect: Suspect{Metric: metric, CPU: -1, Device: device, Mode: mode, Baseline: base, During: during}}
	}
	rows := []suspectRow{
		// (c), 03:59:20: full io first, and no full memory row; some
		// memory rose by more than half as much.
		psi("c1", "io", "full", 0.36), psi("c1", "memory", "some", 0.27), psi("c1", "io", "some", 0.44),
		cpu("c1", 0, "iowait", 0, 0.5), cg("c1", cgroupCPUUsage, unit, "", 0.08, 0.76),
		cg("c1", "spikehunt.cgroup.memory.events", unit, "max", 0, 26),
		// (c), 03:58:40: no memory pressure row at all; the unit hit its
		// limit 71 times a second, and its own CPU rose with its reclaim.
		psi("c2", "io", "some", 0.44), cg("c2", cgroupCPUUsage, unit, "", 0.08, 0.73),
		cpu("c2", 1, "nice", 0, 0.41), cg("c2", "spikehunt.cgroup.memory.events", unit, "max", 0, 71),
		// (e), 04:02:10: the app's own cgroup, charged the NET_RX softirq
		// that ran in it, first; CPU 1's softirq time rose twice as much.
		cg("e1", cgroupCPUUsage, netrx, "", 0.127, 0.587), cpu("e1", 1, "softirq", 0.01, 0.98),
		psi("e1", "cpu", "some", 0.83),
		// (b): the neighbour's CPU stays first; the softirq time that came
		// with it rose by far less.
		cg("b1", cgroupCPUUsage, hog, "", 0, 0.98), cpu("b1", 1, "softirq", 0.01, 0.03),
		// A disk stall with a unit at its limit whose IO pressure is not
		// the reclaim's would read as reclaim: the limit hits come first.
		// A disk whose IOs got slow still names the disk.
		psi("f1", "io", "some", 1.0), cg("f1", diskLatencyMetric, "loop1", "write", 0, 0.96),
	}
	var got []string
	for _, r := range preferLeaves(slices.Clone(rows), 10) {
		got = append(got, fmt.Sprintf("%s %d %s %s %s", r.spikeID, r.Rank, r.Metric, r.Device, r.Mode))
	}
	want := []string{
		"c1 1 spikehunt.pressure.stall_time memory some",
		"c1 2 system.cpu.time  iowait",
		"c1 3 spikehunt.cgroup.memory.events " + unit + " max",
		"c1 4 spikehunt.cgroup.cpu.usage " + unit + " ",
		"c1 5 spikehunt.pressure.stall_time io some",
		"c1 6 spikehunt.pressure.stall_time io full",
		"c2 1 system.cpu.time  nice",
		"c2 2 spikehunt.cgroup.memory.events " + unit + " max",
		"c2 3 spikehunt.cgroup.cpu.usage " + unit + " ",
		"c2 4 spikehunt.pressure.stall_time io some",
		"e1 1 system.cpu.time  softirq",
		"e1 2 spikehunt.cgroup.cpu.usage " + netrx + " ",
		"e1 3 spikehunt.pressure.stall_time cpu some",
		"b1 1 spikehunt.cgroup.cpu.usage " + hog + " ",
		"b1 2 system.cpu.time  softirq",
		"f1 1 spikehunt.disk.operation_latency loop1 write",
		"f1 2 spikehunt.pressure.stall_time io some",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ranks (-want +got):\n%s", diff)
	}
}
