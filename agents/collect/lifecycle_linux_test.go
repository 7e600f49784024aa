package collect

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestFirstPassIsABaselineWithOnlyGauges(t *testing.T) {
	root := t.TempDir()
	stage(t, root, "real", -1)
	c := newFixtureCollector(t, root, newFakeClock(), Samplers()...)
	for _, p := range append(c.Sample(), c.SampleSlow()...) {
		if !p.Start.Equal(p.End) {
			t.Errorf("first pass emitted a delta: %s", seriesKey(p))
		}
	}
}

// The captured tree runs end to end; with the files unchanged every
// counter's delta is zero.
func TestRealFixtureTreeSamplesEveryAvailableSource(t *testing.T) {
	root := t.TempDir()
	stage(t, root, "real", -1)
	clock := newFakeClock()
	c := newFixtureCollector(t, root, clock, Samplers()...)
	c.Sample()
	c.SampleSlow()
	clock.Advance(time.Second)
	pts := c.Sample()
	seen := map[string]bool{}
	for _, p := range pts {
		seen[p.Metric] = true
		if !p.Start.Equal(p.End) && p.Value != 0 {
			t.Errorf("%s = %v over unchanged files, want 0", seriesKey(p), p.Value)
		}
	}
	for _, m := range []string{
		"system.cpu.time", "spikehunt.context_switches", "spikehunt.softirqs", "system.network.packet.count",
		"system.network.io", "system.network.errors", "system.network.packet.dropped", "spikehunt.network.driver_drops",
		"system.disk.operations", "system.disk.operation_time", "system.disk.io_time", "spikehunt.disk.in_flight",
		"spikehunt.pressure.stall_time", "spikehunt.memory.slab",
		"spikehunt.memory.reclaim.scanned", "spikehunt.memory.major_faults", "spikehunt.memory.dirty",
		"spikehunt.tcp.retransmits", "spikehunt.tcp.listen_overflows", "spikehunt.udp.rcvbuf_errors",
		"spikehunt.cgroup.cpu.usage", "spikehunt.cgroup.cpu.throttled_time", "spikehunt.cgroup.cpu.limit",
	} {
		if !seen[m] {
			t.Errorf("no %s point from the real fixture", m)
		}
	}
	if got := testutil.ToFloat64(c.metrics.notSupported.WithLabelValues("schedstat")); got != 1 {
		t.Errorf("schedstat not supported = %v, want 1 (the captured kernel lacks CONFIG_SCHEDSTATS)", got)
	}
}

func TestMissingPressureIsReportedNotSupportedOnce(t *testing.T) {
	root := t.TempDir()
	stage(t, root, "real", -1)
	if err := os.RemoveAll(filepath.Join(root, "proc", "pressure")); err != nil {
		t.Fatal(err)
	}
	var logs testenv.SyncBuffer
	clock := newFakeClock()
	c, err := New(Options{
		ProcFS: filepath.Join(root, "proc"), SysFS: filepath.Join(root, "sys"),
		Disabled: []string{"schedstat", "ethtool"}, Clock: clock,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var softirqPoints int
	for range 3 {
		for _, p := range c.Sample() {
			if p.Metric == "spikehunt.softirqs" {
				softirqPoints++
			}
		}
		clock.Advance(time.Second)
	}
	if n := strings.Count(logs.String(), "sampler=pressure"); n != 1 {
		t.Errorf("pressure logged %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "level=INFO msg=\"sampler not supported") {
		t.Errorf("want an Info line saying not supported, got:\n%s", logs.String())
	}
	if got := testutil.ToFloat64(c.metrics.notSupported.WithLabelValues("pressure")); got != 1 {
		t.Errorf("spikehunt_collect_not_supported{sampler=pressure} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(c.metrics.success.WithLabelValues("softirqs")); got != 1 {
		t.Errorf("softirqs success = %v, want 1: the rest keeps running", got)
	}
	if softirqPoints == 0 {
		t.Error("no softirq points: the rest must keep running")
	}
}

// A malformed file is an error for its sampler only: no panic, success 0,
// one log line, and recovery when the file is sane again.
func TestMalformedFileFailsOnlyItsSampler(t *testing.T) {
	root := t.TempDir()
	var logs testenv.SyncBuffer
	clock := newFakeClock()
	writeFile(t, root, "proc/net/dev", netDevFile(1))
	writeFile(t, root, "proc/meminfo", "Slab: 4 kB\n")
	c, err := New(Options{
		ProcFS: filepath.Join(root, "proc"), SysFS: filepath.Join(root, "sys"),
		Disabled: only("netdev", "meminfo"), Clock: clock,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Sample()
	writeFile(t, root, "proc/net/dev", netDevHeader+"  eth0: garbage\n")
	for range 3 {
		clock.Advance(time.Second)
		if pts := c.Sample(); len(values(pts, "spikehunt.memory.slab")) != 1 {
			t.Errorf("meminfo stopped when netdev failed: %v", pts)
		}
	}
	if got := testutil.ToFloat64(c.metrics.success.WithLabelValues("netdev")); got != 0 {
		t.Errorf("netdev success = %v, want 0", got)
	}
	if n := strings.Count(logs.String(), "sampler failed"); n != 1 {
		t.Errorf("failure logged %d times, want once:\n%s", n, logs.String())
	}
	writeFile(t, root, "proc/net/dev", netDevFile(4001))
	clock.Advance(time.Second)
	p, ok := only1(t, c.Sample(), "system.network.packet.count", eth0RxPackets)
	if !ok || p.Value != 4000 || p.End.Sub(p.Start) != 4*time.Second {
		t.Errorf("after recovery got %v (ok %v), want 4000 packets over the 4 s since the last good reading", p, ok)
	}
	if !strings.Contains(logs.String(), "sampler recovered") {
		t.Errorf("no recovery logged:\n%s", logs.String())
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"the zero value is valid", Options{}, ""},
		{"a sampler of another platform may be disabled", Options{Disabled: []string{"pdh"}}, ""},
		{"a relative procfs root", Options{ProcFS: "proc"}, `ProcFS "proc": must be an absolute path`},
		{"an unknown sampler", Options{Disabled: []string{"softirq"}}, `disabled sampler "softirq": unknown`},
		{"a disk regexp that does not compile", Options{DiskIgnore: "(["}, "DiskIgnore: error parsing regexp"},
		{"a relative cgroup root", Options{CgroupFS: "sys/fs/cgroup"}, `CgroupFS "sys/fs/cgroup": must be an absolute path`},
		{"no busiest cgroup at all", Options{CgroupTop: -1}, "CgroupTop -1: must be 1 to 1000"},
		{"more busiest cgroups than the bound", Options{CgroupTop: MaxCgroupTop + 1}, "CgroupTop 1001"},
		{"a walk limit beyond the bound", Options{CgroupScanLimit: MaxCgroupScanLimit + 1}, "CgroupScanLimit 20001: must be 1 to 20000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestDisabledSamplersDoNotRun(t *testing.T) {
	root := t.TempDir()
	stage(t, root, "real", -1)
	c, err := New(Options{ProcFS: filepath.Join(root, "proc"), SysFS: filepath.Join(root, "sys"),
		Disabled: []string{"meminfo", "interrupts"}, Logger: discardLogger(), ethtool: fixtureEthtool{filepath.Join(root, "ethtool")}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if pts := c.SampleSlow(); len(pts) != 0 {
		t.Errorf("SampleSlow with interrupts disabled returned %d points", len(pts))
	}
	if got := values(c.Sample(), "spikehunt.memory.slab"); len(got) != 0 {
		t.Errorf("meminfo disabled but emitted %v", got)
	}
	if _, err := New(Options{Disabled: knownSamplers}); err == nil {
		t.Error("New with every sampler disabled succeeded, want an error")
	}
}

func TestSamplersListsEveryLinuxSource(t *testing.T) {
	want := []string{"cgroup", "diskstats", "ethtool", "interrupts", "meminfo", "netdev", "netsnmp", "pressure", "schedstat", "softirqs", "stat", "vmstat"}
	if diff := cmp.Diff(want, Samplers()); diff != "" {
		t.Errorf("Samplers() (-want +got):\n%s", diff)
	}
}

func TestRegisterExposesSelfMetrics(t *testing.T) {
	root := t.TempDir()
	stage(t, root, "real", -1)
	c := newFixtureCollector(t, root, newFakeClock(), "meminfo", "schedstat")
	reg := prometheus.NewPedanticRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	c.Sample()
	want := `
# HELP spikehunt_collect_not_supported 1 if the sampler's source does not exist on this host's kernel.
# TYPE spikehunt_collect_not_supported gauge
spikehunt_collect_not_supported{sampler="meminfo"} 0
spikehunt_collect_not_supported{sampler="schedstat"} 1
# HELP spikehunt_collect_sampler_success 1 if the sampler's last reading succeeded, else 0 (not supported, or failed: see the agent log).
# TYPE spikehunt_collect_sampler_success gauge
spikehunt_collect_sampler_success{sampler="meminfo"} 1
spikehunt_collect_sampler_success{sampler="schedstat"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "spikehunt_collect_not_supported", "spikehunt_collect_sampler_success"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "spikehunt_collect_sampler_duration_seconds", "spikehunt_collect_counter_resets_total"); err != nil || n != 4 {
		t.Errorf("duration and resets series = %d (%v), want 4", n, err)
	}
}

func TestRunSamplesUntilCanceled(t *testing.T) {
	root := t.TempDir()
	stage(t, root, "real", -1)
	c := newFixtureCollector(t, root, systemClock{}, "meminfo", "interrupts")
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	batches := 0
	done := make(chan struct{})
	go func() {
		c.Run(ctx, 10*time.Millisecond, 25*time.Millisecond, func(pts []telemetry.Point) {
			mu.Lock()
			batches++
			mu.Unlock()
		})
		close(done)
	}()
	time.Sleep(120 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Run did not return after cancel")
	}
	mu.Lock()
	defer mu.Unlock()
	if batches < 5 {
		t.Errorf("Run emitted %d batches in 120 ms at 10 ms, want at least 5", batches)
	}
}
