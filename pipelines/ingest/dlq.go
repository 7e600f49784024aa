package ingest

import (
	"context"
	"errors"
)

// deadLetter hands m to the source's dead-letter store with why it could
// not be ingested, and counts it.
func (in *Ingester) deadLetter(ctx context.Context, m Message, cause error) error {
	reason, detail := "decode", cause.Error()
	var de *DecodeError
	if errors.As(cause, &de) {
		reason, detail = de.Reason, de.Detail
	}
	in.m.deadLetters.WithLabelValues(reason).Inc()
	in.log.Warn("ingest: message dead-lettered", "topic", m.Topic, "partition", m.Partition, "offset", m.Offset, "reason", reason, "detail", detail)
	if err := in.src.DeadLetter(ctx, m, reason, detail); err != nil {
		return err
	}
	in.own.deadLettered(m.Topic, reason)
	return nil
}
