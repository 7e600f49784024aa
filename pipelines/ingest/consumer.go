package ingest

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/pipelines/store"
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
}

type topicPartition struct {
	topic     string
	partition int32
}

// partBatch is one partition's batch being filled.
type partBatch struct {
	spans       *RequestRows
	counters    *CounterRows
	first, last int64
	msgs, bytes int
	started     time.Time
	cutAt       int64 // ≥ 0: re-forming an intent, close exactly at this offset
	behind      bool  // more of the partition followed the last message when it was fetched
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
	return in, nil
}

func newIngester(cfg Config, st store.Store, log *slog.Logger) (*Ingester, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Ingester{cfg: cfg, st: st, log: log, m: newMetrics(), parts: map[topicPartition]*partBatch{}, pending: map[topicPartition]intent{},
		own: newOwnFigures(st, cfg.Instance)}, nil
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
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, in.cfg.MaxDelay/2)
		msgs, err := in.src.Poll(pctx)
		cancel()
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
	b := in.parts[tp]
	if b != nil && b.msgs > 0 && b.cutAt >= 0 && r.Offset > b.cutAt {
		if err := in.flush(ctx, tp, b); err != nil {
			return err
		}
	}
	if b == nil {
		b = &partBatch{spans: NewRequestRows(), counters: NewCounterRows(), cutAt: -1}
		in.parts[tp] = b
	}
	if b.msgs == 0 {
		b.first, b.started, b.cutAt = r.Offset, time.Now(), -1
		if it, ok := in.pending[tp]; ok {
			delete(in.pending, tp)
			if it.first == r.Offset {
				b.cutAt = it.last
			}
		}
	}
	var derr error
	switch r.Topic {
	case in.cfg.SpansTopic:
		var skipped int
		_, skipped, derr = b.spans.AppendTraces(r.Value)
		in.m.skipped.Add(float64(skipped))
	case in.cfg.MetricsTopic:
		_, derr = b.counters.AppendMetrics(r.Value)
	}
	if derr != nil {
		if err := in.deadLetter(ctx, *r, derr); err != nil {
			return err
		}
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
// re-forming an intent: it must end where the intent says.
func (in *Ingester) flushDue(ctx context.Context) error {
	for tp, b := range in.parts {
		delay := in.cfg.MaxDelay
		if b.behind {
			delay = in.cfg.CatchUpDelay
		}
		if b.msgs > 0 && b.cutAt < 0 && time.Since(b.started) >= delay {
			if err := in.flush(ctx, tp, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush runs the handshake for b, retrying with backoff while ClickHouse
// or Kafka refuse, until ctx ends.
func (in *Ingester) flush(ctx context.Context, tp topicPartition, b *partBatch) error {
	it := intent{b.first, b.last}
	table, rows := "requests", b.spans.Rows()
	input := b.spans.Input()
	if tp.topic == in.cfg.MetricsTopic {
		table, rows, input = "counters", b.counters.Rows(), b.counters.Input()
	}
	step := "intent"
	for wait := time.Duration(0); ; wait = backoff(wait) {
		err := func() error {
			if step == "intent" {
				if err := writeIntent(ctx, in.st, in.cfg.Group, tp.topic, tp.partition, it); err != nil {
					return err
				}
				step = "insert"
			}
			if step == "insert" {
				if rows > 0 {
					opts := []store.Option{store.WithSetting("distributed_foreground_insert", "1")}
					tok := token(in.cfg.Group, tp.topic, tp.partition, it.first, it.last)
					if in.cfg.NoDedup {
						// A token never used before: without one,
						// ClickHouse would still drop a block whose hash it
						// has seen (insert_deduplicate = 0 does not stop
						// that on a non-replicated table).
						tok = uniqueToken()
					}
					opts = append(opts, store.WithSetting("insert_deduplication_token", tok))
					start := time.Now()
					if err := in.st.Insert(ctx, table, input, opts...); err != nil {
						return err
					}
					in.m.insertSecs.WithLabelValues(table).Observe(time.Since(start).Seconds())
					in.afterInsert()
				}
				step = "commit"
			}
			return in.src.Commit(ctx, tp.topic, tp.partition, b.last+1)
		}()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		in.m.retries.WithLabelValues(step).Inc()
		in.log.Warn("ingest: batch not stored yet; retrying", "step", step, "topic", tp.topic, "partition", tp.partition,
			"offsets", strconv.FormatInt(it.first, 10)+"-"+strconv.FormatInt(it.last, 10), "err", err)
		sleep(ctx, backoff(wait))
	}
	in.m.rows.WithLabelValues(table).Add(float64(rows))
	in.own.rows[table] += int64(rows)
	in.m.batchRows.WithLabelValues(table).Observe(float64(rows))
	b.spans.Reset()
	b.counters.Reset()
	b.msgs, b.bytes, b.cutAt = 0, 0, -1
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
