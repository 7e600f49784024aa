package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/pipelines/ingest"
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

// NewKafkaSink connects to brokers; empty topics take the defaults.
func NewKafkaSink(brokers []string, spansTopic, metricsTopic string) (*KafkaSink, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchCompression(kgo.Lz4Compression()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(20*time.Millisecond), kgo.AllowAutoTopicCreation(),
		kgo.MaxBufferedRecords(20_000))
	if err != nil {
		return nil, fmt.Errorf("sim: kafka client: %w", err)
	}
	return &KafkaSink{cl: cl, spansTopic: spansTopic, metricsTop: metricsTopic, failed: make(chan error, 1)}, nil
}

func (k *KafkaSink) Send(ctx context.Context, sig Signal, host string, msg []byte) error {
	select {
	case err := <-k.failed:
		return err
	default:
	}
	rec := &kgo.Record{Topic: topicOf(sig, k.spansTopic, k.metricsTop), Key: []byte(host), Value: msg}
	k.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
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
