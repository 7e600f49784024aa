package collect

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

var approx = cmpopts.EquateApprox(0, 1e-9)

// samplePair stages snapshot 0 of a fixture, samples (the baseline), stages
// snapshot 1 one second later and returns the second pass's points.
func samplePair(t *testing.T, fixture string, slow bool, samplers ...string) []telemetry.Point {
	t.Helper()
	root := t.TempDir()
	clock := newFakeClock()
	stage(t, root, fixture, 0)
	c := newFixtureCollector(t, root, clock, samplers...)
	pass := c.Sample
	if slow {
		pass = c.SampleSlow
	}
	for _, p := range pass() {
		if !p.Start.Equal(p.End) {
			t.Fatalf("baseline pass emitted a delta: %s", seriesKey(p))
		}
	}
	clock.Advance(time.Second)
	stage(t, root, fixture, 1)
	return pass()
}

// The DPC flood (docs/field-stories.md) on Linux: NET_RX softirq work pins CPUs 0, 2, 4 and 6 of 24.
func TestNetRXStormShowsSoftirqTimeOnFourCPUs(t *testing.T) {
	pts := samplePair(t, "netrx-storm", false, "stat", "softirqs")

	wantSoftirqTime := map[string]float64{}
	wantNetRX := map[string]float64{}
	for cpu := range 24 {
		secs, netrx := 0.0, 20.0
		if cpu == 0 || cpu == 2 || cpu == 4 || cpu == 6 {
			secs, netrx = 1, 160000
		}
		wantSoftirqTime[fmt.Sprintf("system.cpu.time{cpu.logical_number=%d,cpu.mode=softirq}", cpu)] = secs
		wantNetRX[fmt.Sprintf("spikehunt.softirqs{cpu.logical_number=%d,spikehunt.softirq.vector=NET_RX}", cpu)] = netrx
	}
	gotSoftirqTime := map[string]float64{}
	for k, v := range rates(t, pts, "system.cpu.time") {
		if _, ok := wantSoftirqTime[k]; ok {
			gotSoftirqTime[k] = v
		}
	}
	if diff := cmp.Diff(wantSoftirqTime, gotSoftirqTime, approx); diff != "" {
		t.Errorf("softirq seconds per second (-want +got):\n%s", diff)
	}
	gotNetRX := map[string]float64{}
	for k, v := range rates(t, pts, "spikehunt.softirqs") {
		if _, ok := wantNetRX[k]; ok {
			gotNetRX[k] = v
		}
	}
	if diff := cmp.Diff(wantNetRX, gotNetRX, approx); diff != "" {
		t.Errorf("NET_RX per second (-want +got):\n%s", diff)
	}
	idle := rates(t, pts, "system.cpu.time")["system.cpu.time{cpu.logical_number=1,cpu.mode=idle}"]
	if idle < 0.96 || idle > 0.98 {
		t.Errorf("CPU 1 idle = %v s/s, want 0.97", idle)
	}
	if got := values(pts, "spikehunt.context_switches")["spikehunt.context_switches{}"]; got != 48000 {
		t.Errorf("context switches = %v, want 48000", got)
	}
}

// The same storm in /proc/interrupts: each NIC queue's IRQ lands on one
// hot CPU, with its device name; unmoved IRQ × CPU series are left out.
func TestNetRXStormShowsQueueInterruptsByDevice(t *testing.T) {
	pts := samplePair(t, "netrx-storm", true, "interrupts")
	got := rates(t, pts, "spikehunt.interrupts")
	want := map[string]float64{
		"spikehunt.interrupts{cpu.logical_number=0,spikehunt.irq=64,spikehunt.irq.device=eth0-TxRx-0}": 40000,
		"spikehunt.interrupts{cpu.logical_number=2,spikehunt.irq=65,spikehunt.irq.device=eth0-TxRx-1}": 40000,
		"spikehunt.interrupts{cpu.logical_number=4,spikehunt.irq=66,spikehunt.irq.device=eth0-TxRx-2}": 40000,
		"spikehunt.interrupts{cpu.logical_number=6,spikehunt.irq=67,spikehunt.irq.device=eth0-TxRx-3}": 40000,
		"spikehunt.interrupts{spikehunt.irq=MIS,spikehunt.irq.device=}":                                2,
	}
	for cpu := range 24 {
		want[fmt.Sprintf("spikehunt.interrupts{cpu.logical_number=%d,spikehunt.irq=LOC,spikehunt.irq.device=Local timer interrupts}", cpu)] = 250
		res := 30.0
		if cpu == 0 || cpu == 2 || cpu == 4 || cpu == 6 {
			res = 900
		}
		want[fmt.Sprintf("spikehunt.interrupts{cpu.logical_number=%d,spikehunt.irq=RES,spikehunt.irq.device=Rescheduling interrupts}", cpu)] = res
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("interrupts per second (-want +got):\n%s", diff)
	}
}

// The down interface (docs/field-stories.md): an interface that is down still receives 8,000 packets/s.
func TestDownInterfaceReceivingPacketsIsVisible(t *testing.T) {
	pts := samplePair(t, "down-interface", false, "netdev")
	got := map[string]float64{}
	for _, m := range []string{"system.network.packet.count", "system.network.io", "system.network.packet.dropped"} {
		for k, v := range rates(t, pts, m) {
			got[k] = v
		}
	}
	want := map[string]float64{
		"system.network.packet.count{network.interface.name=qfe0,network.io.direction=receive,spikehunt.network.operstate=down}":     8000,
		"system.network.packet.count{network.interface.name=qfe0,network.io.direction=transmit,spikehunt.network.operstate=down}":    0,
		"system.network.io{network.interface.name=qfe0,network.io.direction=receive,spikehunt.network.operstate=down}":               9888000,
		"system.network.io{network.interface.name=qfe0,network.io.direction=transmit,spikehunt.network.operstate=down}":              0,
		"system.network.packet.dropped{network.interface.name=qfe0,network.io.direction=receive,spikehunt.network.operstate=down}":   3,
		"system.network.packet.dropped{network.interface.name=qfe0,network.io.direction=transmit,spikehunt.network.operstate=down}":  0,
		"system.network.packet.count{network.interface.name=hme0,network.io.direction=receive,spikehunt.network.operstate=up}":       8601,
		"system.network.packet.count{network.interface.name=hme0,network.io.direction=transmit,spikehunt.network.operstate=up}":      15524,
		"system.network.io{network.interface.name=hme0,network.io.direction=receive,spikehunt.network.operstate=up}":                 10451400,
		"system.network.io{network.interface.name=hme0,network.io.direction=transmit,spikehunt.network.operstate=up}":                818600,
		"system.network.packet.dropped{network.interface.name=hme0,network.io.direction=receive,spikehunt.network.operstate=up}":     0,
		"system.network.packet.dropped{network.interface.name=hme0,network.io.direction=transmit,spikehunt.network.operstate=up}":    0,
		"system.network.packet.count{network.interface.name=lo,network.io.direction=receive,spikehunt.network.operstate=unknown}":    0,
		"system.network.packet.count{network.interface.name=lo,network.io.direction=transmit,spikehunt.network.operstate=unknown}":   0,
		"system.network.io{network.interface.name=lo,network.io.direction=receive,spikehunt.network.operstate=unknown}":              0,
		"system.network.io{network.interface.name=lo,network.io.direction=transmit,spikehunt.network.operstate=unknown}":             0,
		"system.network.packet.dropped{network.interface.name=lo,network.io.direction=receive,spikehunt.network.operstate=unknown}":  0,
		"system.network.packet.dropped{network.interface.name=lo,network.io.direction=transmit,spikehunt.network.operstate=unknown}": 0,
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("per second (-want +got):\n%s", diff)
	}
}

// The pause-frames story (docs/field-stories.md): pause frames rise on a NIC, with drops in sysfs and the
// driver's own counters.
func TestPauseFramesRisingAreReported(t *testing.T) {
	pts := samplePair(t, "pause-frames", false, "ethtool")
	wantPause := map[string]float64{
		"spikehunt.network.pause_frames{network.interface.name=eth0,network.io.direction=receive,spikehunt.counter=rx_pause_ctrl_phy}":  5000,
		"spikehunt.network.pause_frames{network.interface.name=eth0,network.io.direction=transmit,spikehunt.counter=tx_pause_ctrl_phy}": 0,
		"spikehunt.network.pause_frames{network.interface.name=eth0,network.io.direction=receive,spikehunt.counter=rx_prio3_pause}":     5000,
	}
	if diff := cmp.Diff(wantPause, rates(t, pts, "spikehunt.network.pause_frames"), approx); diff != "" {
		t.Errorf("pause frames per second (-want +got):\n%s", diff)
	}
	wantDrops := map[string]float64{
		"spikehunt.network.driver_drops{network.interface.name=eth0,spikehunt.counter=rx_missed_errors}":  1200,
		"spikehunt.network.driver_drops{network.interface.name=eth0,spikehunt.counter=rx_fifo_errors}":    0,
		"spikehunt.network.driver_drops{network.interface.name=eth0,spikehunt.counter=rx_over_errors}":    0,
		"spikehunt.network.driver_drops{network.interface.name=eth0,spikehunt.counter=rx_crc_errors}":     0,
		"spikehunt.network.driver_drops{network.interface.name=eth0,spikehunt.counter=rx_frame_errors}":   0,
		"spikehunt.network.driver_drops{network.interface.name=eth0,spikehunt.counter=rx_length_errors}":  0,
		"spikehunt.network.driver_drops{network.interface.name=eth0,spikehunt.counter=rx_nohandler}":      0,
		"spikehunt.network.driver_drops{network.interface.name=eth0,spikehunt.counter=tx_fifo_errors}":    0,
		"spikehunt.network.driver_drops{network.interface.name=eth0,spikehunt.counter=tx_aborted_errors}": 0,
		"spikehunt.network.driver_drops{network.interface.name=eth0,spikehunt.counter=tx_carrier_errors}": 0,
		"spikehunt.network.driver_drops{network.interface.name=eth0,spikehunt.counter=rx_discards_phy}":   1200,
		"spikehunt.network.driver_drops{network.interface.name=eth0,spikehunt.counter=rx_out_of_buffer}":  300,
		"spikehunt.network.driver_drops{network.interface.name=eth0,spikehunt.counter=tx_queue_dropped}":  0,
	}
	if diff := cmp.Diff(wantDrops, rates(t, pts, "spikehunt.network.driver_drops"), approx); diff != "" {
		t.Errorf("driver drops per second (-want +got):\n%s", diff)
	}
}

// The IO stall above the disk (docs/field-stories.md): a disk's write time jumps by 15 s over ten writes.
func TestDiskOperationTimeJumpIsReported(t *testing.T) {
	pts := samplePair(t, "disk-latency", false, "diskstats")
	got := map[string]float64{}
	for _, m := range []string{"system.disk.operations", "system.disk.operation_time", "system.disk.io_time"} {
		for k, v := range rates(t, pts, m) {
			got[k] = v
		}
	}
	want := map[string]float64{
		"system.disk.operations{system.device=nvme0n1,disk.io.direction=read}":        10,
		"system.disk.operations{system.device=nvme0n1,disk.io.direction=write}":       10,
		"system.disk.operation_time{system.device=nvme0n1,disk.io.direction=read}":    0.004,
		"system.disk.operation_time{system.device=nvme0n1,disk.io.direction=write}":   15,
		"system.disk.io_time{system.device=nvme0n1}":                                  1,
		"system.disk.operations{system.device=nvme0n1p1,disk.io.direction=read}":      10,
		"system.disk.operations{system.device=nvme0n1p1,disk.io.direction=write}":     10,
		"system.disk.operation_time{system.device=nvme0n1p1,disk.io.direction=read}":  0.004,
		"system.disk.operation_time{system.device=nvme0n1p1,disk.io.direction=write}": 15,
		"system.disk.io_time{system.device=nvme0n1p1}":                                1,
		"system.disk.operations{system.device=sda,disk.io.direction=read}":            50,
		"system.disk.operations{system.device=sda,disk.io.direction=write}":           80,
		"system.disk.operation_time{system.device=sda,disk.io.direction=read}":        0.04,
		"system.disk.operation_time{system.device=sda,disk.io.direction=write}":       0.07,
		"system.disk.io_time{system.device=sda}":                                      0.095,
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(1e-9, 0)); diff != "" {
		t.Errorf("per second (-want +got):\n%s", diff)
	}
	inFlight := map[string]float64{}
	for _, p := range pts {
		if p.Metric == "spikehunt.disk.in_flight" {
			if !p.Start.Equal(p.End) {
				t.Errorf("%s: Start %v != End %v; a level must be a gauge", seriesKey(p), p.Start, p.End)
			}
			inFlight[seriesKey(p)] = p.Value
		}
	}
	wantInFlight := map[string]float64{
		"spikehunt.disk.in_flight{system.device=nvme0n1}":   32,
		"spikehunt.disk.in_flight{system.device=nvme0n1p1}": 32,
		"spikehunt.disk.in_flight{system.device=sda}":       0,
	}
	if diff := cmp.Diff(wantInFlight, inFlight); diff != "" {
		t.Errorf("in flight (-want +got):\n%s", diff)
	}
}

func TestSchedstatRunDelayOnOneCPU(t *testing.T) {
	pts := samplePair(t, "schedstat", false, "schedstat")
	want := map[string]float64{
		"spikehunt.cpu.run_delay{cpu.logical_number=0}": 0.002,
		"spikehunt.cpu.run_delay{cpu.logical_number=1}": 0.002,
		"spikehunt.cpu.run_delay{cpu.logical_number=2}": 0.4,
		"spikehunt.cpu.run_delay{cpu.logical_number=3}": 0.002,
	}
	if diff := cmp.Diff(want, rates(t, pts, "spikehunt.cpu.run_delay"), cmpopts.EquateApprox(1e-9, 0)); diff != "" {
		t.Errorf("run delay s/s (-want +got):\n%s", diff)
	}
	if got := rates(t, pts, "spikehunt.cpu.timeslices")["spikehunt.cpu.timeslices{cpu.logical_number=2}"]; got != 900 {
		t.Errorf("CPU 2 timeslices/s = %v, want 900", got)
	}
}
