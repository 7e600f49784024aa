package intake

import (
	"maps"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// dropTotals are the intake's drops by reason, summed over sources, kept
// beside the Prometheus counter so that the agent's own figures read them
// directly (Drops) rather than back out of a registry. Drops are the
// exception, so a mutex is cheap enough.
type dropTotals struct {
	mu sync.Mutex
	n  map[string]uint64
}

func (d *dropTotals) add(reason string, n uint64) {
	d.mu.Lock()
	if d.n == nil {
		d.n = map[string]uint64{}
	}
	d.n[reason] += n
	d.mu.Unlock()
}

func (d *dropTotals) snapshot() map[string]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.n)
}

// reasonCounter is one source's counter of one drop reason, resolved once
// for the hot path, that also counts into the totals.
type reasonCounter struct {
	c      prometheus.Counter
	totals *dropTotals
	reason string
}

func (r reasonCounter) Inc() {
	r.c.Inc()
	r.totals.add(r.reason, 1)
}

// Drops returns the requests, lines, spans or whole OTLP requests dropped
// since the intake was made, by reason, summed over sources: the figures
// of spikehunt_intake_drops_total without its source label. The map is
// the caller's.
func (in *Intake) Drops() map[string]uint64 {
	out := in.m.dropTotals.snapshot()
	if out == nil {
		out = map[string]uint64{}
	}
	return out
}
