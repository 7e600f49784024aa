package collect

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// netDevFile renders /proc/net/dev with one interface, eth0, whose rx
// packet counter is rx.
func netDevFile(rx uint64) string {
	return netDevHeader + fmt.Sprintf("  eth0: 0 %d 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n", rx)
}

func only1(t *testing.T, pts []telemetry.Point, metric, series string) (telemetry.Point, bool) {
	t.Helper()
	for _, p := range pts {
		if p.Metric == metric && seriesKey(p) == series {
			return p, true
		}
	}
	return telemetry.Point{}, false
}

const eth0RxPackets = "system.network.packet.count{network.interface.name=eth0,network.io.direction=receive}"

// The down interface (docs/field-stories.md): under load a 1 s tick arrived 2.5 s after the previous one.
// The point covers the 2.5 s really measured, and Value / interval is the
// true rate, 8,000/s, not 20,000/s.
func TestLateTickYieldsDeltaOverTheTrueInterval(t *testing.T) {
	root := t.TempDir()
	clock := newFakeClock()
	writeFile(t, root, "proc/net/dev", netDevFile(1000))
	c := newFixtureCollector(t, root, clock, "netdev")
	c.Sample()

	clock.Advance(time.Second)
	writeFile(t, root, "proc/net/dev", netDevFile(9000))
	onTime, ok := only1(t, c.Sample(), "system.network.packet.count", eth0RxPackets)
	if !ok {
		t.Fatal("no point for the on-time tick")
	}

	clock.Advance(2500 * time.Millisecond)
	writeFile(t, root, "proc/net/dev", netDevFile(9000+8000*2.5))
	late, ok := only1(t, c.Sample(), "system.network.packet.count", eth0RxPackets)
	if !ok {
		t.Fatal("no point for the late tick")
	}
	type interval struct {
		Duration time.Duration
		Value    float64
		Rate     float64
	}
	got := interval{late.End.Sub(late.Start), late.Value, late.Value / late.End.Sub(late.Start).Seconds()}
	if diff := cmp.Diff(interval{2500 * time.Millisecond, 20000, 8000}, got); diff != "" {
		t.Errorf("late tick (-want +got):\n%s", diff)
	}
	if !late.Start.Equal(onTime.End) {
		t.Errorf("late point starts at %v, want the previous point's end %v: intervals must be contiguous", late.Start, onTime.End)
	}
}

// Wall times come from one anchor plus monotonic offsets: the first
// point's Start is the anchor's wall time plus the time until the baseline.
func TestPointTimesAreAnchoredWallTimes(t *testing.T) {
	root := t.TempDir()
	clock := newFakeClock()
	anchor := clock.Now()
	writeFile(t, root, "proc/net/dev", netDevFile(0))
	c := newFixtureCollector(t, root, clock, "netdev")
	clock.Advance(300 * time.Millisecond)
	c.Sample()
	clock.Advance(time.Second)
	writeFile(t, root, "proc/net/dev", netDevFile(5))
	p, ok := only1(t, c.Sample(), "system.network.packet.count", eth0RxPackets)
	if !ok {
		t.Fatal("no point")
	}
	if want := anchor.Add(300 * time.Millisecond); !p.Start.Equal(want) {
		t.Errorf("Start = %v, want %v", p.Start, want)
	}
	if want := anchor.Add(1300 * time.Millisecond); !p.End.Equal(want) {
		t.Errorf("End = %v, want %v", p.End, want)
	}
}

func TestCounterResetEmitsNothingOnceThenResumes(t *testing.T) {
	root := t.TempDir()
	clock := newFakeClock()
	writeFile(t, root, "proc/net/dev", netDevFile(5000))
	c := newFixtureCollector(t, root, clock, "netdev")
	c.Sample()
	type tick struct {
		Emitted bool
		Value   float64
	}
	var ticks []tick
	for _, rx := range []uint64{6000, 100, 400} { // the driver reloads after the first tick
		clock.Advance(time.Second)
		writeFile(t, root, "proc/net/dev", netDevFile(rx))
		pts := c.Sample()
		for _, p := range pts {
			if p.Value < 0 {
				t.Fatalf("negative delta %v for %s", p.Value, seriesKey(p))
			}
		}
		p, ok := only1(t, pts, "system.network.packet.count", eth0RxPackets)
		ticks = append(ticks, tick{ok, p.Value})
	}
	if diff := cmp.Diff([]tick{{true, 1000}, {false, 0}, {true, 300}}, ticks); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(c.metrics.resets.WithLabelValues("netdev")); got != 1 {
		t.Errorf("spikehunt_collect_counter_resets_total{sampler=netdev} = %v, want 1", got)
	}
}

// statFile renders /proc/stat with the given online CPUs, each with
// user = ticks and the other modes 0.
func statFile(ticks uint64, cpus ...int) string {
	var b strings.Builder
	b.WriteString("cpu  0 0 0 0 0 0 0 0 0 0\n")
	for _, c := range cpus {
		fmt.Fprintf(&b, "cpu%d %d 0 0 0 0 0 0 0 0 0\n", c, ticks)
	}
	b.WriteString("ctxt 1\n")
	return b.String()
}

// A CPU that goes offline is dropped; when it comes back it starts a new
// series with a baseline, never a delta against its old value.
func TestCPUHotplugStartsAndDropsSeries(t *testing.T) {
	root := t.TempDir()
	clock := newFakeClock()
	writeFile(t, root, "proc/stat", statFile(100, 0, 1, 2, 3))
	c := newFixtureCollector(t, root, clock, "stat")
	c.Sample()

	userCPUs := func(pts []telemetry.Point) map[int64]float64 {
		out := map[int64]float64{}
		for _, p := range pts {
			if p.Metric == "system.cpu.time" && p.Attrs[1].Value == "user" {
				out[p.Attrs[0].Value.(int64)] = p.Value
			}
		}
		return out
	}
	steps := []struct {
		name  string
		ticks uint64
		cpus  []int
		want  map[int64]float64
	}{
		{"CPU 2 goes offline", 200, []int{0, 1, 3}, map[int64]float64{0: 1, 1: 1, 3: 1}},
		{"CPU 2 comes back: a baseline, not a delta", 300, []int{0, 1, 2, 3}, map[int64]float64{0: 1, 1: 1, 3: 1}},
		{"CPU 2 reports again", 400, []int{0, 1, 2, 3}, map[int64]float64{0: 1, 1: 1, 2: 1, 3: 1}},
		{"CPU 7 is hot-added", 500, []int{0, 1, 2, 3, 7}, map[int64]float64{0: 1, 1: 1, 2: 1, 3: 1}},
	}
	for _, st := range steps {
		clock.Advance(time.Second)
		writeFile(t, root, "proc/stat", statFile(st.ticks, st.cpus...))
		if diff := cmp.Diff(st.want, userCPUs(c.Sample())); diff != "" {
			t.Errorf("%s: user seconds by CPU (-want +got):\n%s", st.name, diff)
		}
	}
}
