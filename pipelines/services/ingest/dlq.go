package ingest

import (
	"context"
	"fmt"
	"strconv"
)

// writeDeadLetters writes b's dead letters to the source's dead-letter
// store, in order, and counts each once written. It stops at the first
// the store refuses, leaves it and the rest in b, marks the partition
// held in /healthz, and returns false.
func (in *Ingester) writeDeadLetters(ctx context.Context, tp topicPartition, b *partBatch) bool {
	for len(b.dead) > 0 {
		d := b.dead[0]
		dctx, cancel := context.WithTimeout(ctx, in.cfg.DeadLetterTimeout)
		err := in.src.DeadLetter(dctx, d)
		cancel()
		if err != nil {
			in.m.retries.WithLabelValues(stepDeadLetters.String()).Inc()
			in.log.Warn("ingest: dead-letter topic refused a message; holding its partition and retrying", "topic", tp.topic, "partition", tp.partition,
				"offset", d.Offset, "dlq", in.cfg.DLQTopic, "retry_in", backoff(b.wait), "err", err)
			in.health.held(tp, fmt.Errorf("dead-letter topic %s: %w", in.cfg.DLQTopic, err))
			return false
		}
		in.m.deadLetters.WithLabelValues(d.Reason).Inc()
		in.log.Warn("ingest: message dead-lettered", "topic", d.Topic, "partition", d.Partition, "offset", d.Offset, "reason", d.Reason, "detail", d.Detail)
		in.own.deadLettered(d.Topic, d.Reason)
		b.dead[0] = DeadLetter{}
		b.dead = b.dead[1:]
	}
	return true
}

// refusedDetail says how much of a message the time window refused.
func refusedDetail(refused, inserted int, w timeWindow) string {
	return strconv.Itoa(refused) + " rows outside the accepted window " + w.String() +
		" refused, its other " + strconv.Itoa(inserted) + " rows ingested: is the clock of the app or host that made them set? (ingest --accept.max-age, --accept.max-ahead)"
}
