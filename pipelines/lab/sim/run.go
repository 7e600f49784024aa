package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// Signal says which OTLP signal a message carries.
type Signal int

const (
	Spans   Signal = iota // an ExportTraceServiceRequest → topic otlp_spans
	Metrics               // an ExportMetricsServiceRequest → topic otlp_metrics
)

// Sink takes the messages an agent would send, keyed by host.name as the
// agents key their Kafka records. Send may block (back-pressure); it is
// called from several goroutines at once. The sink owns msg after the call.
type Sink interface {
	Send(ctx context.Context, sig Signal, host string, msg []byte) error
}

// Stats counts what a run produced.
type Stats struct {
	Requests int64 // served (what the weights add up to, roughly)
	Kept     int64 // kept and sent, like an agent's sampled output
	Points   int64 // counter points
	Messages int64
	Bytes    int64
	Skipped  bool // Load found this configuration loaded already and sent nothing
}

// flushEvery is how much simulated time one message per signal covers for
// one host: an agent sends more often, but the rows are the same and fewer,
// bigger messages make the simulation cheaper to ingest.
const flushEvery = time.Minute

// Run simulates the fleet of cfg (filled with Defaults and checked) into
// sink, host by host on every CPU, and returns the ground truth. progress,
// if not nil, is called after each host with how many are done.
func Run(ctx context.Context, cfg Config, sink Sink, progress func(done, total int)) (Truth, Stats, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return Truth{}, Stats{}, err
	}
	hosts, truth := Plan(cfg)
	var (
		stats   Stats
		done    atomic.Int64
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		runErr  error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(hosts) || ctx.Err() != nil {
					return
				}
				if err := simulateHost(ctx, cfg, &hosts[i], sink, &stats); err != nil {
					errOnce.Do(func() { runErr = fmt.Errorf("sim: host %s: %w", hosts[i].Name, err); cancel() })
					return
				}
				if progress != nil {
					progress(int(done.Add(1)), len(hosts))
				}
			}
		}()
	}
	wg.Wait()
	if runErr == nil && ctx.Err() != nil {
		runErr = ctx.Err()
	}
	return truth, stats, runErr
}

// simulateHost emits one host's whole time range, a flushEvery at a time.
func simulateHost(ctx context.Context, cfg Config, h *Host, sink Sink, stats *Stats) error {
	res := telemetry.Resource{HostName: h.Name, NodeName: h.Name, HWClass: h.HWClass}
	reqs := &requestGen{cfg: cfg, eps: endpointsOf(cfg.Scenario), host: h, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(h.Index)<<1))}
	ctrRNG := rand.New(rand.NewPCG(cfg.Seed, uint64(h.Index)<<1|1))
	ctrs := newCounterGen(cfg, h, ctrRNG)
	self := newSelfGen(cfg, h)
	// Each agent started at its own moment: its counter intervals are
	// offset, and each measured interval is a little off the nominal step.
	tick := cfg.Start.Add(time.Duration(ctrRNG.Float64() * float64(cfg.CounterStep)))
	end := cfg.Start.Add(cfg.Duration)
	var (
		rbuf []telemetry.Request
		pbuf []telemetry.Point
		n    Stats
	)
	for from := cfg.Start; from.Before(end); from = from.Add(flushEvery) {
		to := from.Add(flushEvery)
		if to.After(end) {
			to = end
		}
		rbuf = rbuf[:0]
		for sec := from; sec.Before(to); sec = sec.Add(time.Second) {
			before := len(rbuf)
			rbuf = reqs.second(sec, rbuf)
			for _, r := range rbuf[before:] {
				n.Requests += int64(r.Weight)
			}
			self.kept(rbuf[before:])
		}
		pbuf = pbuf[:0]
		for {
			stop := tick.Add(cfg.CounterStep + time.Duration(ctrRNG.IntN(11)-5)*time.Millisecond)
			if stop.After(to) {
				break
			}
			pbuf = ctrs.interval(tick, stop, pbuf)
			pbuf = self.interval(tick, stop, pbuf)
			tick = stop
		}
		if len(rbuf) > 0 {
			msg, err := otlpwire.EncodeSpans(res, rbuf)
			if err != nil {
				return err
			}
			if err := sink.Send(ctx, Spans, h.Name, msg); err != nil {
				return err
			}
			n.Kept += int64(len(rbuf))
			n.Messages++
			n.Bytes += int64(len(msg))
		}
		if len(pbuf) > 0 {
			msg, err := otlpwire.EncodeMetrics(res, pbuf)
			if err != nil {
				return err
			}
			if err := sink.Send(ctx, Metrics, h.Name, msg); err != nil {
				return err
			}
			n.Points += int64(len(pbuf))
			n.Messages++
			n.Bytes += int64(len(msg))
		}
	}
	atomic.AddInt64(&stats.Requests, n.Requests)
	atomic.AddInt64(&stats.Kept, n.Kept)
	atomic.AddInt64(&stats.Points, n.Points)
	atomic.AddInt64(&stats.Messages, n.Messages)
	atomic.AddInt64(&stats.Bytes, n.Bytes)
	return nil
}
