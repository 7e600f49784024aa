package intake

import (
	"math"
	"math/bits"
	"time"
)

// The rolling tail estimate behind "slow = above the service's rolling p99
// on this host".
//
// Each service keeps a log-linear histogram of latency in microseconds:
// exact below 8 µs, then 8 buckets per power of two (bucket width ≤ 12.5%
// of its value) up to 2^36 µs (19 h), 272 buckets in all. The window is
// six slots of a sixth of TailWindow each: a slot older than the window is
// subtracted from the running total and reused, so the estimate covers the
// last 50–60 s (with the default window) at a cost of one increment per
// request and 272 adds per slot turn. Memory: 7 × 272 × 4 B ≈ 7.6 KiB per
// service.
//
// The quantile is recomputed at most once a second (a 272-step walk) and
// reported as the upper edge of the bucket holding the quantile's rank;
// a request is above it only if it lands in a higher bucket. Erring
// upwards by at most a bucket keeps "slow" rare when most requests share
// one bucket (a service that always answers in 5 ms must not have every
// request counted as its own tail).
//
// A P² estimator would need five markers per quantile and no window;
// it cannot forget, and a host whose p99 rises after a deploy would keep
// the old tail for a long time. Log buckets forget by construction.

const (
	tailSlots      = 6
	tailSub        = 8 // buckets per power of two
	tailSubBits    = 3 // log2(tailSub)
	tailMaxExp     = 35
	tailBuckets    = tailSub + (tailMaxExp-tailSubBits+1)*tailSub // 272
	tailMaxMicros  = 1<<(tailMaxExp+1) - 1
	tailRecomputeN = int64(time.Second)
)

type tailSlot struct {
	epoch  int64 // now / slotWidth of the slot's data; -1 when empty
	n      uint32
	counts [tailBuckets]uint32
}

// tailEstimate is one service's rolling histogram. Not safe for concurrent
// use: the owning serviceState's mutex guards it.
type tailEstimate struct {
	q          float64 // quantile; ≤ 0 disables
	minCount   uint32
	slotWidth  int64 // ns
	slots      [tailSlots]tailSlot
	total      [tailBuckets]uint32
	n          uint32
	epoch      int64 // newest slot epoch seen
	epochEnd   int64 // unix ns at which epoch ends
	limit      time.Duration
	computedAt int64 // unix ns of the last quantile walk; 0 = never
}

func newTailEstimate(q float64, window time.Duration, minCount int) *tailEstimate {
	t := &tailEstimate{q: q, minCount: uint32(minCount), slotWidth: int64(window) / tailSlots, epoch: math.MinInt64, epochEnd: math.MinInt64}
	for i := range t.slots {
		t.slots[i].epoch = -1
	}
	return t
}

// tailBucket maps microseconds to a bucket index.
func tailBucket(us int64) int {
	if us < tailSub {
		if us < 0 {
			return 0
		}
		return int(us)
	}
	if us > tailMaxMicros {
		us = tailMaxMicros
	}
	e := bits.Len64(uint64(us)) - 1 // ≥ tailSubBits
	sub := int(us>>(e-tailSubBits)) & (tailSub - 1)
	return tailSub + (e-tailSubBits)*tailSub + sub
}

// tailUpper is the exclusive upper edge of bucket b in microseconds.
func tailUpper(b int) int64 {
	if b < tailSub {
		return int64(b) + 1
	}
	e := (b-tailSub)/tailSub + tailSubBits
	sub := int64((b - tailSub) % tailSub)
	return (tailSub + sub + 1) << (e - tailSubBits)
}

// above reports whether d is above the rolling quantile as of now, then
// counts d into the window. The order matters: a request is judged
// against the requests before it, never against itself.
func (t *tailEstimate) above(d time.Duration, now int64) bool {
	t.advance(now)
	if now-t.computedAt >= tailRecomputeN {
		t.recompute(now)
	}
	slow := t.limit > 0 && d >= t.limit
	b := tailBucket(d.Microseconds())
	s := &t.slots[t.epoch%tailSlots]
	s.counts[b]++
	s.n++
	t.total[b]++
	t.n++
	return slow
}

// advance moves the window to now's slot, forgetting slots older than the
// window. Time going backwards (a clock step) keeps the current slot.
func (t *tailEstimate) advance(now int64) {
	if now < t.epochEnd { // nearly always: spares a division per request
		return
	}
	epoch := now / t.slotWidth
	if epoch <= t.epoch {
		return
	}
	for i := range t.slots {
		s := &t.slots[i]
		// Slot i can only hold epochs ≡ i (mod tailSlots), all older than
		// epoch, so this also clears the slot epoch is about to reuse.
		if s.epoch >= 0 && s.epoch <= epoch-tailSlots {
			t.forget(s)
		}
	}
	t.slots[epoch%tailSlots].epoch = epoch
	t.epoch, t.epochEnd = epoch, (epoch+1)*t.slotWidth
}

func (t *tailEstimate) forget(s *tailSlot) {
	if s.n > 0 {
		for b, c := range s.counts {
			t.total[b] -= c
		}
		t.n -= s.n
		s.counts = [tailBuckets]uint32{}
		s.n = 0
	}
	s.epoch = -1
}

// recompute walks the histogram for the quantile's bucket; the limit is
// that bucket's upper edge, or 0 while the window holds too few requests.
func (t *tailEstimate) recompute(now int64) {
	t.computedAt = now
	t.limit = 0
	if t.q <= 0 || t.n < t.minCount || t.n == 0 {
		return
	}
	rank := uint32(math.Ceil(t.q * float64(t.n)))
	var cum uint32
	for b, c := range t.total {
		cum += c
		if cum >= rank {
			t.limit = time.Duration(tailUpper(b)) * time.Microsecond
			return
		}
	}
}
