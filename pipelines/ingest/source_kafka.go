package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/spikehunt/spikehunt/kafkasec"
)

// KafkaSource consumes cfg's topics as a member of cfg.Group.
type KafkaSource struct {
	cfg Config
	cl  *kgo.Client
	log *slog.Logger
}

func newKafkaSource(cfg Config, owner partitionOwner, log *slog.Logger) (*KafkaSource, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.SpansTopic, cfg.MetricsTopic),
		kgo.DisableAutoCommit(),
		// Rebalances wait for Between, which the ingester calls only
		// between polls, after closing what it had to: a partition never
		// changes owner mid-handshake.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) { owner.assigned(ctx, m) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { owner.dropped(m) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { owner.dropped(m) }),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	}
	sec, err := cfg.Security.Options()
	if err != nil {
		return nil, fmt.Errorf("ingest: kafka: %w", err)
	}
	opts = append(append(opts, sec...), kafkasec.RefusalLog(log, cfg.Security))
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	if cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(cfg.SessionTimeout), kgo.HeartbeatInterval(cfg.SessionTimeout/10))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("ingest: kafka: %w", err)
	}
	if err := checkSecurity(cl, cfg.Security, log); err != nil {
		cl.Close()
		return nil, err
	}
	return &KafkaSource{cfg: cfg, cl: cl, log: log}, nil
}

func (s *KafkaSource) Poll(ctx context.Context) ([]Message, error) {
	fetches := s.cl.PollRecords(ctx, 10_000)
	if fetches.IsClientClosed() {
		return nil, errors.New("ingest: kafka client closed")
	}
	fetches.EachError(func(topic string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			s.log.Warn("ingest: fetch", "topic", topic, "partition", p, "err", err)
		}
	})
	var msgs []Message
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		for _, r := range p.Records {
			msgs = append(msgs, Message{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
				Lag: p.HighWatermark - r.Offset - 1})
		}
	})
	return msgs, nil
}

func (s *KafkaSource) Commit(ctx context.Context, topic string, partition int32, next int64) error {
	offsets := map[string]map[int32]kgo.EpochOffset{topic: {partition: {Epoch: -1, Offset: next}}}
	var cerr error
	s.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
					cerr = fmt.Errorf("commit %s/%d: %w", t.Topic, p.Partition, e)
				}
			}
		}
	})
	return cerr
}

// DeadLetter copies m to the dead-letter topic with headers
// spikehunt.dlq.reason, spikehunt.dlq.detail and the source topic,
// partition and offset. A retried batch may dead-letter a message twice;
// the source coordinates tell the copies apart.
func (s *KafkaSource) DeadLetter(ctx context.Context, m Message, reason, detail string) error {
	rec := &kgo.Record{Topic: s.cfg.DLQTopic, Key: m.Key, Value: m.Value, Headers: []kgo.RecordHeader{
		{Key: "spikehunt.dlq.reason", Value: []byte(reason)},
		{Key: "spikehunt.dlq.detail", Value: []byte(detail)},
		{Key: "spikehunt.source.topic", Value: []byte(m.Topic)},
		{Key: "spikehunt.source.partition", Value: []byte(strconv.Itoa(int(m.Partition)))},
		{Key: "spikehunt.source.offset", Value: []byte(strconv.FormatInt(m.Offset, 10))},
	}}
	return s.cl.ProduceSync(ctx, rec).FirstErr()
}

func (s *KafkaSource) Between() { s.cl.AllowRebalance() }

// Close leaves the group. A poll that returned records blocks rebalances
// until AllowRebalance, and leaving is one: without it Close would wait
// forever when Run stops in the middle of a poll's work.
func (s *KafkaSource) Close() {
	s.cl.AllowRebalance()
	s.cl.Close()
}
