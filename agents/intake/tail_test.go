package intake

import (
	"testing"
	"time"
)

func TestTailBucketsCoverEveryLatency(t *testing.T) {
	prev := -1
	for _, us := range []int64{-5, 0, 1, 7, 8, 9, 15, 16, 17, 1000, 1 << 20, tailMaxMicros, tailMaxMicros + 1, 1 << 62} {
		b := tailBucket(us)
		if b < 0 || b >= tailBuckets {
			t.Fatalf("tailBucket(%d) = %d, want 0…%d", us, b, tailBuckets-1)
		}
		if b < prev {
			t.Errorf("tailBucket(%d) = %d < %d: buckets must grow with latency", us, b, prev)
		}
		prev = b
	}
	// Every value lies below its bucket's upper edge and at or above the
	// previous bucket's, and buckets are at most 12.5% wide.
	for us := int64(0); us < 1<<20; us += 1 + us/97 {
		b := tailBucket(us)
		if up := tailUpper(b); us >= up {
			t.Fatalf("%d µs in bucket %d with upper edge %d", us, b, up)
		}
		if b > 0 && us < tailUpper(b-1) {
			t.Fatalf("%d µs in bucket %d but below bucket %d's edge %d", us, b, b-1, tailUpper(b-1))
		}
		if lo := tailUpper(b - 1); b >= tailSub && float64(tailUpper(b)-lo) > 0.125*float64(lo)+1e-9 {
			t.Fatalf("bucket %d is [%d, %d): wider than 12.5%%", b, lo, tailUpper(b))
		}
	}
}

func TestTailEstimate(t *testing.T) {
	start := t0.UnixNano()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }

	t.Run("silent until the window holds min count", func(t *testing.T) {
		tail := newTailEstimate(0.99, time.Minute, 200)
		for i := range 199 {
			tail.above(ms(1), start+int64(i)*int64(10*time.Millisecond))
		}
		if tail.above(time.Hour, start+int64(3*time.Second)) {
			t.Error("an hour is slow with 199 requests in the window; want no tail judgement yet")
		}
	})
	t.Run("above p99 once warm, and the p99 itself is not", func(t *testing.T) {
		tail := newTailEstimate(0.99, time.Minute, 200)
		now := start
		for i := range 1000 {
			now += int64(time.Millisecond)
			tail.above(ms(1+i%10), now) // 1…10 ms
		}
		now += int64(2 * time.Second)
		if tail.above(ms(10), now) {
			t.Error("10 ms (the max seen) judged slow")
		}
		if !tail.above(ms(12), now) {
			t.Error("12 ms judged not slow with a p99 of 10 ms")
		}
	})
	t.Run("the window forgets", func(t *testing.T) {
		tail := newTailEstimate(0.99, time.Minute, 200)
		now := start
		for range 1000 {
			now += int64(time.Millisecond)
			tail.above(ms(100), now)
		}
		// A minute later a service that now answers in 1 ms has a new p99.
		now += int64(61 * time.Second)
		for range 1000 {
			now += int64(time.Millisecond)
			tail.above(ms(1), now)
		}
		now += int64(2 * time.Second)
		if !tail.above(ms(5), now) {
			t.Errorf("5 ms not slow against a fresh 1 ms p99 (limit %s, n %d): the old 100 ms window was kept", tail.limit, tail.n)
		}
	})
	t.Run("a clock step backwards does not corrupt the window", func(t *testing.T) {
		tail := newTailEstimate(0.99, time.Minute, 1)
		tail.above(ms(1), start)
		tail.above(ms(1), start-int64(time.Hour))
		if tail.n != 2 {
			t.Errorf("n = %d, want 2", tail.n)
		}
	})
}
