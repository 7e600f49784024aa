package ingest

import (
	"errors"
	"fmt"
	"time"

	"github.com/spikehunt/spikehunt/kafkasec"
)

// Config configures an Ingester.
type Config struct {
	Brokers      []string
	Group        string // consumer group (default spikehunt-ingest)
	SpansTopic   string // default otlp_spans → requests
	MetricsTopic string // default otlp_metrics → counters
	DLQTopic     string // default spikehunt.dlq; messages that cannot be ingested, with the reason in headers
	// A partition's batch is inserted when it holds MaxRows rows or
	// MaxBytes of messages, or MaxDelay after its first message (defaults
	// 300,000 rows, 32 MiB, 1 s).
	//
	// Every insert makes a part the engine writes and later merges, at a
	// cost per insert that is large next to its cost per row: 100,000-row
	// inserts cost it about twice as much per row as 300,000-row ones.
	// Hence CatchUpDelay: while the ingester is behind on a partition
	// (more of it is already fetched or waiting in Kafka), its batch stays
	// open until it is full or CatchUpDelay old (default 10 s). Closing it
	// at MaxDelay would not make those rows any fresher, only the inserts
	// smaller when throughput matters most; once caught up, MaxDelay is
	// what bounds how late rows are.
	MaxRows      int
	MaxBytes     int
	MaxDelay     time.Duration
	CatchUpDelay time.Duration
	// InstanceID makes this member static (KIP-345): restarted with the
	// same id, it takes its partitions back at once instead of after the
	// session timeout. Empty: a dynamic member.
	InstanceID string
	// SessionTimeout is how long the group waits for a silent member
	// before giving its partitions away (default 45 s, Kafka's).
	SessionTimeout time.Duration
	// Instance names this ingester in the host column of the counters
	// rows it writes about itself (self_counters.go): rows stored, lag,
	// dead letters. Default: the host name (DefaultInstance).
	Instance string
	// ReportEvery is how often it writes them (default 10 s, at least
	// 100 ms); Run writes them once more when it ends.
	ReportEvery time.Duration
	// Security is TLS and SASL for the consumer and the dead-letter
	// producer.
	Security kafkasec.Config
	// NoDedup inserts without deduplication tokens. Only for the control
	// run that proves the crash test can fail: it loses exactly-once.
	NoDedup bool
}

// Defaults.
const (
	DefaultGroup        = "spikehunt-ingest"
	DefaultSpansTopic   = "otlp_spans"
	DefaultMetricsTopic = "otlp_metrics"
	DefaultDLQTopic     = "spikehunt.dlq"
)

// Validate fills defaults and checks bounds.
func (c *Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("ingest: no Kafka brokers: set --kafka.brokers")
	}
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&c.Group, DefaultGroup)
	def(&c.SpansTopic, DefaultSpansTopic)
	def(&c.MetricsTopic, DefaultMetricsTopic)
	def(&c.DLQTopic, DefaultDLQTopic)
	if c.Instance == "" {
		c.Instance = DefaultInstance()
	}
	if c.ReportEvery == 0 {
		c.ReportEvery = DefaultReportEvery
	}
	if c.MaxRows == 0 {
		c.MaxRows = 300_000
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 32 << 20
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = time.Second
	}
	if c.CatchUpDelay == 0 {
		c.CatchUpDelay = max(10*time.Second, c.MaxDelay)
	}
	switch {
	case c.MaxRows < 1:
		return fmt.Errorf("ingest: max rows %d, want ≥ 1", c.MaxRows)
	case c.MaxBytes < 1<<10:
		return fmt.Errorf("ingest: max bytes %d, want ≥ 1 KiB", c.MaxBytes)
	case c.MaxDelay < time.Millisecond:
		return fmt.Errorf("ingest: max delay %s, want ≥ 1ms", c.MaxDelay)
	case c.CatchUpDelay < c.MaxDelay:
		return fmt.Errorf("ingest: catch-up delay %s below the max delay %s: a batch behind would close sooner than one caught up", c.CatchUpDelay, c.MaxDelay)
	case c.ReportEvery < 100*time.Millisecond:
		return fmt.Errorf("ingest: report every %s, want ≥ 100ms", c.ReportEvery)
	case c.SpansTopic == c.MetricsTopic:
		return fmt.Errorf("ingest: spans and metrics share topic %q: a message's signal is known by its topic", c.SpansTopic)
	}
	return c.Security.Validate()
}
