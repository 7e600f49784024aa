package intake

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/spikehunt/spikehunt/agents/telemetry"
)

// Sampling (DESIGN.md §3). A request is slow when its latency reaches the
// service's fixed threshold or lies above the service's rolling tail
// quantile on this host (tail.go); slow requests are always kept with
// weight 1. The others are kept one in SampleEvery with weight
// SampleEvery. Whether a request is slow depends only on its latency and
// on requests before it, never on the coin, so the per-second max is
// exact and a weighted quantile over the kept requests is unbiased.
//
// The coin is the trace id when there is one: a hash of all 16 bytes
// modulo N, so every agent keeps the same traces (a trace's server spans
// on several services of a host are kept or dropped together) and ids
// whose random bits are not where W3C puts them still sample evenly.
// Without a trace id it is a per-goroutine pseudo-random draw.

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
	return h%uint64(every) == 0
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
		return t.svc, t.svcOver
	}
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

// flush adds the batch's outcome counts to the metrics.
func (t *tally) flush() {
	for o, n := range t.outcomes {
		if n > 0 {
			t.src.outcomes[o].Add(float64(n))
		}
	}
	t.outcomes = [numOutcomes]int{}
}

// classify files r under its (capped) service and endpoint, runs the
// sampler and sets r.Service, r.Endpoint and r.Weight. It reports whether
// r is kept. The tally's now is the receive time: the rolling window moves
// with the intake's clock, not with span timestamps that an SDK may have
// batched for seconds. The caller flushes the tally after the batch.
func classify[T name](t *tally, svc, ep T, r *telemetry.Request) bool {
	in, now := t.in, t.now
	st, over := service(t, svc)
	st.mu.Lock()
	var epName string
	if over {
		epName = Overflow
	} else {
		var epOver bool
		epName, epOver = endpointLocked(st, ep, in.cfg.MaxEndpoints, in.card.idle, now)
		if epOver {
			in.m.overflowEndpoint.Inc()
		}
	}
	slow := st.tail.above(r.Duration, now)
	st.mu.Unlock()

	if st.threshold > 0 && r.Duration >= st.threshold {
		slow = true
	}
	r.Service, r.Endpoint = st.name, epName
	var o outcome
	switch {
	case slow:
		o, r.Weight = keptSlow, 1
	case keepTrace(r.TraceID, uint32(in.cfg.SampleEvery)):
		o, r.Weight = keptSampled, uint32(in.cfg.SampleEvery)
	default:
		o = sampledOut
	}
	t.outcomes[o]++
	return o != sampledOut
}
