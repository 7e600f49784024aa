package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/kafkasec"
	"github.com/spikehunt/spikehunt/pipelines/services/ingest"
)

// MemorySink produces into the ingest's in-process source, the embedded
// stand-in for Kafka. It holds the simulation back while more than MaxLag
// messages wait for the ingester, so a fleet of any length runs in bounded
// memory.
type MemorySink struct {
	Source       *ingest.MemorySource
	SpansTopic   string // default otlp_spans
	MetricsTopic string // default otlp_metrics
	MaxLag       int64  // default 2,000 messages
}

func (m *MemorySink) Send(ctx context.Context, sig Signal, host string, msg []byte) error {
	limit := m.MaxLag
	if limit == 0 {
		limit = 2000
	}
	for m.Source.Lag() > limit {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	m.Source.Produce(topicOf(sig, m.SpansTopic, m.MetricsTopic), []byte(host), msg)
	return nil
}

func topicOf(sig Signal, spans, metrics string) string {
	if sig == Spans {
		if spans == "" {
			return ingest.DefaultSpansTopic
		}
		return spans
	}
	if metrics == "" {
		return ingest.DefaultMetricsTopic
	}
	return metrics
}

// KafkaSink produces to a Kafka cluster as the agents do: idempotent,
// acks=all, LZ4, keyed by host.name. Close flushes.
type KafkaSink struct {
	cl                     *kgo.Client
	spansTopic, metricsTop string
	failed                 chan error
}

// NewKafkaSink connects to brokers with sec's TLS and SASL (the zero
// Config: plaintext); empty topics take the defaults. A secured
// connection is checked at once: brokers that refuse it (a wrong password
// or CA) are an error wrapping kafkasec.ErrRefused, not a simulation that
// waits for ever on its first flush.
func NewKafkaSink(ctx context.Context, brokers []string, spansTopic, metricsTopic string, sec kafkasec.Config) (*KafkaSink, error) {
	secOpts, err := sec.Options()
	if err != nil {
		return nil, fmt.Errorf("sim: kafka: %w", err)
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ProducerBatchCompression(kgo.Lz4Compression()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(20 * time.Millisecond), kgo.AllowAutoTopicCreation(),
		kgo.MaxBufferedRecords(20_000)}, secOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("sim: kafka client: %w", err)
	}
	if sec.Enabled() {
		checkCtx, cancel := context.WithTimeout(ctx, kafkaCheckTimeout)
		err := kafkasec.Check(checkCtx, cl, sec)
		cancel()
		// Brokers that do not answer yet are waited for by the producer,
		// as with a plaintext connection.
		if errors.Is(err, kafkasec.ErrRefused) {
			cl.Close()
			return nil, fmt.Errorf("sim: kafka (%s): %w", sec, err)
		}
	}
	return &KafkaSink{cl: cl, spansTopic: spansTopic, metricsTop: metricsTopic, failed: make(chan error, 1)}, nil
}

// kafkaCheckTimeout bounds the start-up check of a secured connection.
const kafkaCheckTimeout = 15 * time.Second

func (k *KafkaSink) Send(ctx context.Context, sig Signal, host string, msg []byte) error {
	select {
	case err := <-k.failed:
		return err
	default:
	}
	rec := &kgo.Record{Topic: topicOf(sig, k.spansTopic, k.metricsTop), Key: []byte(host), Value: msg}
	// A record outlives its Send: Run's context ends when Run returns,
	// before Close flushes what is still buffered, and a record whose
	// context has ended is failed instead of delivered. Close's context
	// bounds the flush.
	k.cl.Produce(context.WithoutCancel(ctx), rec, func(_ *kgo.Record, err error) {
		if err != nil {
			select {
			case k.failed <- fmt.Errorf("sim: produce to %s: %w", rec.Topic, err):
			default:
			}
		}
	})
	return nil
}

// Close waits for every record to be acknowledged and closes the client.
func (k *KafkaSink) Close(ctx context.Context) error {
	err := k.cl.Flush(ctx)
	k.cl.Close()
	select {
	case e := <-k.failed:
		return e
	default:
	}
	if err != nil {
		return fmt.Errorf("sim: flush: %w", err)
	}
	return nil
}
