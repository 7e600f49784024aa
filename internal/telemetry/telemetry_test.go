package telemetry

import (
	"testing"
	"time"
)

func TestUntilTick(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		now  time.Time
		d    time.Duration
		want time.Duration
	}{
		{"just after a tick, a whole period", base, 200 * time.Millisecond, 200 * time.Millisecond},
		{"between ticks, the rest of the period", base.Add(150 * time.Millisecond), 200 * time.Millisecond, 50 * time.Millisecond},
		{"a second's grid is the whole seconds", base.Add(999 * time.Millisecond), time.Second, time.Millisecond},
		{"a ten-second grid", base.Add(2 * time.Second), 10 * time.Second, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := UntilTick(tt.now, tt.d); got != tt.want {
				t.Errorf("UntilTick(%v, %v) = %v, want %v", tt.now, tt.d, got, tt.want)
			}
		})
	}
}

// time.Now carries a monotonic reading; the grid is the wall clock's.
func TestUntilTickIgnoresTheMonotonicReading(t *testing.T) {
	now := time.Now()
	if got, want := UntilTick(now, time.Second), UntilTick(now.Round(0), time.Second); got != want {
		t.Errorf("UntilTick(time.Now()) = %v, %v without the monotonic reading", got, want)
	}
}
