package detect

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// series names a suspect the way the tests state them.
func series(s Suspect) string {
	return fmt.Sprintf("%s cpu=%d device=%s mode=%s", s.Metric, s.CPU, s.Device, s.Mode)
}

func TestDetectSuspects(t *testing.T) {
	// Every host stalls for one second at 30:05 and has the same quiet
	// counters, but for what each case adds during that second.
	const stallAt = 1805
	during := func(s []counterSeries, match func(counterSeries) bool, extra float64) []counterSeries {
		return withExtra(s, match, extra, stallAt, stallAt+1)
	}
	// slowReads: sda's 150 reads a second wait a quarter of a second each
	// during the stall (40 s of IO time).
	slowReads := func(s []counterSeries) []counterSeries {
		return during(s, func(c counterSeries) bool {
			return c.metric == "system.disk.operation_time" && c.device == "sda" && c.mode == "read"
		}, 40)
	}
	const (
		sdaReadLatency = diskLatencyMetric + " cpu=-1 device=sda mode=read"
		reclaimUnit    = "spikehunt-causelab.slice/shop-reclaim.service"
	)
	oneOf := func(cpus ...int) func(int) bool { return func(c int) bool { return slices.Contains(cpus, c) } }
	storm := oneOf(0, 2, 4, 6)
	tests := []struct {
		name   string
		series []counterSeries
		// want are the top suspects, in rank order, or all of them when
		// exact; within runs of `tie` suspects the order is noise and is
		// not compared.
		want  []string
		exact bool
		tie   int
		every int // the counters' interval in seconds; 0 is 10
	}{
		{
			name: "NET_RX softirq at 100% on CPUs 0, 2, 4, 6 puts those series on top",
			series: during(during(quietHost(), func(c counterSeries) bool {
				return c.metric == "spikehunt.softirqs" && c.mode == "NET_RX" && storm(c.cpu)
			}, 100_000), func(c counterSeries) bool {
				return c.metric == "system.cpu.time" && c.mode == "softirq" && storm(c.cpu)
			}, 1.0),
			// The time taken from the workload first, then the softirqs raised.
			want: []string{
				"system.cpu.time cpu=0 device= mode=softirq", "system.cpu.time cpu=2 device= mode=softirq",
				"system.cpu.time cpu=4 device= mode=softirq", "system.cpu.time cpu=6 device= mode=softirq",
				"spikehunt.softirqs cpu=0 device= mode=NET_RX", "spikehunt.softirqs cpu=2 device= mode=NET_RX",
				"spikehunt.softirqs cpu=4 device= mode=NET_RX", "spikehunt.softirqs cpu=6 device= mode=NET_RX",
			},
			exact: true,
			tie:   4,
		},
		{
			name: "packets received on a down interface outrank the softirq time they cause",
			series: during(during(during(quietHost(), func(c counterSeries) bool {
				return c.metric == "system.network.packet.count" && c.device == "eth1" && c.mode == "receive"
			}, 2_000), func(c counterSeries) bool {
				return c.metric == "system.cpu.time" && c.mode == "softirq" && c.cpu == 1
			}, 1.0), func(c counterSeries) bool {
				// Alone, the NET_RX burst deviates more than the packets do.
				return c.metric == "spikehunt.softirqs" && c.mode == "NET_RX" && c.cpu == 1
			}, 1_000_000),
			want: []string{"system.network.packet.count cpu=-1 device=eth1 mode=receive"},
		},
		{
			name: "the same traffic on an up interface ranks as an ordinary counter",
			series: during(quietHost(), func(c counterSeries) bool {
				return c.metric == "system.network.packet.count" && c.device == "eth0" && c.mode == "receive"
			}, 2_000_000),
			want: []string{"system.network.packet.count cpu=-1 device=eth0 mode=receive"},
		},
		{
			// 150 reads a second that waited a quarter of a second each
			// during the stall: 28 ms a read over the interval, against 0.13.
			name:   "a disk whose reads got slow is rank 1, by their latency",
			series: slowReads(quietHost()),
			want:   []string{sdaReadLatency},
		},
		{
			// Case (c) of the cause lab (docs/causes.md): the unit's writer
			// fills its memory with dirty page cache; vda goes from a write
			// every few seconds to a thousand in the second, 5.8 s of IO
			// time, each write 6 ms. Summed, that time outranked the limit
			// hits; per IO it is no suspect, and neither is vda's busy time.
			name: "a writeback burst on a fast disk does not outrank a unit's memory-limit hits",
			series: during(during(during(during(append(quietHost(),
				counterSeries{metric: "spikehunt.cgroup.memory.events", cpu: -1, device: reclaimUnit, mode: "max"},
				counterSeries{metric: "system.disk.operations", cpu: -1, device: "vda", mode: "write", rate: 0.2, noise: 0.05},
				counterSeries{metric: "system.disk.operation_time", cpu: -1, device: "vda", mode: "write", rate: 0.002, noise: 0.0005},
				counterSeries{metric: "system.disk.io_time", cpu: -1, device: "vda", rate: 0.002, noise: 0.0005}),
				func(c counterSeries) bool { return c.metric == "spikehunt.cgroup.memory.events" }, 641),
				func(c counterSeries) bool { return c.metric == "system.disk.operations" && c.device == "vda" }, 1000),
				func(c counterSeries) bool { return c.metric == "system.disk.operation_time" && c.device == "vda" }, 5.8),
				func(c counterSeries) bool { return c.metric == "system.disk.io_time" && c.device == "vda" }, 1),
			want: []string{"spikehunt.cgroup.memory.events cpu=-1 device=" + reclaimUnit + " mode=max"},
		},
		{
			// The IO stall above the disk (docs/field-stories.md): ten
			// writes a second that took 1.5 s each during the stall (15 s of
			// IO time), on the same host as a disk writing back 20 s of IO
			// time in 2,000 fast writes. Summed, the writeback ranked first.
			name: "writes that take 1.5 s each outrank a busier disk whose writes stay fast",
			series: during(during(during(append(quietHost(),
				counterSeries{metric: "system.disk.operations", cpu: -1, device: "nvme0n1", mode: "write", rate: 10, noise: 1},
				counterSeries{metric: "system.disk.operation_time", cpu: -1, device: "nvme0n1", mode: "write", rate: 0.004, noise: 0.0005},
				counterSeries{metric: "system.disk.operations", cpu: -1, device: "vda", mode: "write", rate: 0.2, noise: 0.05},
				counterSeries{metric: "system.disk.operation_time", cpu: -1, device: "vda", mode: "write", rate: 0.002, noise: 0.0005}),
				func(c counterSeries) bool { return c.metric == "system.disk.operation_time" && c.device == "nvme0n1" }, 15),
				func(c counterSeries) bool { return c.metric == "system.disk.operations" && c.device == "vda" }, 2000),
				func(c counterSeries) bool { return c.metric == "system.disk.operation_time" && c.device == "vda" }, 20),
			want: []string{diskLatencyMetric + " cpu=-1 device=nvme0n1 mode=write"},
		},
		{
			// Case (f) of the cause lab: an idle loop device whose writes are
			// throttled to 50 a second while 100 a second queue on it. An
			// idle disk's latency reads 0, so it has a baseline to rise from.
			name: "an idle device whose writes take seconds ranks first against a zero baseline",
			series: during(during(append(quietHost(),
				counterSeries{metric: "system.disk.operations", cpu: -1, device: "loop1", mode: "write"},
				counterSeries{metric: "system.disk.operation_time", cpu: -1, device: "loop1", mode: "write"}),
				func(c counterSeries) bool { return c.metric == "system.disk.operations" && c.device == "loop1" }, 50),
				func(c counterSeries) bool { return c.metric == "system.disk.operation_time" && c.device == "loop1" }, 280),
			want: []string{diskLatencyMetric + " cpu=-1 device=loop1 mode=write"},
		},
		{
			// Summed, its half second over the 10 s interval deviated by 25.
			name: "one slow IO on an idle disk is no suspect",
			series: during(during(append(quietHost(),
				counterSeries{metric: "system.disk.operations", cpu: -1, device: "sdc", mode: "read"},
				counterSeries{metric: "system.disk.operation_time", cpu: -1, device: "sdc", mode: "read"}),
				func(c counterSeries) bool { return c.metric == "system.disk.operations" && c.device == "sdc" }, 1),
				func(c counterSeries) bool { return c.metric == "system.disk.operation_time" && c.device == "sdc" }, 0.5),
			want:  nil,
			exact: true,
		},
		{
			name: "memory pressure is told apart from cpu and io pressure",
			series: during(quietHost(), func(c counterSeries) bool {
				return c.metric == "spikehunt.pressure.stall_time" && c.resource == "memory"
			}, 0.8),
			want:  []string{"spikehunt.pressure.stall_time cpu=-1 device=memory mode=some"},
			exact: true,
		},
		{
			name: "idle time falling during a storm is no suspect",
			series: during(during(quietHost(), func(c counterSeries) bool {
				return c.metric == "system.cpu.time" && c.mode == "idle" && c.cpu == 3
			}, -0.58), func(c counterSeries) bool {
				return c.metric == "system.cpu.time" && c.mode == "irq" && c.cpu == 3
			}, 0.58),
			want:  []string{"system.cpu.time cpu=3 device= mode=irq"},
			exact: true,
		},
		{
			name: "the agent's own telemetry moving with the spike is no suspect",
			series: during(during(slowReads(append(quietHost(),
				counterSeries{metric: "spikehunt.agent.requests.dropped"},
				counterSeries{metric: "spikehunt.ingest.rows", rate: 100, noise: 5})), func(c counterSeries) bool {
				return c.metric == "spikehunt.agent.requests.dropped"
			}, 50_000), func(c counterSeries) bool {
				return c.metric == "spikehunt.ingest.rows"
			}, 1_000_000),
			want:  []string{sdaReadLatency},
			exact: true,
		},
		{
			name: "a pod's throttled time ranks first, as CPU time does",
			series: during(during(append(quietHost(),
				counterSeries{metric: "spikehunt.cgroup.cpu.usage", cpu: -1, device: "shop/checkout-7d9", rate: 0.2, noise: 0.02},
				counterSeries{metric: "spikehunt.cgroup.cpu.periods", cpu: -1, device: "shop/checkout-7d9", rate: 10},
				counterSeries{metric: "spikehunt.cgroup.cpu.throttled_periods", cpu: -1, device: "shop/checkout-7d9"},
				counterSeries{metric: "spikehunt.cgroup.cpu.throttled_time", cpu: -1, device: "shop/checkout-7d9"}),
				func(c counterSeries) bool { return c.metric == "spikehunt.cgroup.cpu.throttled_time" }, 0.5),
				func(c counterSeries) bool { return c.metric == "spikehunt.cgroup.cpu.throttled_periods" }, 9),
			want: []string{"spikehunt.cgroup.cpu.throttled_time cpu=-1 device=shop/checkout-7d9 mode="},
		},
		{
			// Disk bytes from a zero baseline deviate by the bytes
			// themselves; with the floor of a count (1/s), 90 MB/s of
			// page-cache writeback outranked a neighbour taking most of a
			// CPU. Bytes per second have the floor network bytes have.
			name: "a neighbour's CPU outranks disk writes that start from nothing",
			series: during(during(append(quietHost(),
				counterSeries{metric: "spikehunt.cgroup.cpu.usage", cpu: -1, device: "system.slice/backup.service", rate: 0.02, noise: 0.005},
				counterSeries{metric: "system.disk.io", cpu: -1, device: "loop1", mode: "write"}),
				func(c counterSeries) bool { return c.metric == "spikehunt.cgroup.cpu.usage" }, 0.9),
				func(c counterSeries) bool { return c.metric == "system.disk.io" }, 90e6),
			want: []string{"spikehunt.cgroup.cpu.usage cpu=-1 device=system.slice/backup.service mode="},
		},
		{
			// A backup's transient unit is created when it starts: it has
			// no baseline, and it used nothing before. Its slice's rise is
			// the unit's, counted again.
			name: "a unit that appears with the stall is judged against zero, and stands in for its slice",
			series: during(during(append(quietHost(),
				counterSeries{metric: "spikehunt.cgroup.cpu.usage", cpu: -1, device: "system.slice", rate: 0.05},
				counterSeries{metric: "spikehunt.cgroup.cpu.usage", cpu: -1, device: "system.slice/backup.service", appearsAt: stallAt - 10}),
				func(c counterSeries) bool { return c.device == "system.slice/backup.service" }, 0.9),
				func(c counterSeries) bool { return c.device == "system.slice" }, 0.9),
			want:  []string{"spikehunt.cgroup.cpu.usage cpu=-1 device=system.slice/backup.service mode="},
			exact: true,
		},
		{
			// Case (g) of the cause lab (docs/causes.md): the app's unit was
			// made a minute before its first stall and served its requests
			// since, at half a CPU; after the stall it catches up on the
			// requests that waited. Three intervals of the baseline are
			// what it is judged against, not zero.
			name: "a unit reported in a few baseline intervals is judged against them, not zero",
			series: during(append(quietHost(),
				counterSeries{metric: "spikehunt.cgroup.cpu.usage", cpu: -1, device: "spikehunt-causelab.slice/shop-lock.service", rate: 0.5, noise: 0.02, appearsAt: stallAt - 60}),
				func(c counterSeries) bool { return c.device == "spikehunt-causelab.slice/shop-lock.service" }, 0.5),
			want:  nil,
			exact: true,
		},
		{
			// Two services rose, and the slice's own tasks too: neither
			// service explains half of the slice's rise.
			name: "a parent whose rise no one child explains stays",
			series: during(during(during(append(quietHost(),
				counterSeries{metric: "spikehunt.cgroup.cpu.usage", cpu: -1, device: "system.slice", rate: 0.05},
				counterSeries{metric: "spikehunt.cgroup.cpu.usage", cpu: -1, device: "system.slice/a.service", rate: 0.05},
				counterSeries{metric: "spikehunt.cgroup.cpu.usage", cpu: -1, device: "system.slice/b.service", rate: 0.05}),
				func(c counterSeries) bool { return c.device == "system.slice/a.service" }, 0.45),
				func(c counterSeries) bool { return c.device == "system.slice/b.service" }, 0.5),
				func(c counterSeries) bool { return c.device == "system.slice" }, 1.25),
			want: []string{"spikehunt.cgroup.cpu.usage cpu=-1 device=system.slice mode=",
				"spikehunt.cgroup.cpu.usage cpu=-1 device=system.slice/b.service mode=",
				"spikehunt.cgroup.cpu.usage cpu=-1 device=system.slice/a.service mode="},
			exact: true,
		},
		{
			name: "a cgroup's CPU limit changing is no suspect",
			series: during(slowReads(append(quietHost(),
				counterSeries{metric: "spikehunt.cgroup.cpu.limit", cpu: -1, device: "shop/checkout-7d9"})), func(c counterSeries) bool {
				return c.metric == "spikehunt.cgroup.cpu.limit"
			}, 1_000),
			want:  []string{sdaReadLatency},
			exact: true,
		},
		{
			// Case (g) of the cause lab, at the agent's 1 s cadence: while
			// the app's lock is held, the hypervisor steals 15 % of CPU 1
			// (flat at zero before) and softirq time there rises by as
			// much (2 % before). Far outside their noise, and neither can
			// stall a request for a second.
			name: "time shares that rose by less than a quarter are no suspects",
			series: during(during(quietHost(), func(c counterSeries) bool {
				return c.metric == "system.cpu.time" && c.mode == "steal" && c.cpu == 1
			}, 0.15), func(c counterSeries) bool {
				return c.metric == "system.cpu.time" && c.mode == "softirq" && c.cpu == 1
			}, 0.15),
			every: 1,
			want:  nil,
			exact: true,
		},
		{
			// Case (g) again: after the lock is let go, the requests that
			// waited arrive at once, and the loopback's packets rise by
			// 60 %, far outside their noise. The load, not a cause.
			name: "a count that did not double is no suspect",
			series: during(quietHost(), func(c counterSeries) bool {
				return c.metric == "system.network.packet.count" && c.device == "lo" && c.mode == "receive"
			}, 300),
			every: 1,
			want:  nil,
			exact: true,
		},
		{
			// The same cadence, and softirq time taking 60 % of CPU 1.
			name: "a time share that rose by more than a quarter is a suspect",
			series: during(quietHost(), func(c counterSeries) bool {
				return c.metric == "system.cpu.time" && c.mode == "softirq" && c.cpu == 1
			}, 0.6),
			every: 1,
			want:  []string{"system.cpu.time cpu=1 device= mode=softirq"},
			exact: true,
		},
		{
			name:   "a spike where no counter moved has no suspects",
			series: quietHost(),
			want:   nil,
			exact:  true,
		},
	}
	ctx := context.Background()
	st := migrated(t)
	// One fleet, one host per case; the rest of the fleet is quiet.
	fleetLoad{hosts: max(20, len(tests)+4), seconds: 2400, stall: fmt.Sprintf("h < %d AND s = %d", len(tests), stallAt)}.insert(t, st)
	for i, tt := range tests {
		every := tt.every
		if every == 0 {
			every = 10
		}
		insertCountersEvery(t, st, host(i), 2400, every, tt.series)
	}
	res, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(2400)})
	if err != nil {
		t.Fatal(err)
	}
	byHost := map[string]SpikeWindow{}
	for _, w := range res.Spikes {
		byHost[w.Host] = w
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, ok := byHost[host(i)]
			if !ok {
				t.Fatalf("no spike window on %s: %+v", host(i), res.Spikes)
			}
			var got []string
			for k, s := range w.Suspects {
				if s.Rank != k+1 {
					t.Errorf("suspect %d has rank %d", k, s.Rank)
				}
				if k > 0 && s.Deviation > w.Suspects[k-1].Deviation {
					t.Errorf("rank %d deviates more (%g) than rank %d (%g)", s.Rank, s.Deviation, k, w.Suspects[k-1].Deviation)
				}
				if s.Deviation < DefaultMinDeviation || s.During <= s.Baseline {
					t.Errorf("suspect %s: deviation %g, during %g, baseline %g: want a rise past the bar", series(s), s.Deviation, s.During, s.Baseline)
				}
				got = append(got, series(s))
			}
			if !tt.exact && len(got) > len(tt.want) {
				got = got[:len(tt.want)]
			}
			for k := 0; tt.tie > 0 && k < len(got); k += tt.tie {
				slices.Sort(got[k:min(k+tt.tie, len(got))])
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("suspects (-want +got):\n%s\nall: %+v", diff, w.Suspects)
			}
		})
	}
	// The table holds what the pass returned.
	rows := queryRows(t, st, `SELECT count() FROM spike_suspects FINAL WHERE is_deleted = 0`)
	if want := fmt.Sprint(res.SuspectRows); rows[0][0] != want {
		t.Errorf("spike_suspects holds %s live rows, the pass wrote %s", rows[0][0], want)
	}
}

func TestPreferLeaves(t *testing.T) {
	row := func(id, metric, device string, base, during float64) suspectRow {
		return suspectRow{spikeID: id, Suspect: Suspect{Metric: metric, Device: device, Baseline: base, During: during}}
	}
	const usage = "spikehunt.cgroup.cpu.usage"
	rows := []suspectRow{
		row("w1", usage, "kubepods/burstable/pod1", 0.1, 1.1),
		row("w1", usage, "kubepods/burstable/pod1/c1", 0.1, 1.0),
		row("w1", "system.cpu.time", "", 0.1, 0.5),
		// Another window: the same paths, but the child explains too
		// little, and a sibling's prefix is no descendant.
		row("w2", usage, "kubepods/burstable/pod1", 0.1, 1.1),
		row("w2", usage, "kubepods/burstable/pod10", 0.1, 1.0),
		row("w2", usage, "kubepods/burstable/pod1/c1", 0.1, 0.4),
		// Another metric's child does not stand in.
		row("w3", "spikehunt.cgroup.cpu.throttled_time", "a", 0, 0.5),
		row("w3", usage, "a/b", 0, 0.5),
	}
	got := preferLeaves(slices.Clone(rows), 2)
	var names []string
	for _, r := range got {
		names = append(names, fmt.Sprintf("%s %d %s", r.spikeID, r.Rank, r.Device))
	}
	want := []string{
		"w1 1 kubepods/burstable/pod1/c1", "w1 2 ",
		"w2 1 kubepods/burstable/pod1", "w2 2 kubepods/burstable/pod10",
		"w3 1 a", "w3 2 a/b",
	}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("preferLeaves (-want +got):\n%s", diff)
	}
}

func TestMemoryPressureAndSlowDisksGoBeforeIOPressure(t *testing.T) {
	row := func(id, device, mode string, during float64) suspectRow {
		return suspectRow{spikeID: id, Suspect: Suspect{Metric: pressureMetric, Device: device, Mode: mode, During: during}}
	}
	// The cause lab's (c): reclaim waiting on writeback, 47 % some io
	// and 41 % some memory; full io 36 %, full memory 33 %.
	reclaim := []suspectRow{
		row("w1", "io", "some", 0.46), row("w1", "memory", "some", 0.41),
		row("w1", "io", "full", 0.36), row("w1", "memory", "full", 0.33),
		{spikeID: "w1", Suspect: Suspect{Metric: "system.cpu.time", Mode: "iowait", During: 0.39}},
		// A disk stall: memory pressure rose, but by far less than IO's.
		row("w2", "io", "some", 0.8), row("w2", "memory", "some", 0.1),
		// The cause lab's (f): writes to loop1 took 0.96 s each, and PSI
		// io read 100 %.
		row("w3", "io", "some", 1.0),
		{spikeID: "w3", Suspect: Suspect{Metric: diskLatencyMetric, Device: "loop1", Mode: "write", During: 0.96}},
		row("w3", "io", "full", 0.77),
	}
	var got []string
	for _, r := range preferLeaves(slices.Clone(reclaim), 10) {
		got = append(got, fmt.Sprintf("%s %d %s %s", r.spikeID, r.Rank, r.Device, r.Mode))
	}
	want := []string{
		"w1 1 memory some", "w1 2 io some", "w1 3 memory full", "w1 4 io full", "w1 5  iowait",
		"w2 1 io some", "w2 2 memory some",
		"w3 1 loop1 write", "w3 2 io some", "w3 3 io full",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ranks (-want +got):\n%s", diff)
	}
}
