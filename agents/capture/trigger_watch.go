package capture

import (
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// watch evaluates one armed capture's trigger on each request. Not safe
// for concurrent use: the engine holds its lock.
//
// The p99 rule is streaming: a second's p99 is over the limit once more
// than 1% of its requests are, so the trigger counts, per wall-clock
// second of request end, the requests and those over the limit, and fires
// as soon as the over-count passes 1% of the larger of this second's and
// the previous second's request count (with at least minP99Requests), not
// when the second is over: that keeps the 100 ms promise and ignores the
// first few requests of a second.
type watch struct {
	t        Trigger
	sec      int64
	n, over  float64
	prevN    float64
	lastFire time.Time
}

const minP99Requests = 100

// observe reports whether q would fire the trigger, and why. A fire
// takes effect (cooldown, a new count) only once the engine commits it
// with fired: the engine may refuse it (the sender's fire rate).
func (w *watch) observe(q *telemetry.Request) (record.FireCause, bool) {
	t := &w.t
	if q.Service != t.Service || (t.Endpoint != "" && q.Endpoint != t.Endpoint) {
		return record.FireCause{}, false
	}
	e := end(q)
	if !w.lastFire.IsZero() && e.Sub(w.lastFire) < t.Cooldown {
		return record.FireCause{}, false
	}
	f := record.FireCause{Service: q.Service, Endpoint: q.Endpoint, Latency: q.Duration, RequestAt: e}
	if q.TraceID != ([16]byte{}) {
		f.TraceID = hexID(q.TraceID[:])
	}
	if t.Latency > 0 && q.Duration > t.Latency {
		f.Kind = "latency"
		return f, true
	}
	if t.P99 > 0 {
		sec := e.Unix()
		switch {
		case sec == w.sec:
		case sec == w.sec+1:
			w.sec, w.prevN, w.n, w.over = sec, w.n, 0, 0
		case sec > w.sec:
			w.sec, w.prevN, w.n, w.over = sec, 0, 0, 0
		default:
			return record.FireCause{}, false // a late request of a past second
		}
		wt := float64(max(q.Weight, 1))
		w.n += wt
		if q.Duration > t.P99 {
			w.over++ // slow requests are never sampled: weight 1
		}
		if base := max(w.n, w.prevN); base >= minP99Requests && w.over > 0.01*base {
			f.Kind = "p99"
			return f, true
		}
	}
	return record.FireCause{}, false
}

// fired commits a fire that observe proposed for the request that ended
// at e.
func (w *watch) fired(e time.Time) {
	w.lastFire = e
	w.n, w.over = 0, 0
}

// wouldMatch reports whether q is a request the trigger watches that is
// over one of its limits: what an untrusted sender's request is counted
// by when it is kept from the trigger.
func (w *watch) wouldMatch(q *telemetry.Request) bool {
	t := &w.t
	if q.Service != t.Service || (t.Endpoint != "" && q.Endpoint != t.Endpoint) {
		return false
	}
	return (t.Latency > 0 && q.Duration > t.Latency) || (t.P99 > 0 && q.Duration > t.P99)
}

const hexDigits = "0123456789abcdef"

func hexID(b []byte) string {
	out := make([]byte, 2*len(b))
	for i, c := range b {
		out[2*i], out[2*i+1] = hexDigits[c>>4], hexDigits[c&15]
	}
	return string(out)
}
