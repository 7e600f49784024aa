package alerts

import (
	"context"
	"slices"
	"sync"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
)

// Sink delivers alerts. Send returns nil only when every alert was
// accepted; on an error the Publisher sends the same alerts again later, so
// a Sink may see an alert twice (recognizable by its alert_id).
type Sink interface {
	Send(ctx context.Context, alerts []alertdoc.Alert) error
}

// SinkFunc adapts a function to a Sink, e.g. to hand alerts to the
// operator's policy in the embedded demo.
type SinkFunc func(ctx context.Context, alerts []alertdoc.Alert) error

// Send calls f.
func (f SinkFunc) Send(ctx context.Context, alerts []alertdoc.Alert) error { return f(ctx, alerts) }

// MemorySink keeps every alert it is sent, in order. Safe for concurrent use.
type MemorySink struct {
	mu     sync.Mutex
	alerts []alertdoc.Alert
}

// Send implements Sink.
func (m *MemorySink) Send(_ context.Context, alerts []alertdoc.Alert) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.alerts = append(m.alerts, alerts...)
	return nil
}

// Alerts returns a copy of what was sent so far.
func (m *MemorySink) Alerts() []alertdoc.Alert {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.alerts)
}
