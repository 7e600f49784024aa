package capture

import (
	"fmt"
	"time"
)

// Trigger fires a capture from the agent's own latency stream: a single
// request slower than Latency, or a second whose p99 is over P99, among
// the requests of Service (and Endpoint, when set).
type Trigger struct {
	Service  string
	Endpoint string
	Latency  time.Duration // 0: off
	P99      time.Duration // 0: off
	// Cooldown is the quiet time after a fire before the trigger may
	// fire again.
	Cooldown time.Duration
}

// Enabled reports whether the trigger watches the stream at all.
func (t Trigger) Enabled() bool { return t.Latency > 0 || t.P99 > 0 }

// Validate checks the bounds.
func (t Trigger) Validate() error {
	if t.Latency < 0 || t.P99 < 0 || t.Cooldown < 0 {
		return fmt.Errorf("%w: trigger thresholds and cooldown must not be negative", ErrInvalid)
	}
	if t.Enabled() && t.Service == "" {
		return fmt.Errorf("%w: a latency trigger needs a service", ErrInvalid)
	}
	return nil
}
