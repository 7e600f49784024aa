package controller

import "time"

// Names the controllers put on Captures.
const (
	// FinalizerArtifact holds a Capture until its artifact and its index
	// row are deleted. Every Capture gets it: the policy controller sets
	// it on the Captures it creates and the capture controller on any
	// other.
	FinalizerArtifact = "capture.spikehunt.io/artifact"
	// AnnotationStartedAt is when the operator created the Capture, by its
	// clock (RFC 3339, nanoseconds): the start the budgets count from. The
	// creation timestamp is only to the second and by the API server's
	// clock; it is the fallback for Captures made by someone else.
	AnnotationStartedAt = "capture.spikehunt.io/started-at"
	// AnnotationEndedAt is when the capture controller first saw the
	// Capture done (Uploaded, Indexed, Failed or Expired), by its clock:
	// retention's TTL counts from it.
	AnnotationEndedAt = "capture.spikehunt.io/ended-at"
)

// Clock tells the time; the tests inject one they move by hand.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// clockOr returns c, or the system clock when c is nil.
func clockOr(c Clock) Clock {
	if c == nil {
		return systemClock{}
	}
	return c
}

const minRequeue = 50 * time.Millisecond

// untilCapped is how long to wait for t, at most limit and at least
// minRequeue;
// ok is false when t is zero (nothing to wait for).
func untilCapped(now, t time.Time, limit time.Duration) (time.Duration, bool) {
	if t.IsZero() {
		return 0, false
	}
	// Never 0, which controller-runtime reads as "do not requeue"; a time
	// already past is due now, after a short pause against a hot loop.
	d := max(t.Sub(now), minRequeue)
	if limit > 0 && d > limit {
		d = limit
	}
	return d, true
}

// The Kubernetes client rate the operator's manager is given by default
// (spikehunt-operator --kube-api-qps, --kube-api-burst). client-go's own
// default, 5 requests/s with bursts of 10, would spread the 500 Captures
// of a 10% sample of 5,000 nodes over 50 s; the policy controller creates
// them in parallel (CreateWorkers) and needs the burst to do it at once.
const (
	DefaultClientQPS   = 500
	DefaultClientBurst = 1000
)
