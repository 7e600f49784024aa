package ingest

import (
	"context"
	"errors"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type (
	kmsgOffsetCommitRequest  = kmsg.OffsetCommitRequest
	kmsgOffsetCommitResponse = kmsg.OffsetCommitResponse
)

func kerrErrorForCode(code int16) error { return kerr.ErrorForCode(code) }

// deadLetter copies r to the dead-letter topic with why it could not be
// ingested: headers spikehunt.dlq.reason, spikehunt.dlq.detail and the
// source topic, partition and offset. A retried batch may dead-letter a
// message twice; the source coordinates tell the copies apart.
func (in *Ingester) deadLetter(ctx context.Context, r *kgo.Record, cause error) error {
	reason, detail := "decode", cause.Error()
	var de *DecodeError
	if errors.As(cause, &de) {
		reason, detail = de.Reason, de.Detail
	}
	in.m.deadLetters.WithLabelValues(reason).Inc()
	in.log.Warn("ingest: message dead-lettered", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason, "detail", detail)
	rec := &kgo.Record{Topic: in.cfg.DLQTopic, Key: r.Key, Value: r.Value, Headers: []kgo.RecordHeader{
		{Key: "spikehunt.dlq.reason", Value: []byte(reason)},
		{Key: "spikehunt.dlq.detail", Value: []byte(detail)},
		{Key: "spikehunt.source.topic", Value: []byte(r.Topic)},
		{Key: "spikehunt.source.partition", Value: []byte(strconv.Itoa(int(r.Partition)))},
		{Key: "spikehunt.source.offset", Value: []byte(strconv.FormatInt(r.Offset, 10))},
	}}
	return in.cl.ProduceSync(ctx, rec).FirstErr()
}
