package alerts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/internal/alertsig"
	"github.com/spikehunt/spikehunt/internal/defaults"
	"github.com/spikehunt/spikehunt/kafkasec"
)

// DefaultTopic is the alerts topic of docs/design.md §3.
const DefaultTopic = "spikehunt.alerts"

// KafkaConfig configures a KafkaSink.
type KafkaConfig struct {
	Brokers []string
	Topic   string // default spikehunt.alerts
	// SendTimeout bounds one Send, retries included. Default 30s.
	SendTimeout time.Duration
	// ClientID names the producer in broker logs. Default spikehunt-alerts.
	ClientID string
	// Signer signs each record (schema.md, "Signatures"); the operator
	// refuses unsigned records unless told to accept them. Nil sends
	// records unsigned: only for a topic nobody untrusted can write to.
	Signer *alertsig.Signer
	// Now is the signing time. Default time.Now.
	Now func() time.Time
	// Security is TLS and SASL.
	Security kafkasec.Config
}

// WithDefaults returns c with its zero fields set to their defaults; c
// itself is not changed.
func (c KafkaConfig) WithDefaults() KafkaConfig {
	defaults.Fill(&c.Topic, DefaultTopic)
	defaults.Fill(&c.SendTimeout, 30*time.Second)
	defaults.Fill(&c.ClientID, "spikehunt-alerts")
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate checks c as NewKafkaSink would run it, its zero fields taken as
// their defaults. It does not change c.
func (c KafkaConfig) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("alerts: kafka: no brokers: set --kafka.brokers")
	}
	c = c.WithDefaults()
	if c.SendTimeout < 100*time.Millisecond {
		return fmt.Errorf("alerts: kafka: send timeout %s, want ≥ 100ms", c.SendTimeout)
	}
	return c.Security.Validate()
}

// KafkaSink produces each alert as one record: key = service (so one
// service's alerts stay in order on one partition), value = the JSON
// document, headers schema and kind, and the signature headers when a
// Signer is configured. A resent alert is signed anew at each Send. The producer is idempotent with
// acks=all, so a retry inside the client never duplicates a record. Close
// it when done.
type KafkaSink struct {
	cfg KafkaConfig
	cl  *kgo.Client
}

// NewKafkaSink connects lazily: a broker that is down fails the first Send,
// not the constructor.
func NewKafkaSink(cfg KafkaConfig) (*KafkaSink, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sec, err := cfg.Security.Options()
	if err != nil {
		return nil, fmt.Errorf("alerts: kafka: %w", err)
	}
	cl, err := kgo.NewClient(append(sec,
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.ClientID(cfg.ClientID),
		// Idempotence is franz-go's default and requires acks=all; both
		// are spelled out because the exactly-once-per-send promise rests
		// on them.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(cfg.SendTimeout),
	)...)
	if err != nil {
		return nil, fmt.Errorf("alerts: kafka: %w", err)
	}
	return &KafkaSink{cfg: cfg, cl: cl}, nil
}

// Send produces the alerts and waits until the brokers acknowledged all of
// them.
func (k *KafkaSink) Send(ctx context.Context, alerts []alertdoc.Alert) error {
	recs := make([]*kgo.Record, 0, len(alerts))
	now := k.cfg.Now()
	for _, a := range alerts {
		v, err := json.Marshal(a)
		if err != nil {
			return fmt.Errorf("alerts: encode %s: %w", a.AlertID, err)
		}
		r := &kgo.Record{
			Topic: k.cfg.Topic, Key: []byte(a.Service), Value: v,
			Headers: []kgo.RecordHeader{{Key: "schema", Value: []byte(a.Schema)}, {Key: "kind", Value: []byte(a.Kind)}},
		}
		if k.cfg.Signer != nil {
			k.cfg.Signer.Sign(r, now)
		}
		recs = append(recs, r)
	}
	ctx, cancel := context.WithTimeout(ctx, k.cfg.SendTimeout)
	defer cancel()
	if err := k.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("%w: %s: create it with `kafka-topics.sh --bootstrap-server %s --create --topic %s` (or let the brokers auto-create topics): %w",
				ErrTopicMissing, k.cfg.Topic, strings.Join(k.cfg.Brokers, ","), k.cfg.Topic, err)
		}
		return fmt.Errorf("alerts: produce to %s: %w", k.cfg.Topic, k.explain(err))
	}
	return nil
}

// ErrTopicMissing: the alerts topic does not exist and the brokers do not
// create it for the producer. Send fails after a few metadata loads (the
// producer's unknown-topic retries) rather than at its timeout.
var ErrTopicMissing = errors.New("alerts: the alerts topic does not exist")

// Check connects to the brokers once and says whether they refuse this
// producer (kafkasec.Check): an error matching kafkasec.ErrRefused is a
// configuration to fix, any other is a broker down or unreachable.
func (k *KafkaSink) Check(ctx context.Context) error {
	return kafkasec.Check(ctx, k.cl, k.cfg.Security)
}

// explain replaces a send's timeout by the refusal behind it, if any: the
// producer retries a refused connection until the deadline and reports
// that, with the refusal as its last error at best.
func (k *KafkaSink) explain(err error) error {
	if !k.cfg.Security.Enabled() {
		return err
	}
	if e := kafkasec.Explain(err, k.cfg.Security); errors.Is(e, kafkasec.ErrRefused) {
		return e
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, kgo.ErrRecordTimeout) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if cerr := k.Check(ctx); errors.Is(cerr, kafkasec.ErrRefused) {
		return cerr
	}
	return err
}

// Close flushes nothing (Send is synchronous) and closes the client.
func (k *KafkaSink) Close() { k.cl.Close() }
