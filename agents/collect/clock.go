package collect

import "time"

// Clock tells the time. Now must return a time that carries a monotonic
// clock reading, as time.Now does: intervals are measured on it, so a wall
// clock step (NTP, an operator's date -s) never stretches or shrinks them.
// Tests pass a fake whose times have no monotonic reading; Sub then falls
// back to wall-clock arithmetic, which is what a fake wants.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// timeline maps readings of the monotonic clock to wall time through one
// anchor taken when the Collector is built: wall(t) = anchorWall + (t −
// anchor). Every Point's Start and End come from it, so End − Start is
// always the monotonic interval between two readings, even if the wall
// clock jumps while the agent runs. The cost is that a wall step after
// startup is not followed: timestamps stay on the startup time scale.
type timeline struct {
	clock      Clock
	anchor     time.Time // as returned by clock.Now, monotonic reading included
	anchorWall time.Time // the same instant with the monotonic reading stripped
}

func newTimeline(c Clock) *timeline {
	t := c.Now()
	return &timeline{clock: c, anchor: t, anchorWall: t.Round(0)}
}

func (tl *timeline) now() time.Time { return tl.clock.Now() }

func (tl *timeline) wall(t time.Time) time.Time { return tl.anchorWall.Add(t.Sub(tl.anchor)) }

// readings remembers when a sampler last read its source successfully.
type readings struct {
	prev time.Time
	have bool
}

// advance records a successful reading taken at now (a Clock reading) and
// returns the wall-clock bounds of the interval since the previous one. ok
// is false on the first reading (it is the baseline) and when the clock did
// not move forward: a zero-length interval would turn a delta into a gauge
// downstream, and a rate over it is meaningless.
func (r *readings) advance(tl *timeline, now time.Time) (start, end time.Time, ok bool) {
	prev, had := r.prev, r.have
	r.prev, r.have = now, true
	if !had || !now.After(prev) {
		return time.Time{}, time.Time{}, false
	}
	return tl.wall(prev), tl.wall(now), true
}
