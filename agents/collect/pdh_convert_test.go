package collect

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

func TestConvertPDH(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		reading     pdhReading
		interval    time.Duration
		groupBase   []int
		want        []telemetry.Point
		wantSkipped int
	}{
		{
			name: "the DPC flood: a CPU pinned by DPCs over a 2 s interval, totals skipped",
			reading: pdhReading{
				dpcTimePct:       map[string]float64{"0,0": 95, "0,1": 1, "_Total": 48, "0,_Total": 48},
				interruptTimePct: map[string]float64{"0,0": 4, "0,1": 0.5},
				dpcsQueued:       map[string]float64{"0,0": 16323, "0,1": 10},
				interrupts:       map[string]float64{"0,0": 20000, "0,1": 300, "_Total": 20300},
			},
			interval: 2 * time.Second,
			want: []telemetry.Point{
				pt("system.cpu.time", "s", 0.08, cpuAttr(0), telemetry.Str("cpu.mode", "interrupt")),
				pt("system.cpu.time", "s", 1.9, cpuAttr(0), telemetry.Str("cpu.mode", "dpc")),
				pt("spikehunt.interrupts", "{interrupt}", 40000, cpuAttr(0)),
				pt("spikehunt.dpcs", "{dpc}", 32646, cpuAttr(0)),
				pt("system.cpu.time", "s", 0.01, cpuAttr(1), telemetry.Str("cpu.mode", "interrupt")),
				pt("system.cpu.time", "s", 0.02, cpuAttr(1), telemetry.Str("cpu.mode", "dpc")),
				pt("spikehunt.interrupts", "{interrupt}", 600, cpuAttr(1)),
				pt("spikehunt.dpcs", "{dpc}", 20, cpuAttr(1)),
			},
		},
		{
			name: "processor groups of uneven width number CPUs across groups",
			reading: pdhReading{
				dpcTimePct: map[string]float64{"1,2": 50, "0,39": 10},
			},
			interval:  time.Second,
			groupBase: []int{0, 40},
			want: []telemetry.Point{
				pt("system.cpu.time", "s", 0.1, cpuAttr(39), telemetry.Str("cpu.mode", "dpc")),
				pt("system.cpu.time", "s", 0.5, cpuAttr(42), telemetry.Str("cpu.mode", "dpc")),
			},
		},
		{
			name: "shares outside 0–100 from PDH rounding are clamped and a negative rate is zero",
			reading: pdhReading{
				dpcTimePct: map[string]float64{"0": 100.4},
				interrupts: map[string]float64{"0": -3},
			},
			interval: time.Second,
			want: []telemetry.Point{
				pt("system.cpu.time", "s", 1, cpuAttr(0), telemetry.Str("cpu.mode", "dpc")),
				pt("spikehunt.interrupts", "{interrupt}", 0, cpuAttr(0)),
			},
		},
		{
			name:        "an instance in an unknown group or with a bad name is skipped and counted",
			reading:     pdhReading{dpcTimePct: map[string]float64{"3,1": 10, "cpu0": 5, "0,_Total": 7}},
			interval:    time.Second,
			groupBase:   []int{0},
			wantSkipped: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			end := start.Add(tt.interval)
			for i := range tt.want {
				tt.want[i].Start, tt.want[i].End = start, end
			}
			got, skipped := convertPDH(tt.reading, start, end, tt.groupBase)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(1e-12, 0), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("convertPDH (-want +got):\n%s", diff)
			}
			if skipped != tt.wantSkipped {
				t.Errorf("skipped = %d, want %d", skipped, tt.wantSkipped)
			}
		})
	}
}

func TestConvertPDHOverAnEmptyIntervalEmitsNothing(t *testing.T) {
	now := time.Now()
	if got, _ := convertPDH(pdhReading{dpcTimePct: map[string]float64{"0,0": 50}}, now, now, nil); len(got) != 0 {
		t.Errorf("got %d points over a zero interval, want none", len(got))
	}
}

func pt(metric, unit string, v float64, attrs ...telemetry.Attr) telemetry.Point {
	return telemetry.Point{Metric: metric, Unit: unit, Value: v, Attrs: attrs}
}
