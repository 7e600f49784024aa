package alertintake

import (
	"context"
	"slices"

	"github.com/spikehunt/spikehunt/internal/policy"
)

// Policy is the alert as the policy functions take it. The Key is the
// policy's alert ID: it is stable across re-sends, so a redelivered alert
// arms no more. Resolved is always false: resolved alerts never become an
// Alert.
func (a Alert) Policy() policy.Alert {
	return policy.Alert{
		ID:           a.Key,
		Service:      a.Service,
		PatternClass: string(a.PatternClass),
		PatternKey:   a.PatternKey,
		Hosts:        slices.Clone(a.Hosts),
		HWClasses:    slices.Clone(a.HWClasses),
	}
}

// PolicySink is a Sink that hands each batch to offer as policy alerts,
// for a consumer that takes those (the CapturePolicy controller's alert
// inbox). offer's error is the Sink's.
func PolicySink(offer func(context.Context, ...policy.Alert) error) Sink {
	return SinkFunc(func(ctx context.Context, alerts []Alert) error {
		out := make([]policy.Alert, len(alerts))
		for i, a := range alerts {
			out[i] = a.Policy()
		}
		return offer(ctx, out...)
	})
}
