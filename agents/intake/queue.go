package intake

import "github.com/spikehunt/spikehunt/internal/telemetry"

// The hand-off to the agent is a buffered channel of cfg.QueueSize
// requests, read through Out. Receivers never wait on it: when it is full
// the request is dropped and counted (reason queue_full), so a slow
// exporter costs data, never a stalled socket or a blocked OTLP client.

// offer hands r, from a sender the receiver cannot name, to the queue
// without blocking. The caller holds in.mu for reading and has checked
// in.closed, so the channel is open.
func (in *Intake) offer(src *sourceMetrics, r *telemetry.Request) {
	in.offerFrom(src, r, in.unnamed[src.name])
}

// offerFrom is offer for a request whose sender the receiver knows and
// the trust policy has judged.
func (in *Intake) offerFrom(src *sourceMetrics, r *telemetry.Request, from *telemetry.Sender) {
	if in.tap != nil {
		in.tap(r, from)
	}
	select {
	case in.out <- *r:
	default:
		src.queueFull.Inc()
	}
}

// Out is the queue of kept requests. The intake closes it in Close, after
// the last send; requests still buffered can be read after that, so a
// consumer ranges over Out until it ends. Read it from one goroutine or
// many; never close it.
func (in *Intake) Out() <-chan telemetry.Request { return in.out }
