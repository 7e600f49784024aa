package capture

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// MonotonicClock measures the wall clock's offset from CLOCK_MONOTONIC, taking
// the closest of a few paired readings: the Result.Clock of a recorder
// whose tool stamps with CLOCK_MONOTONIC.
func MonotonicClock() record.Clock {
	best := time.Duration(1<<63 - 1)
	var off time.Duration
	for range 5 {
		var a, b unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		w := time.Now()
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		span := time.Duration(b.Nano() - a.Nano())
		if span < best {
			best = span
			off = time.Duration(w.UnixNano() - (a.Nano()+b.Nano())/2)
		}
	}
	return record.Clock{Name: "CLOCK_MONOTONIC", Offset: off}
}
