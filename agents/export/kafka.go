package export

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/kafkasec"
)

// KafkaConfig configures the Kafka sink.
type KafkaConfig struct {
	Brokers       []string `yaml:"brokers"`
	TracesTopic   string   `yaml:"traces_topic"`  // default otlp_spans, the Collector's default
	MetricsTopic  string   `yaml:"metrics_topic"` // default otlp_metrics
	Compression   string   `yaml:"compression"`   // lz4 (default), zstd, none
	BufferedBytes int      `yaml:"buffered_bytes"`
	// Security is TLS and SASL (keys tls and sasl beside brokers).
	Security kafkasec.Config `yaml:",inline"`
	// Key partitions the records; the agent sets it to host.name so that a
	// host's data stays in one partition, in order.
	Key string `yaml:"-"`
}

func (c *KafkaConfig) defaults() {
	if c.TracesTopic == "" {
		c.TracesTopic = "otlp_spans"
	}
	if c.MetricsTopic == "" {
		c.MetricsTopic = "otlp_metrics"
	}
	if c.Compression == "" {
		c.Compression = "lz4"
	}
	if c.BufferedBytes == 0 {
		c.BufferedBytes = 8 << 20
	}
}

// dialTimeout is franz-go's default, kept with our dialer.
const dialTimeout = 10 * time.Second

// KafkaSink produces to Kafka with an idempotent producer and acks from
// every in-sync replica. Records are never failed by time or retry count:
// during an outage they wait in the producer's buffer, bounded by
// BufferedBytes, and Send answers ErrFull beyond it, so that nothing is
// produced twice by a retry of ours.
type KafkaSink struct {
	cl  *kgo.Client
	cfg KafkaConfig
}

// kafkaMetadataMinAge is the least time between two metadata requests of
// the sink's client.
const kafkaMetadataMinAge = time.Second

// NewKafkaSink connects lazily: the brokers may be down at start.
func NewKafkaSink(cfg KafkaConfig, opts ...kgo.Opt) (*KafkaSink, error) {
	cfg.defaults()
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("kafka: no brokers configured")
	}
	// TLS runs over the raw-I/O connection of dialBroker.
	extra, err := cfg.Security.OptionsWithDialer(dialBroker)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	var codec kgo.CompressionCodec
	switch cfg.Compression {
	case "lz4":
		codec = kgo.Lz4Compression()
		extra = append(extra, kgo.WithCompressor(newLZ4Compressor()))
	case "zstd":
		codec = kgo.ZstdCompression()
	case "none":
		codec = kgo.NoCompression()
	default:
		return nil, fmt.Errorf("kafka: compression %q: want lz4, zstd or none", cfg.Compression)
	}
	base := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(codec),
		// Twice the sink's own bound: Send refuses first, this is a backstop.
		kgo.MaxBufferedBytes(2 * cfg.BufferedBytes),
		// franz-go's defaults retry a record without limit and with no
		// delivery timeout: records wait out an outage and are never
		// produced twice by a retry of ours.
		kgo.AllowAutoTopicCreation(),
		// Each record is a whole export request, batched by the exporter:
		// franz-go's default 10 ms linger would only add a timer wake-up.
		kgo.ProducerLinger(0),
		// When a partition's leader is lost, records wait until the client
		// learns the new one from the brokers' metadata, which franz-go asks
		// for at most every 5 s by default: 2.4-4.4 s of a broker's loss
		// were that wait alone (docs/kafka.md). Once a second costs a fleet
		// one small request per agent per second, and only while a
		// partition is in error.
		kgo.MetadataMinAge(kafkaMetadataMinAge),
	}
	cl, err := kgo.NewClient(append(append(base, extra...), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return &KafkaSink{cl: cl, cfg: cfg}, nil
}

// Check connects to the brokers once and says whether they refuse this
// client (kafkasec.Check): an error matching kafkasec.ErrRefused is a
// configuration to fix, any other is a broker down or unreachable.
func (k *KafkaSink) Check(ctx context.Context) error {
	return kafkasec.Check(ctx, k.cl, k.cfg.Security)
}

// Name implements Sink.
func (k *KafkaSink) Name() string { return "kafka" }

// Send implements Sink.
func (k *KafkaSink) Send(kind Kind, payload []byte, done func(error)) error {
	topic := k.cfg.TracesTopic
	if kind == KindMetrics {
		topic = k.cfg.MetricsTopic
	}
	// The producer reports a full buffer asynchronously, after later
	// records may have been taken: check first, so that order holds. Send
	// is called from one goroutine; the buffer only shrinks meanwhile.
	// An empty buffer takes any record, so that one larger than the bound
	// still goes (or fails with MessageTooLarge) instead of waiting forever.
	if b := k.cl.BufferedProduceBytes(); b > 0 && b+int64(len(payload)) > int64(k.cfg.BufferedBytes) {
		return ErrFull
	}
	r := &kgo.Record{Topic: topic, Key: []byte(k.cfg.Key), Value: payload}
	k.cl.TryProduce(context.Background(), r, func(_ *kgo.Record, err error) {
		if errors.Is(err, kgo.ErrClientClosed) {
			err = ErrSinkClosed
		}
		done(err)
	})
	return nil
}

// Close waits up to 5 s for buffered records, then closes the client.
// Records still buffered then (the broker is down) are not lost: they are
// in the spool, unacknowledged, and are sent again at the next start.
func (k *KafkaSink) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := k.cl.Flush(ctx)
	left := k.cl.BufferedProduceRecords()
	k.cl.Close()
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("kafka: %d records not delivered at shutdown; they stay in the spool and go at the next start", left)
	}
	return err
}
