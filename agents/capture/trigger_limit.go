package capture

import (
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// fireLimiter rate-limits the local trigger per sender: a token bucket
// per sender, kept as the time its bucket is full again (the generic cell
// rate algorithm). Only a fire that happened makes an entry, and an entry
// whose bucket is full again is worth nothing, so the table holds at most
// the fires of the last every × burst however many senders try; refused
// attempts cost no memory. Not safe for concurrent use: the engine holds
// its lock.
type fireLimiter struct {
	every time.Duration
	burst int
	full  map[telemetry.SenderKey]time.Time
}

// pruneAt is the table size at which entries whose bucket is full again
// are dropped.
const pruneAt = 64

func newFireLimiter(every time.Duration, burst int) *fireLimiter {
	return &fireLimiter{every: every, burst: burst, full: map[telemetry.SenderKey]time.Time{}}
}

// allow takes a token of k's bucket at now, if it has one.
func (l *fireLimiter) allow(k telemetry.SenderKey, now time.Time) bool {
	tat, ok := l.full[k]
	if !ok || tat.Before(now) {
		tat = now
	}
	if tat.Sub(now) > time.Duration(l.burst-1)*l.every {
		return false
	}
	if !ok && len(l.full) >= pruneAt {
		for key, t := range l.full {
			if !t.After(now) {
				delete(l.full, key)
			}
		}
	}
	l.full[k] = tat.Add(l.every)
	return true
}
