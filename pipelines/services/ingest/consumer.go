package ingest

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Ingester consumes the OTLP topics into ClickHouse, exactly once (see
// intent.go). One goroutine runs it; it is not safe for concurrent use.
type Ingester struct {
	cfg     Config
	st      store.Store
	log     *slog.Logger
	src     Source
	m       *metrics
	parts   map[topicPartition]*partBatch
	pending map[topicPartition]intent // read at assignment, used by the partition's first batch
	own     ownFigures                // what it writes about itself (self_report.go)
	health  health                    // what /healthz says (health.go)
	// tables and tableDefaults are what the start read of the destination
	// tables, for checking a source topic that appears later (adopt).
	tables        map[string]tableFacts
	tableDefaults map[string]int64

	// lease is how long after a poll it may insert what it polled
	// (Config.Lease); 0 for the in-process source, which has no group.
	lease    time.Duration
	polledAt time.Time
	// stale marks partitions whose remaining messages in this poll are
	// not to be taken: the partition was rewound or is held.
	stale map[topicPartition]bool
	// maxAge is Config.MaxAge resolved per source topic at start.
	maxAge map[string]time.Duration
	// scratch batches for the halves of a split batch (flush.go).
	scratchSpans    *RequestRows
	scratchCounters *CounterRows
}

type topicPartition struct {
	topic     string
	partition int32
}

// partBatch is one partition's batch being filled, then closed and
// taken through the handshake (flush.go).
type partBatch struct {
	spans       *RequestRows
	counters    *CounterRows
	window      timeWindow // fixed when its first message comes, so that a split decodes its messages as the batch did
	first, last int64
	msgs, bytes int
	kept        []Message    // the messages with rows in the batch, for a split; their values are the source's
	dead        []DeadLetter // to write to the dead-letter topic before the batch is committed
	started     time.Time
	cutAt       int64 // ≥ 0: re-forming an intent, close exactly at this offset
	reformed    bool  // re-formed from an intent: its insert may be a repeat (landed.go)
	tries       int   // inserts tried with the batch's token
	split       bool  // ClickHouse refused its rows and it was split (flush.go)
	behind      bool  // more of the partition followed the last message when it was fetched

	step     step          // stepOpen while filling
	inserted int           // rows inserted (a split batch inserts in parts)
	retryAt  time.Time     // held: when to try its dead letters again
	wait     time.Duration // held: the backoff
}

// New joins cfg.Group on Kafka; nothing is consumed until Run.
func New(cfg Config, st store.Store, log *slog.Logger) (*Ingester, error) {
	in, err := newIngester(cfg, st, log)
	if err != nil {
		return nil, err
	}
	if in.src, err = newKafkaSource(in.cfg, in, in.log); err != nil {
		return nil, err
	}
	return in, nil
}

// NewWithMemory is New over an in-process source instead of Kafka (the
// embedded demo): src's topics are cfg's, its partitions its own.
func NewWithMemory(cfg Config, st store.Store, src *MemorySource, log *slog.Logger) (*Ingester, error) {
	if len(cfg.Brokers) == 0 {
		cfg.Brokers = []string{"in-process"}
	}
	in, err := newIngester(cfg, st, log)
	if err != nil {
		return nil, err
	}
	src.attach(in)
	in.src = src
	in.lease = 0
	return in, nil
}

func newIngester(cfg Config, st store.Store, log *slog.Logger) (*Ingester, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Ingester{cfg: cfg, st: st, log: log, m: newMetrics(), parts: map[topicPartition]*partBatch{}, pending: map[topicPartition]intent{},
		own: newOwnFigures(st, cfg.Instance), lease: cfg.Lease(), stale: map[topicPartition]bool{}, maxAge: map[string]time.Duration{},
		scratchSpans: NewRequestRows(), scratchCounters: NewCounterRows(), health: newHealth()}, nil
}

// Register registers the ingester's metrics.
func (in *Ingester) Register(reg prometheus.Registerer) error { return in.m.register(reg) }

// assigned reads the intents of newly assigned partitions and returns
// those it could not read before ctx ended. A read that has started runs
// to its end (up to intentReadTimeout) even if ctx ends meanwhile: the
// memory source polls with a deadline of MaxDelay/2, shorter than a read
// on a busy engine, and must still make progress.
func (in *Ingester) assigned(ctx context.Context, assigned map[string][]int32) (unread map[string][]int32) {
	for topic, parts := range assigned {
		for _, p := range parts {
			read := false
			for wait := time.Duration(0); ctx.Err() == nil; wait = backoff(wait) {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), intentReadTimeout)
				it, ok, err := readIntent(rctx, in.st, in.cfg.Group, topic, p)
				cancel()
				if err == nil {
					if ok {
						in.pending[topicPartition{topic, p}] = it
					}
					read = true
					break
				}
				in.log.Warn("ingest: read intent; retrying", "topic", topic, "partition", p, "err", err)
				sleep(ctx, backoff(wait))
			}
			if !read {
				if unread == nil {
					unread = map[string][]int32{}
				}
				unread[topic] = append(unread[topic], p)
			}
		}
	}
	return unread
}

// intentReadTimeout bounds one read of a partition's intent.
const intentReadTimeout = 10 * time.Second

// dropped forgets the partial batches of partitions this member lost.
// They had no intent yet, so the next owner reads them again.
func (in *Ingester) dropped(lost map[string][]int32) {
	for topic, parts := range lost {
		for _, p := range parts {
			if b := in.parts[topicPartition{topic, p}]; b != nil && !b.retryAt.IsZero() {
				in.src.Release(topic, p, -1)
				in.health.held(topicPartition{topic, p}, nil)
				in.m.held.Dec()
			}
			delete(in.parts, topicPartition{topic, p})
			delete(in.pending, topicPartition{topic, p})
			delete(in.own.lags, topicPartition{topic, p})
		}
	}
}

// Run consumes until ctx ends, then closes the source. Batches not yet
// inserted are left to be read again: their offsets are not committed.
// Its own counters rows are written every ReportEvery and once more as it
// ends, for what was committed by then.
func (in *Ingester) Run(ctx context.Context) error {
	err := in.run(ctx)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	in.report(fctx)
	cancel()
	return err
}

func (in *Ingester) run(ctx context.Context) error {
	defer in.src.Close()
	if err := in.prepare(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	for ctx.Err() == nil {
		if err := in.adopt(); err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, in.cfg.MaxDelay/2)
		msgs, err := in.src.Poll(pctx)
		cancel()
		in.polledAt = time.Now()
		clear(in.stale)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for i := range msgs {
			m := &msgs[i]
			if m.Lag >= 0 && (i == len(msgs)-1 || msgs[i+1].Partition != m.Partition || msgs[i+1].Topic != m.Topic) {
				in.m.setLag(m.Topic, m.Partition, m.Lag)
				in.own.lags[topicPartition{m.Topic, m.Partition}] = max(m.Lag, 0)
			}
			if err = in.add(ctx, m); err != nil {
				break
			}
		}
		if err == nil {
			err = in.flushDue(ctx)
		}
		if err == nil && time.Since(in.own.since) >= in.cfg.ReportEvery {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			in.report(rctx)
			cancel()
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		in.src.Between()
	}
	return nil
}

func (in *Ingester) add(ctx context.Context, r *Message) error {
	tp := topicPartition{r.Topic, r.Partition}
	if in.stale[tp] {
		return nil
	}
	b := in.parts[tp]
	if b != nil && b.step != stepOpen {
		// Held on the dead-letter topic: the partition is paused, and
		// rewound past the batch once it is released.
		in.stale[tp] = true
		return nil
	}
	if b != nil && b.msgs > 0 && b.cutAt >= 0 && r.Offset > b.cutAt {
		if err := in.flush(ctx, tp, b); err != nil {
			return err
		}
		if in.stale[tp] || in.parts[tp] != b || b.step != stepOpen {
			return nil
		}
	}
	if b == nil {
		b = &partBatch{spans: NewRequestRows(), counters: NewCounterRows(), cutAt: -1}
		in.parts[tp] = b
	}
	if b.msgs == 0 {
		b.first, b.started, b.cutAt = r.Offset, in.cfg.Clock(), -1
		b.window = newTimeWindow(in.cfg.Now(), in.maxAge[r.Topic], in.cfg.MaxAhead)
		b.spans.SetWindow(b.window)
		b.counters.SetWindow(b.window)
		if it, ok := in.pending[tp]; ok {
			delete(in.pending, tp)
			if it.first == r.Offset {
				b.cutAt, b.reformed = it.last, true
			}
		}
	}
	var derr error
	var rows, refused int
	var capped Capped
	switch r.Topic {
	case in.cfg.SpansTopic:
		var skipped int
		rows, skipped, derr = b.spans.AppendTraces(r.Value)
		refused, capped = b.spans.Refused(), b.spans.Capped()
		in.m.skipped.Add(float64(skipped))
	case in.cfg.MetricsTopic:
		rows, derr = b.counters.AppendMetrics(r.Value)
		refused, capped = b.counters.Refused(), b.counters.Capped()
	}
	if derr == nil {
		capped.each(func(reason string, n int) { in.m.capped.WithLabelValues(in.table(r.Topic), reason).Add(float64(n)) })
	}
	switch {
	case derr != nil:
		reason, detail := "decode", derr.Error()
		var de *DecodeError
		if errors.As(derr, &de) {
			reason, detail = de.Reason, de.Detail
		}
		b.dead = append(b.dead, DeadLetter{Message: *r, Reason: reason, Detail: detail})
	case refused > 0:
		in.m.refused.WithLabelValues(in.table(r.Topic), badTimestamp).Add(float64(refused))
		b.dead = append(b.dead, DeadLetter{Message: *r, Reason: badTimestamp, Partial: rows > 0,
			Detail: refusedDetail(refused, rows, b.window)})
	}
	if rows > 0 {
		b.kept = append(b.kept, *r)
	}
	b.last, b.msgs, b.bytes = r.Offset, b.msgs+1, b.bytes+len(r.Value)
	b.behind = r.Lag > 0
	full := b.spans.Rows()+b.counters.Rows() >= in.cfg.MaxRows || b.bytes >= in.cfg.MaxBytes
	if (b.cutAt >= 0 && r.Offset >= b.cutAt) || (b.cutAt < 0 && full) {
		return in.flush(ctx, tp, b)
	}
	return nil
}

// flushDue inserts the batches older than MaxDelay, or CatchUpDelay for
// one whose partition is behind (see Config), except one that is
// re-forming an intent: it must end where the intent says. A batch held
// on the dead-letter topic is tried again once its backoff has passed.
func (in *Ingester) flushDue(ctx context.Context) error {
	for tp, b := range in.parts {
		now := in.cfg.Clock() // a flush before this one may have taken a while
		if b.step == stepDeadLetters {
			if !now.Before(b.retryAt) {
				if err := in.flush(ctx, tp, b); err != nil {
					return err
				}
			}
			continue
		}
		delay := in.cfg.MaxDelay
		if b.behind {
			delay = in.cfg.CatchUpDelay
		}
		if b.msgs > 0 && b.cutAt < 0 && now.Sub(b.started) >= delay {
			if err := in.flush(ctx, tp, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// table is where topic's rows go.
func (in *Ingester) table(topic string) string {
	if topic == in.cfg.MetricsTopic {
		return "counters"
	}
	return "requests"
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
