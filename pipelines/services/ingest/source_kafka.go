package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/spikehunt/spikehunt/kafkasec"
)

// KafkaSource consumes cfg's topics as a member of cfg.Group.
//
// A source topic that does not exist at Prepare does not stop the
// others: it is paused (kgo keeps a topic pause for partitions it does
// not know yet), a goroutine of the source looks for it every
// TopicWatchEvery, and once it exists Appeared hands it to the ingester,
// which checks its deduplication window and calls Start. The group's
// leader rejoins by itself when a subscribed topic gets partitions, so
// its partitions are assigned without a restart. Close stops the
// goroutine.
type KafkaSource struct {
	cfg Config
	cl  *kgo.Client
	log *slog.Logger

	mu       sync.Mutex
	appeared map[string]int32 // found by watch, not yet taken by Appeared
	stop     context.CancelFunc
	watching chan struct{} // closed when watch returns; nil: no watch
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
		// A lost leader's partitions are fetched again once the client
		// learns the new leader from the brokers' metadata; franz-go's
		// default asks at most every 5 s (docs/kafka.md).
		kgo.MetadataMinAge(time.Second),
	}
	sec, err := cfg.Security.Options()
	if err != nil {
		return nil, fmt.Errorf("ingest: kafka: %w", err)
	}
	opts = append(append(opts, sec...), kafkasec.RefusalLog(log, cfg.Security))
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	opts = append(opts, kgo.SessionTimeout(cfg.SessionTimeout), kgo.HeartbeatInterval(cfg.SessionTimeout/10),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout))
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

// DeadLetter copies d's message to the dead-letter topic with headers
// spikehunt.dlq.reason, spikehunt.dlq.detail, spikehunt.dlq.partial
// ("true" when some of its rows were ingested) and the source topic,
// partition and offset. A retried batch may dead-letter a message twice;
// the source coordinates tell the copies apart. A message too large for
// the dead-letter topic is written without its value, with the header
// spikehunt.dlq.value_dropped = its size.
func (s *KafkaSource) DeadLetter(ctx context.Context, d DeadLetter) error {
	rec := &kgo.Record{Topic: s.cfg.DLQTopic, Key: d.Key, Value: d.Value, Headers: []kgo.RecordHeader{
		{Key: "spikehunt.dlq.reason", Value: []byte(d.Reason)},
		{Key: "spikehunt.dlq.detail", Value: []byte(d.Detail)},
		{Key: "spikehunt.dlq.partial", Value: []byte(strconv.FormatBool(d.Partial))},
		{Key: "spikehunt.source.topic", Value: []byte(d.Topic)},
		{Key: "spikehunt.source.partition", Value: []byte(strconv.Itoa(int(d.Partition)))},
		{Key: "spikehunt.source.offset", Value: []byte(strconv.FormatInt(d.Offset, 10))},
	}}
	err := s.cl.ProduceSync(ctx, rec).FirstErr()
	if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) {
		// The source topic took a message larger than the dead-letter
		// topic takes: retrying would hold the partition for good. Its
		// coordinates say where to read it while the source keeps it.
		s.log.Warn("ingest: dead letter too large for the dead-letter topic; writing it without its value", "topic", d.Topic,
			"partition", d.Partition, "offset", d.Offset, "bytes", len(d.Value), "err", err)
		rec.Value = nil
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "spikehunt.dlq.value_dropped", Value: []byte(strconv.Itoa(len(d.Value)))})
		err = s.cl.ProduceSync(ctx, rec).FirstErr()
	}
	return err
}

// Prepare creates the dead-letter topic if it does not exist, and reads
// the source topics' partition counts. Kafka out of reach is waited for
// (logged, with backoff); being refused the dead-letter topic is an error
// that says how to create it. A source topic that does not exist is left
// out of the answer, paused, and watched for (see KafkaSource): the
// topics that exist are consumed meanwhile.
func (s *KafkaSource) Prepare(ctx context.Context) (map[string]int32, error) {
	adm := kadm.NewClient(s.cl)
	for wait := time.Duration(0); ; wait = backoff(wait) {
		parts, missing, err := s.prepare(ctx, adm)
		if errors.Is(err, errDLQRefused) {
			return nil, err
		}
		if err == nil {
			if len(missing) > 0 {
				s.log.Warn("ingest: source topics do not exist yet; consuming the others and watching for them",
					"missing", missing, "every", s.cfg.TopicWatchEvery)
				s.cl.PauseFetchTopics(missing...)
				wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
				s.stop, s.watching, s.appeared = stop, make(chan struct{}), map[string]int32{}
				go s.watch(wctx, adm, missing)
			}
			return parts, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.log.Warn("ingest: kafka topics not ready; retrying", "err", err)
		sleep(ctx, backoff(wait))
	}
}

// watch looks for the missing topics every TopicWatchEvery until they
// all exist or ctx ends, and records each that appears for Appeared.
func (s *KafkaSource) watch(ctx context.Context, adm *kadm.Client, missing []string) {
	defer close(s.watching)
	for len(missing) > 0 {
		sleep(ctx, s.cfg.TopicWatchEvery)
		if ctx.Err() != nil {
			return
		}
		lctx, cancel := context.WithTimeout(ctx, s.cfg.TopicWatchEvery+5*time.Second)
		td, err := adm.ListTopics(lctx, missing...)
		cancel()
		if err != nil {
			s.log.Warn("ingest: look for missing source topics", "topics", missing, "err", err)
			continue
		}
		var still []string
		for _, t := range missing {
			if d := td[t]; d.Err == nil && len(d.Partitions) > 0 {
				s.mu.Lock()
				s.appeared[t] = int32(len(d.Partitions))
				s.mu.Unlock()
				continue
			}
			still = append(still, t)
		}
		missing = still
	}
}

// Appeared returns the topics watch found since the last call.
func (s *KafkaSource) Appeared() map[string]int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.appeared) == 0 {
		return nil
	}
	found := s.appeared
	s.appeared = map[string]int32{}
	return found
}

// Start resumes a topic paused at Prepare and asks for metadata at once,
// so that the group's leader sees its partitions without waiting for the
// next refresh.
func (s *KafkaSource) Start(topic string) {
	s.cl.ResumeFetchTopics(topic)
	s.cl.ForceMetadataRefresh()
}

// errDLQRefused: the dead-letter topic does not exist and Kafka will not
// let the ingester create it.
var errDLQRefused = errors.New("ingest: the dead-letter topic cannot be created")

// prepare returns the partitions of the source topics that exist and
// the names of those that do not.
func (s *KafkaSource) prepare(ctx context.Context, adm *kadm.Client) (parts map[string]int32, missing []string, err error) {
	topics := []string{s.cfg.SpansTopic, s.cfg.MetricsTopic, s.cfg.DLQTopic}
	td, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("list topics: %w", err)
	}
	// The dead-letter topic gets the spans topic's replication when that
	// topic exists (it holds the same messages), else the brokers' default.
	replication := int16(-1)
	if d := td[s.cfg.SpansTopic]; d.Err == nil && len(d.Partitions) > 0 {
		replication = int16(len(d.Partitions.Sorted()[0].Replicas))
	}
	howTo := dlqHowTo(s.cfg, replication)
	if d := td[s.cfg.DLQTopic]; d.Err != nil {
		if !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			if authorization(d.Err) {
				return nil, nil, fmt.Errorf("%w: describe %s: %v: %s", errDLQRefused, s.cfg.DLQTopic, d.Err, howTo)
			}
			return nil, nil, fmt.Errorf("describe %s: %w", s.cfg.DLQTopic, d.Err)
		}
		resp, err := adm.CreateTopic(ctx, s.cfg.DLQPartitions, replication, nil, s.cfg.DLQTopic)
		if err == nil {
			err = resp.Err
		}
		switch {
		case err == nil:
			s.log.Info("ingest: created the dead-letter topic", "topic", s.cfg.DLQTopic, "partitions", s.cfg.DLQPartitions)
		case errors.Is(err, kerr.TopicAlreadyExists):
		case authorization(err):
			return nil, nil, fmt.Errorf("%w: %s does not exist and creating it was refused (%v): %s", errDLQRefused, s.cfg.DLQTopic, err, howTo)
		default:
			return nil, nil, fmt.Errorf("create the dead-letter topic %s: %w", s.cfg.DLQTopic, err)
		}
	}
	parts = map[string]int32{}
	for _, t := range topics[:2] {
		d := td[t]
		switch {
		case errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			missing = append(missing, t)
		case d.Err != nil:
			return nil, nil, fmt.Errorf("source topic %s: %w", t, d.Err)
		default:
			parts[t] = int32(len(d.Partitions))
		}
	}
	return parts, missing, nil
}

// dlqHowTo says how to create the dead-letter topic by hand: the command
// with the partitions and replication the ingester would have asked for.
func dlqHowTo(cfg Config, replication int16) string {
	rf := "<as your other topics; omit it for the brokers' default.replication.factor>"
	if replication > 0 {
		rf = strconv.Itoa(int(replication))
	}
	return fmt.Sprintf("create it with `kafka-topics.sh --bootstrap-server %s --create --topic %s --partitions %d --replication-factor %s` "+
		"(add --command-config with this client's TLS/SASL settings), or grant this client CREATE on the topic or the cluster",
		strings.Join(cfg.Brokers, ","), cfg.DLQTopic, cfg.DLQPartitions, rf)
}

func authorization(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed)
}

// Hold pauses fetching the partition; kgo drops what it had buffered of it.
func (s *KafkaSource) Hold(topic string, partition int32) {
	s.cl.PauseFetchPartitions(map[string][]int32{topic: {partition}})
}

// Release rewinds the partition to next, if it is still assigned, and
// resumes fetching it.
func (s *KafkaSource) Release(topic string, partition int32, next int64) {
	if next >= 0 {
		s.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {partition: {Epoch: -1, Offset: next}}})
	}
	s.cl.ResumeFetchPartitions(map[string][]int32{topic: {partition}})
}

func (s *KafkaSource) Between() { s.cl.AllowRebalance() }

// Close leaves the group. A poll that returned records blocks rebalances
// until AllowRebalance, and leaving is one: without it Close would wait
// forever when Run stops in the middle of a poll's work.
func (s *KafkaSource) Close() {
	if s.watching != nil {
		s.stop()
		<-s.watching
	}
	s.cl.AllowRebalance()
	s.cl.Close()
}
