package alerts

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spikehunt/spikehunt/internal/alertdoc"
)

// Publisher decides what a detector pass should alert and sends it through
// a Sink. Safe for concurrent use; passes are decided one at a time.
type Publisher struct {
	cfg     Config
	sink    Sink
	metrics *metrics

	mu    sync.Mutex
	state State
}

// NewPublisher returns a Publisher with an empty state: call Restore before
// the first Publish to continue from a previous process.
func NewPublisher(cfg Config, sink Sink) (*Publisher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, fmt.Errorf("alerts: no sink")
	}
	return &Publisher{cfg: cfg, sink: sink, metrics: newMetrics(), state: State{}.clone()}, nil
}

// Register adds the Publisher's metrics to reg.
func (p *Publisher) Register(reg prometheus.Registerer) error { return p.metrics.register(reg) }

// Restore replaces the Publisher's state, e.g. with one saved from State by
// the previous process, or built by LoadState.
func (p *Publisher) Restore(st State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state = st.clone()
}

// State returns a copy of the current state, to persist after Publish.
func (p *Publisher) State() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state.clone()
}

// Publish decides the alerts of one pass and sends them, after any that an
// earlier Publish could not deliver. It returns what the sink accepted. On
// a sink error the decided alerts stay in the outbox and the next Publish
// sends them again; the decision itself (dedupe, rate limit) stands.
func (p *Publisher) Publish(ctx context.Context, pass Pass) ([]alertdoc.Alert, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d, err := Decide(p.cfg, p.state, pass, p.cfg.Clock.Now())
	if err != nil {
		return nil, err
	}
	for reason, n := range d.Suppressed {
		p.metrics.suppressed.WithLabelValues(reason).Add(float64(n))
	}
	next := d.Next
	next.Outbox = append(next.Outbox, d.Alerts...)
	if over := len(next.Outbox) - p.cfg.MaxOutbox; over > 0 {
		next.Outbox = next.Outbox[over:]
		p.metrics.suppressed.WithLabelValues(ReasonOverflow).Add(float64(over))
	}
	p.state = next
	if len(next.Outbox) == 0 {
		return nil, nil
	}
	sent := next.Outbox
	if err := p.sink.Send(ctx, sent); err != nil {
		p.metrics.errors.Inc()
		return nil, fmt.Errorf("alerts: send %d alerts (kept for the next pass): %w", len(sent), err)
	}
	p.state.Outbox = nil
	for _, a := range sent {
		p.metrics.published.WithLabelValues(a.Kind).Inc()
	}
	return sent, nil
}
