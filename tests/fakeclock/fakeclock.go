// Package fakeclock is the one fake clock of the module's tests: a clock
// that moves only when the test moves it (or by a fixed step at every
// reading), safe for concurrent use. Test files import it; no package of
// the product does.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a settable clock. Its times carry no monotonic reading, so
// intervals between them are plain wall-clock differences, which is what
// a test that moves the clock by hand wants.
type Clock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

// New returns a clock standing at t.
func New(t time.Time) *Clock { return &Clock{t: t.Round(0)} }

// NewStepping returns a clock that moves by step before every reading:
// the first Now returns start + step. It stands in for a receive clock
// that must never return the same instant twice.
func NewStepping(start time.Time, step time.Duration) *Clock {
	return &Clock{t: start.Round(0), step: step}
}

// Now is the clock's time (after moving it by its step, if any).
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t.Round(0)
}
