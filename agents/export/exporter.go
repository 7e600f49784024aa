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
	"github.com/spikehunt/spikehunt/agents/telemetry"
)

// Exporter batches requests and counter points into export requests.
type Exporter struct {
	cfg Config
	res telemetry.Resource
	sp  *spool.Spool
	snd *sender
	log *slog.Logger
	m   *metrics
	wg  sync.WaitGroup
}

// New returns an exporter writing through sp to sink.
func New(cfg Config, res telemetry.Resource, sink Sink, sp *spool.Spool, log *slog.Logger) (*Exporter, error) {
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

// Run batches from reqs and points until ctx ends. The channels are read
// by Run only; close neither.
func (e *Exporter) Run(ctx context.Context, reqs <-chan telemetry.Request, points <-chan []telemetry.Point) {
	sctx, stop := context.WithCancel(context.Background())
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.snd.run(sctx) }()
	batch := make([]telemetry.Request, 0, e.cfg.MaxSpans)
	// Requests are drained on a short tick rather than received one by one:
	// a receive that finds the exporter parked wakes it, and at thousands of
	// requests a second those wake-ups cost more than the encoding. The
	// intake's queue holds far more than one tick of requests.
	drain := time.NewTicker(max(e.cfg.MaxDelay/4, time.Millisecond))
	defer drain.Stop()
	lastFlush := time.Now()
	flush := func() {
		if len(batch) > 0 {
			e.m.spans.Observe(float64(len(batch)))
			e.write(KindTraces, func() ([]byte, error) { return EncodeSpans(e.res, batch) })
			batch = batch[:0]
		}
		lastFlush = time.Now()
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
				e.write(KindMetrics, func() ([]byte, error) { return EncodeMetrics(e.res, ps) })
			}
		case <-drain.C:
			take()
			if time.Since(lastFlush) >= e.cfg.MaxDelay {
				flush()
			}
		}
	}
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

// write encodes one export request and appends it to the spool.
func (e *Exporter) write(kind Kind, encode func() ([]byte, error)) {
	payload, err := encode()
	if err != nil {
		e.m.errors.WithLabelValues("encode").Inc()
		e.log.Error("encode export request", "kind", kind, "err", err)
		return
	}
	rec := make([]byte, 1+len(payload))
	rec[0] = byte(kind)
	copy(rec[1:], payload)
	if _, err := e.sp.Append(rec); err != nil {
		e.m.errors.WithLabelValues("spool").Inc()
		e.m.records.WithLabelValues(kind.String(), "dropped").Inc()
		e.log.Error("spool append", "kind", kind, "err", err)
		return
	}
	e.m.records.WithLabelValues(kind.String(), "spooled").Inc()
	e.snd.notify()
}
