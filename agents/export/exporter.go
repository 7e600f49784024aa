// Package export ships what the agent observes: requests as OTLP spans and
// kernel counters as OTLP delta sums, encoded exactly as the OpenTelemetry
// Collector's kafka exporter encodes them (otlp_proto), to Kafka or to a
// Collector over OTLP/gRPC.
//
// Every export request is written to the outage spool before it is sent,
// and sent from the spool in order (see sender). While the destination is
// down the spool fills, up to its cap (then the oldest are dropped and
// counted); on recovery it drains in order.
//
// Lifecycle: New, then Run in one goroutine; Run returns when its context
// ends, after stopping the sender. The caller then closes the sink and the
// spool, in that order.
package export

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/agents/spool"
	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// drainEvery bounds the drain tick, so the intake's queue never has to
// hold more than a quarter second of requests whatever MaxDelay is.
const drainEvery = 250 * time.Millisecond

// Exporter batches requests and counter points into export requests.
type Exporter struct {
	cfg Config
	res telemetry.Resource
	sp  *spool.Spool
	snd *sender
	log *slog.Logger
	m   *metrics
	wg  sync.WaitGroup

	// Run's goroutine only.
	spans otlpwire.SpanEncoder
	buf   []byte // the record being written
}

// maxKeptRecord bounds the record buffer kept between writes.
const maxKeptRecord = 4 << 20

// New returns an exporter writing through sp to sink.
func New(cfg Config, res telemetry.Resource, sink Sink, sp *spool.Spool, log *slog.Logger) (*Exporter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	m := newMetrics()
	return &Exporter{cfg: cfg, res: res, sp: sp, snd: newSender(sp, sink, log, m), log: log, m: m}, nil
}

// Register registers the exporter's metrics.
func (e *Exporter) Register(reg prometheus.Registerer) error { return e.m.register(reg) }

// Sent is how many export requests of kind the sink has accepted since New
// (the records outcome "sent"): the agent's spikehunt.agent.export.records.
// Safe to call from any goroutine.
func (e *Exporter) Sent(kind Kind) uint64 {
	if kind != KindTraces && kind != KindMetrics {
		return 0
	}
	return e.snd.sent[kind].Load()
}

// Run batches from reqs and points until ctx ends. The channels are read
// by Run only; close neither.
func (e *Exporter) Run(ctx context.Context, reqs <-chan telemetry.Request, points <-chan []telemetry.Point) {
	sctx, stop := context.WithCancel(context.Background())
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.snd.run(sctx) }()
	batch := make([]telemetry.Request, 0, e.cfg.MaxSpans)
	// Requests are drained on a tick (MaxDelay, at most drainEvery)
	// rather than received one by one: a receive that finds the exporter
	// parked wakes it, and at thousands of requests a second those
	// wake-ups cost more than the encoding. The intake's queue holds far
	// more than one tick of requests. The tick is on the agent's grid
	// (telemetry.UntilTick), and a sampling pass's points also wait for
	// it: they are written with a batch of requests, and the sender sends
	// both records in one produce request, which costs about half as much
	// as two.
	tick := min(e.cfg.MaxDelay, drainEvery)
	drain := time.NewTimer(telemetry.UntilTick(time.Now(), tick))
	defer drain.Stop()
	flushEvery := int(e.cfg.MaxDelay / tick) // ticks per flush; a partial batch waits at most MaxDelay
	ticks := 0
	var passes [][]telemetry.Point // sampling passes waiting for the tick
	writePasses := func() {
		for i, ps := range passes {
			e.write(KindMetrics, func(dst []byte) ([]byte, error) {
				b, err := otlpwire.EncodeMetrics(e.res, ps)
				return append(dst, b...), err
			})
			passes[i] = nil
		}
		passes = passes[:0]
	}
	flush := func() {
		if len(batch) > 0 {
			e.m.spans.Observe(float64(len(batch)))
			e.write(KindTraces, func(dst []byte) ([]byte, error) { return e.spans.Append(dst, e.res, batch), nil })
			batch = batch[:0]
		}
	}
	// take moves every queued request into batches, without blocking.
	take := func() {
		for {
			select {
			case r, ok := <-reqs:
				if !ok {
					return
				}
				batch = append(batch, r)
				if len(batch) >= e.cfg.MaxSpans {
					flush()
				}
			default:
				return
			}
		}
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case ps := <-points:
			if len(ps) > 0 {
				passes = append(passes, ps)
			}
		case <-drain.C:
			drain.Reset(telemetry.UntilTick(time.Now(), tick))
			writePasses()
			take()
			if ticks++; ticks >= flushEvery {
				ticks = 0
				flush()
			}
		}
	}
	writePasses()
	take() // whatever the intake queued before it closed goes out too
	flush()
	// Give the sender a moment to hand the tail to the sink, then stop it.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if n, _ := e.sp.Pending(); n == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	e.wg.Wait()
}

// write encodes one export request after its kind byte and appends the
// record to the spool, which copies it: the buffer is reused.
func (e *Exporter) write(kind Kind, encode func(dst []byte) ([]byte, error)) {
	rec, err := encode(append(e.buf[:0], byte(kind)))
	if cap(rec) <= maxKeptRecord {
		e.buf = rec[:0]
	}
	if err != nil {
		e.m.errors.WithLabelValues("encode").Inc()
		e.log.Error("encode export request", "kind", kind, "err", err)
		return
	}
	if _, err := e.sp.Append(rec); err != nil {
		e.m.errors.WithLabelValues("spool").Inc()
		e.m.records.WithLabelValues(kind.String(), "dropped").Inc()
		e.log.Error("spool append", "kind", kind, "err", err)
		return
	}
	e.m.records.WithLabelValues(kind.String(), "spooled").Inc()
	e.snd.notify()
}
