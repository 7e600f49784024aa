package query

import (
	"context"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/workload"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestTheEverydayCausesAreSaidInTheTermsAnSREActsOn(t *testing.T) {
	cfs := &CFSPeriods{During: 10, ThrottledDuring: 9, Baseline: 10, LimitCPUs: 0.5}
	for _, tc := range []struct {
		x    PatternSuspect
		want string
	}{
		{PatternSuspect{Metric: "spikehunt.cgroup.cpu.throttled_time", Device: "shop/checkout-7d9c8b6f5", During: 2.4, CFS: cfs},
			"pod shop/checkout-7d9c8b6f5 was CPU-throttled in 9 of 10 periods during the stalls (limit 0.5 CPU; baseline 0)"},
		{PatternSuspect{Metric: "spikehunt.cgroup.cpu.throttled_periods", Device: "shop/checkout-7d9c8b6f5", During: 9,
			CFS: &CFSPeriods{During: 20, ThrottledDuring: 19.6, Baseline: 20, ThrottledBaseline: 1.2, LimitCPUs: 2}},
			"pod shop/checkout-7d9c8b6f5 was CPU-throttled in 19.6 of 20 periods during the stalls (limit 2 CPUs; baseline 1.2 of 20)"},
		// Without its periods (no counters for them), the throttled time.
		{PatternSuspect{Metric: "spikehunt.cgroup.cpu.throttled_time", Device: "shop/checkout-7d9c8b6f5", During: 2.4},
			"pod shop/checkout-7d9c8b6f5 was CPU-throttled: ~2.4 s of throttled time per second during the stalls (baseline 0 s)"},
		{PatternSuspect{Metric: "spikehunt.cgroup.cpu.throttled_time", Device: "shop/checkout-7d9c8b6f5", During: 2.4, CFS: &CFSPeriods{LimitCPUs: 0.5}},
			"pod shop/checkout-7d9c8b6f5 was CPU-throttled: ~2.4 s of throttled time per second during the stalls (limit 0.5 CPU; baseline 0 s)"},
		{PatternSuspect{Metric: "spikehunt.cgroup.cpu.usage", Device: "system.slice/backup.service", During: 1.9, Baseline: 0.02},
			"system.slice/backup.service used 1.9 CPUs during the stalls (baseline 0.02)"},
		{PatternSuspect{Metric: "spikehunt.cgroup.memory.events", Mode: "max", Device: "shop/cache-5f6c7d8b9", During: 67},
			"pod shop/cache-5f6c7d8b9 hit its memory limit 67×/s during the stalls (baseline 0): its allocating tasks reclaim in the cgroup"},
		{PatternSuspect{Metric: "spikehunt.memory.reclaim.scanned", During: 3100},
			"direct reclaim: 3,100 pages/s scanned by allocating tasks (baseline 0)"},
		{PatternSuspect{Metric: "spikehunt.memory.reclaim.scanned", During: 1234567, Baseline: 12.5},
			"direct reclaim: 1,234,567 pages/s scanned by allocating tasks (baseline 12.5)"},
		{PatternSuspect{Metric: "spikehunt.tcp.listen_overflows", During: 40},
			"the TCP listen queue overflowed 40×/s (baseline 0): clients retry their SYN after 1 s"},
		{PatternSuspect{Metric: "spikehunt.disk.operation_latency", Mode: "write", Device: "loop1", During: 2.8},
			"write IOs on loop1 took ~2.8 s each during the stalls (baseline 0 ms)"},
		// A latency over a coarse step is diluted by the step's other IOs:
		// it is not put back into the stall.
		{PatternSuspect{Metric: "spikehunt.disk.operation_latency", Mode: "write", Device: "sda", During: 0.0281, Baseline: 0.00082, CounterStepS: 30},
			"write IOs on sda took ~28 ms each during the stalls (baseline 0.82 ms; counters every 30 s, coarser than the ~1.0 s stall: read over a step, diluted)"},
		// Counters every 30 s over a 1 s stall: the sentence gives the rate
		// read, as spikehunt suspects does, and the excess put back into the
		// stall as the bound it is.
		{PatternSuspect{Metric: "spikehunt.tcp.listen_overflows", During: 13.3, CounterStepS: 30},
			"the TCP listen queue overflowed 13.3×/s (baseline 0; counters every 30 s, coarser than the ~1.0 s stall: read over a step, diluted; up to 399/s within the stall, if all of the step's excess fell in it): clients retry their SYN after 1 s"},
		{PatternSuspect{Metric: "spikehunt.cgroup.cpu.throttled_time", Device: "shop/checkout-7d9c8b6f5", During: 0.08, CounterStepS: 30,
			CFS: &CFSPeriods{During: 10, ThrottledDuring: 0.3, Baseline: 10, LimitCPUs: 0.5}},
			"pod shop/checkout-7d9c8b6f5 was CPU-throttled in 9 of 10 periods during the stalls (limit 0.5 CPU; baseline 0; counters every 30 s, coarser than the ~1.0 s stall: over a step it reads 0.3 of 10 periods, diluted)"},
	} {
		if got := SuspectSentence(tc.x, time.Second); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.x.Metric, got, tc.want)
		}
	}
}

func TestAWorkloadIsNamedAsAPodOrAsItsUnit(t *testing.T) {
	for device, want := range map[string]string{
		"shop/checkout-7d9c8b6f5-x2k4q":     "pod shop/checkout-7d9c8b6f5-x2k4q",
		"shop/checkout-7d9c8b6f5-x2k4q/app": "pod shop/checkout-7d9c8b6f5-x2k4q/app",
		"system.slice/backup.service":       "system.slice/backup.service",
		"user.slice/user-1000.slice":        "user.slice/user-1000.slice",
		"":                                  "a cgroup",
	} {
		if got := WorkloadName(device); got != want {
			t.Errorf("WorkloadName(%q) = %q, want %q", device, got, want)
		}
	}
}

// The queries that match a pattern's families against each host's rows
// name a workload as the detector does.
func TestTheStoreNamesAWorkloadAsTheDetectorDoes(t *testing.T) {
	st := testenv.ClickHouse(t)
	cases := [][2]string{
		{"spikehunt.cgroup.cpu.throttled_time", "shop/checkout-7d9c8b6f5-x2k4q"},
		{"spikehunt.cgroup.cpu.usage", "shop/checkout-7d9c8b6f5-x2k4q/app"},
		{"spikehunt.cgroup.cpu.usage", "kube-system/kube-proxy-zx5wq"},
		{"spikehunt.cgroup.cpu.usage", "db/postgres-0"},
		{"spikehunt.cgroup.cpu.usage", "shop/web-queue"},
		{"spikehunt.cgroup.cpu.usage", "system.slice/backup.service"},
		{"spikehunt.cgroup.cpu.usage", "system.slice/docker-bcdfg.scope"},
		{"spikehunt.interrupts", "ns/eth0-bcdfg"},
	}
	for _, c := range cases {
		q := "SELECT " + workload.FamilySQL + " FROM (SELECT " + store.QuoteString(c[0]) + " AS metric, " + store.QuoteString(c[1]) + " AS device)"
		tab, err := store.Select(context.Background(), st, q)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := tab.Rows[0][0], workload.Family(c[0], c[1]); got != want {
			t.Errorf("%s %s: the store says %q, the detector %q", c[0], c[1], got, want)
		}
	}
}
