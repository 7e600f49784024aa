package ingest

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/spikehunt/spikehunt/internal/store"
)

// step is where a closed batch is in the handshake (intent.go).
type step uint8

const (
	stepOpen        step = iota // filling
	stepIntent                  // closed: write the intent
	stepInsert                  // insert its rows, split on a permanent error
	stepDeadLetters             // write its dead letters; held while the topic refuses them
	stepCommit                  // commit last+1
)

func (s step) String() string {
	return [...]string{"open", "intent", "insert", "dead_letter", "commit"}[s]
}

// errFenced says the member's lease ran out (Config.Lease) or Kafka
// refused its commit as from an old generation: the partition may be
// another member's now, which re-forms the batch from its intent.
var errFenced = errors.New("ingest: fenced: the lease on the partition ran out or the group moved on")

// flush takes b through the handshake, from the step it is at: intent,
// insert, dead letters, commit. A step ClickHouse or Kafka refuses is
// retried with backoff while the member's lease lasts; past it the batch
// is abandoned (fenced) and the partition rewound. Dead letters the
// topic refuses hold the partition (paused, retried from flushDue) and
// let the others flow. Only ctx ending is an error.
func (in *Ingester) flush(ctx context.Context, tp topicPartition, b *partBatch) error {
	if b.step == stepOpen {
		b.step = stepIntent
	}
	it := intent{b.first, b.last}
	for {
		var err error
		switch b.step {
		case stepIntent:
			err = in.retry(ctx, tp, it, b.step, func() error {
				return writeIntent(ctx, in.st, in.cfg.Group, tp.topic, tp.partition, it)
			})
			if err == nil {
				b.step = stepInsert
			}
		case stepInsert:
			rows, input := b.spans.Rows(), b.spans.Input()
			if tp.topic == in.cfg.MetricsTopic {
				rows, input = b.counters.Rows(), b.counters.Input()
			}
			if rows > 0 {
				tok := token(in.cfg.Group, tp.topic, tp.partition, it.first, it.last)
				err = in.insertOrSplit(ctx, tp, b, it, b.kept, input, rows, tok)
				if err == nil && (b.reformed || b.tries > 1) && !b.split && !in.cfg.NoDedup {
					err = in.ensureLanded(ctx, tp, b, it, tok) // landed.go
				}
			}
			if err == nil {
				b.step = stepDeadLetters
			}
		case stepDeadLetters:
			if !in.writeDeadLetters(ctx, tp, b) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				in.hold(tp, b)
				return nil
			}
			b.step = stepCommit
		case stepCommit:
			err = in.retry(ctx, tp, it, b.step, func() error { return in.src.Commit(ctx, tp.topic, tp.partition, b.last+1) })
			if err == nil {
				in.committed(tp, b)
				return nil
			}
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errFenced):
			in.abandon(ctx, tp, b)
			return nil
		default:
			return err
		}
	}
}

// retry runs fn until it succeeds, ctx ends, or the lease runs out.
func (in *Ingester) retry(ctx context.Context, tp topicPartition, it intent, s step, fn func() error) error {
	for wait := time.Duration(0); ; wait = backoff(wait) {
		if in.leaseLeft() <= 0 {
			return errFenced
		}
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s == stepCommit && fencedCommit(err) {
			return errFenced
		}
		if _, permanent := insertFailure(err); permanent && s == stepInsert {
			return err
		}
		in.m.retries.WithLabelValues(s.String()).Inc()
		in.log.Warn("ingest: batch not stored yet; retrying", "step", s.String(), "topic", tp.topic, "partition", tp.partition,
			"offsets", strconv.FormatInt(it.first, 10)+"-"+strconv.FormatInt(it.last, 10), "err", err)
		sleep(ctx, min(backoff(wait), max(in.leaseLeft(), 0)))
	}
}

// leaseLeft is how long the member may still insert what it polled.
func (in *Ingester) leaseLeft() time.Duration {
	if in.lease <= 0 {
		return time.Duration(1<<63 - 1)
	}
	return in.lease - time.Since(in.polledAt)
}

// fencedCommit tells a commit Kafka refuses because the member is no
// longer the partition's owner in the group's current generation.
func fencedCommit(err error) bool {
	for _, e := range []error{kerr.IllegalGeneration, kerr.UnknownMemberID, kerr.RebalanceInProgress, kerr.FencedInstanceID, kerr.StaleMemberEpoch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// insertOrSplit inserts msgs' rows (input, rows of them) with tok. On an
// error that is about the rows (insert_errors.go) it splits msgs in two,
// each half decoded again and inserted under a token of its own, named
// after the batch's and the half's offsets, down to single messages,
// which go to the dead-letter topic. The halves are the same however
// often the batch is re-formed (after a crash, from its intent), so every
// token names the same rows each time and ClickHouse drops a repeat.
func (in *Ingester) insertOrSplit(ctx context.Context, tp topicPartition, b *partBatch, it intent, msgs []Message, input proto.Input, rows int, tok string) error {
	table := in.table(tp.topic)
	var start time.Time
	err := in.retry(ctx, tp, it, stepInsert, func() error {
		opts := []store.Option{store.WithSetting("distributed_foreground_insert", "1")}
		t := tok
		if in.cfg.NoDedup {
			// A token never used before: without one, ClickHouse would
			// still drop a block whose hash it has seen (insert_deduplicate
			// = 0 does not stop that on a non-replicated table).
			t = uniqueToken()
		}
		opts = append(opts, store.WithSetting("insert_deduplication_token", t))
		start = time.Now()
		b.tries++
		return in.st.Insert(ctx, table, input, opts...)
	})
	if err == nil {
		in.m.insertSecs.WithLabelValues(table).Observe(time.Since(start).Seconds())
		in.afterInsert()
		b.inserted += rows
		return nil
	}
	reason, permanent := insertFailure(err)
	if !permanent {
		return err
	}
	if len(msgs) == 1 {
		in.m.refused.WithLabelValues(table, reason).Add(float64(rows))
		b.dead = append(b.dead, DeadLetter{Message: msgs[0], Reason: reason, Detail: "ClickHouse refused its rows: " + err.Error()})
		return nil
	}
	in.m.splits.WithLabelValues(table).Inc()
	b.split = true
	mid := len(msgs) / 2
	for _, half := range [][]Message{msgs[:mid], msgs[mid:]} {
		input, rows := in.decodeAgain(tp, b, half)
		if rows == 0 {
			continue
		}
		sub := tok + "/split/" + strconv.FormatInt(half[0].Offset, 10) + "-" + strconv.FormatInt(half[len(half)-1].Offset, 10)
		if err := in.insertOrSplit(ctx, tp, b, it, half, input, rows, sub); err != nil {
			return err
		}
	}
	return nil
}

// decodeAgain builds msgs' rows in a scratch batch, with b's window. They
// decoded once already, so they decode again. The block is valid until
// the next call.
func (in *Ingester) decodeAgain(tp topicPartition, b *partBatch, msgs []Message) (proto.Input, int) {
	return in.decodeWithin(tp, b.window, msgs)
}

// decodeWithin builds msgs' rows within w in a scratch batch.
func (in *Ingester) decodeWithin(tp topicPartition, w timeWindow, msgs []Message) (proto.Input, int) {
	if tp.topic == in.cfg.MetricsTopic {
		c := in.scratchCounters
		c.Reset()
		c.SetWindow(w)
		for _, m := range msgs {
			c.AppendMetrics(m.Value)
		}
		return c.Input(), c.Rows()
	}
	r := in.scratchSpans
	r.Reset()
	r.SetWindow(w)
	for _, m := range msgs {
		r.AppendTraces(m.Value)
	}
	return r.Input(), r.Rows()
}

// committed counts b's rows and empties it for the partition's next
// batch; a partition that was held resumes right after b.
func (in *Ingester) committed(tp topicPartition, b *partBatch) {
	table := in.table(tp.topic)
	in.m.rows.WithLabelValues(table).Add(float64(b.inserted))
	in.own.rows[table] += int64(b.inserted)
	in.m.batchRows.WithLabelValues(table).Observe(float64(b.inserted))
	if !b.retryAt.IsZero() {
		in.src.Release(tp.topic, tp.partition, b.last+1)
		in.stale[tp] = true
		in.health.held(tp, nil)
		in.m.held.Dec()
	}
	in.reset(b)
}

func (in *Ingester) reset(b *partBatch) {
	b.spans.Reset()
	b.counters.Reset()
	clear(b.kept)
	clear(b.dead)
	b.kept, b.dead = b.kept[:0], b.dead[:0]
	b.msgs, b.bytes, b.cutAt, b.inserted = 0, 0, -1, 0
	b.reformed, b.tries, b.split = false, 0, false
	b.step, b.retryAt, b.wait = stepOpen, time.Time{}, 0
}

// abandon drops b after the member was fenced: nothing more of it is
// inserted or committed. The partition is rewound to b's first offset and
// its intent read again, so that if the member still owns it, it
// re-forms the batch exactly (intent.go); if not, the owner does.
func (in *Ingester) abandon(ctx context.Context, tp topicPartition, b *partBatch) {
	in.m.fenced.Inc()
	in.log.Warn("ingest: lease on the partition ran out mid-batch; not inserting it, the partition's owner re-forms it from its intent",
		"topic", tp.topic, "partition", tp.partition, "offsets", strconv.FormatInt(b.first, 10)+"-"+strconv.FormatInt(b.last, 10), "lease", in.lease)
	if !b.retryAt.IsZero() {
		in.health.held(tp, nil)
		in.m.held.Dec()
	}
	delete(in.parts, tp)
	delete(in.pending, tp)
	in.stale[tp] = true
	in.src.Release(tp.topic, tp.partition, b.first)
	in.assigned(ctx, map[string][]int32{tp.topic: {tp.partition}})
}

// hold pauses tp while its dead letters cannot be written, and schedules
// the next try.
func (in *Ingester) hold(tp topicPartition, b *partBatch) {
	if b.retryAt.IsZero() {
		in.src.Hold(tp.topic, tp.partition)
		in.m.held.Inc()
	}
	b.wait = backoff(b.wait)
	b.retryAt = in.cfg.Clock().Add(b.wait)
	in.stale[tp] = true
}
