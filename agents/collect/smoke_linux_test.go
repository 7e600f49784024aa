package collect

import (
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// metricsBySampler says which metrics prove that a sampler ran.
var metricsBySampler = map[string][]string{
	"stat":       {"system.cpu.time", "spikehunt.context_switches"},
	"softirqs":   {"spikehunt.softirqs"},
	"interrupts": {"spikehunt.interrupts"},
	"netdev":     {"system.network.packet.count", "system.network.io", "system.network.errors", "system.network.packet.dropped"},
	"ethtool":    {"spikehunt.network.driver_drops"},
	"diskstats":  {"system.disk.operations", "system.disk.operation_time", "system.disk.io_time", "spikehunt.disk.in_flight"},
	"schedstat":  {"spikehunt.cpu.run_delay", "spikehunt.cpu.timeslices"},
	"pressure":   {"spikehunt.pressure.stall_time"},
	"meminfo":    {"spikehunt.memory.slab"},
	"vmstat":     {"spikehunt.memory.reclaim.scanned", "spikehunt.memory.major_faults", "spikehunt.memory.dirty"},
	"netsnmp":    {"spikehunt.tcp.retransmits", "spikehunt.tcp.listen_overflows", "spikehunt.udp.rcvbuf_errors"},
	// cgroup: this machine has no workload cgroup of its own; the
	// privileged test in cgroup_linux_test.go makes one.
}

// Against this machine's real /proc and /sys: two passes 100 ms apart
// return points from every sampler the kernel supports, none negative.
func TestSmokeOnThisMachine(t *testing.T) {
	c, err := New(Options{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Sample()
	c.SampleSlow()
	time.Sleep(100 * time.Millisecond)
	pts := append(c.Sample(), c.SampleSlow()...)

	seen := map[string]bool{}
	for _, p := range pts {
		seen[p.Metric] = true
		checkPoint(t, p)
	}
	for sampler, metrics := range metricsBySampler {
		if !supportedHere(sampler) {
			t.Logf("%s: not supported on this kernel", sampler)
			continue
		}
		for _, m := range metrics {
			if !seen[m] {
				t.Errorf("sampler %s emitted no %s", sampler, m)
			}
		}
	}
	var names []string
	for m := range seen {
		names = append(names, m)
	}
	sort.Strings(names)
	t.Logf("%d points, metrics %v", len(pts), names)
}

func checkPoint(t *testing.T, p telemetry.Point) {
	t.Helper()
	switch {
	case p.Value < 0:
		t.Errorf("%s: negative value %v", seriesKey(p), p.Value)
	case p.End.Before(p.Start):
		t.Errorf("%s: End %v before Start %v", seriesKey(p), p.End, p.Start)
	case p.Start.Equal(p.End) && !slices.Contains([]string{"spikehunt.disk.in_flight", "spikehunt.memory.slab", "spikehunt.memory.dirty", "spikehunt.memory.writeback", "spikehunt.cgroup.cpu.limit"}, p.Metric):
		t.Errorf("%s: zero-length interval on a delta", seriesKey(p))
	case p.Unit == "":
		t.Errorf("%s: no unit", seriesKey(p))
	}
}

// supportedHere reports whether the sampler's source exists on this host.
func supportedHere(sampler string) bool {
	switch sampler {
	case "schedstat":
		_, err := os.Stat("/proc/schedstat")
		return err == nil
	case "pressure":
		_, err := os.Stat("/proc/pressure/cpu")
		return err == nil
	case "ethtool":
		// Only interfaces backed by a device are read; a host may have none.
		ents, _ := os.ReadDir("/sys/class/net")
		for _, e := range ents {
			if _, err := os.Stat("/sys/class/net/" + e.Name() + "/device"); err == nil {
				return true
			}
		}
		return false
	}
	return true
}
