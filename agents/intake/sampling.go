package intake

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// Sampling (docs/design.md §3). A request is slow when its latency reaches the
// service's fixed threshold or lies above the service's rolling tail
// quantile on this host (tail.go); slow requests are always kept with
// weight 1. The others are kept one in N with weight N: N is SampleEvery,
// doubled as often as needed to keep a busy service's sampled requests
// under SampledPerSecond (sampleRate). Whether a request is slow depends
// only on its latency and on requests before it, and N only on requests
// before it, never on the coin, so the per-second max is exact and a
// weighted quantile over the kept requests is unbiased.
//
// The coin is the trace id when there is one: a hash of all 16 bytes
// modulo N, so every agent keeps the same traces (a trace's server spans
// on several services of a host are kept or dropped together) and ids
// whose random bits are not where W3C puts them still sample evenly. As
// every N is SampleEvery times a power of two, a trace kept at a low rate
// is kept at every higher one: a busy service's kept traces are also kept
// by the quiet services they pass through. Without a trace id it is a
// per-goroutine pseudo-random draw.

type outcome uint8

const (
	keptSlow outcome = iota
	keptSampled
	sampledOut
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"kept_slow", "kept_sampled", "sampled_out"}

// keepTrace reports whether the coin for traceID keeps a request when
// one in every requests is kept.
func keepTrace(traceID [16]byte, every uint32) bool {
	if every <= 1 {
		return true
	}
	if traceID == ([16]byte{}) {
		return rand.Uint32N(every) == 0
	}
	h := binary.LittleEndian.Uint64(traceID[:8]) ^ binary.LittleEndian.Uint64(traceID[8:])*0x9e3779b97f4a7c15
	// splitmix64's finalizer: every input bit reaches every output bit.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return divides(every, h)
}

// divides reports h%d == 0 (d > 0) without a 64-bit division for most h:
// d is a multiple of 2^z, so h must end in z zero bits, and the rest of h
// must divide by d's odd part. For a busy service, whose N is SampleEvery
// << shift, the first test alone rejects all but one in 2^shift.
func divides(d uint32, h uint64) bool {
	z := bits.TrailingZeros32(d)
	if h&(1<<z-1) != 0 {
		return false
	}
	return (h>>z)%uint64(d>>z) == 0
}

// sampleRate is one service's adaptive rate. The owning serviceState's
// mutex guards it.
type sampleRate struct {
	sec   int64  // the second being counted (unix s)
	count uint64 // requests in it so far
	shift uint8  // N = SampleEvery << shift
}

// maxRateShift bounds the doubling: with SampleEvery ≤ 10^6, N stays
// below 2^32 (the weight is a uint32).
const maxRateShift = 12

// every counts a request at now (unix ns) and returns its N. The shift
// is chosen when a second begins, from the whole second before: the
// smallest that would have kept at most perSecond of its requests.
func (r *sampleRate) every(base, perSecond int, now int64) uint32 {
	if sec := now / 1e9; sec != r.sec {
		var last uint64
		if sec == r.sec+1 {
			last = r.count
		}
		r.shift = 0
		for perSecond > 0 && r.shift < maxRateShift && last > uint64(perSecond)*uint64(base)<<r.shift {
			r.shift++
		}
		r.sec, r.count = sec, 0
	}
	r.count++
	return uint32(base) << r.shift
}

// tally is what one batch (a datagram, an OTLP request) has classified so
// far: outcome counts, added to the metrics once per batch, and the last
// service looked up, since the lines of a datagram almost always share
// one. A tally lives on one goroutine for one batch; its receive time is
// the batch's.
type tally struct {
	in       *Intake
	src      *sourceMetrics
	now      int64 // receive time, unix ns
	outcomes [numOutcomes]int
	svc      *serviceState // the cached service; nil for none
	svcOver  bool
	svcLen   int
	svcName  [maxNameBytes]byte // its name as received
	svcHits  int64              // requests of it found in the cache, not yet counted in its slot
}

func newTally(in *Intake, src *sourceMetrics, now int64) tally {
	return tally{in: in, src: src, now: now}
}

// service returns svc's state through the one-entry cache.
func service[T name](t *tally, svc T) (*serviceState, bool) {
	if t.svc != nil && string(t.svcName[:t.svcLen]) == string(svc) {
		if t.svcOver {
			t.in.m.overflowService.Inc()
		}
		t.svcHits++
		return t.svc, t.svcOver
	}
	t.countHits()
	st, over := lookupService(t.in.card, svc, t.now)
	if over {
		t.in.m.overflowService.Inc()
	}
	t.svc, t.svcOver = nil, false
	if len(svc) <= len(t.svcName) {
		t.svc, t.svcOver, t.svcLen = st, over, copy(t.svcName[:], svc)
	}
	return st, over
}

// countHits adds the requests found in the cache to the cached service's
// count: its slot's, or its count in the sketch of names in _overflow.
func (t *tally) countHits() {
	switch {
	case t.svc == nil || t.svcHits == 0:
	case t.svcOver:
		countOverflow(t.in.card, t.svcName[:t.svcLen], t.svcHits, t.now)
	default:
		t.svc.slot.hits.Add(t.svcHits)
	}
	t.svcHits = 0
}

// flush adds the batch's counts to the metrics and the cardinality caps.
func (t *tally) flush() {
	t.countHits()
	for o, n := range t.outcomes {
		if n > 0 {
			t.src.outcomes[o].Add(float64(n))
		}
	}
	t.outcomes = [numOutcomes]int{}
}

// classify runs the sampler on r and, when r is kept, files it under its
// (capped) service and endpoint: it sets r.Weight, r.Service and
// r.Endpoint and reports whether r is kept. Only kept requests take an
// endpoint slot: one sampled out is never exported, and skipping the
// lookup saves most of its cost. The tally's now is the receive time: the
// rolling window moves with the intake's clock, not with span timestamps
// that an SDK may have batched for seconds. The caller flushes the tally
// after the batch.
func classify[T name](t *tally, svc, ep T, r *telemetry.Request) bool {
	in, now := t.in, t.now
	st, over := service(t, svc)
	st.mu.Lock()
	slow := st.tail.above(r.Duration, now)
	every := st.rate.every(in.cfg.SampleEvery, in.cfg.SampledPerSecond, now)
	st.mu.Unlock()
	if st.threshold > 0 && r.Duration >= st.threshold {
		slow = true
	}
	var o outcome
	switch {
	case slow:
		o, r.Weight = keptSlow, 1
	case keepTrace(r.TraceID, every):
		o, r.Weight = keptSampled, every
	default:
		o = sampledOut
	}
	t.outcomes[o]++
	if o == sampledOut {
		return false
	}
	r.Service, r.Endpoint = st.name, Overflow
	if !over {
		st.mu.Lock()
		name, epOver := endpointLocked(st, ep, now)
		st.mu.Unlock()
		r.Endpoint = name
		if epOver {
			in.m.overflowEndpoint.Inc()
		}
	}
	return true
}
