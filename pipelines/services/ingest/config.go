package ingest

import (
	"errors"
	"fmt"
	"time"

	"github.com/spikehunt/spikehunt/internal/defaults"
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
	// RebalanceTimeout is how long the group waits for a member to finish
	// its work when a rebalance begins (default 60 s, Kafka's). It bounds
	// the member's lease (see Lease): past it the group may have given the
	// partition away, so the member stops inserting.
	RebalanceTimeout time.Duration
	// Security is TLS and SASL for the consumer and the dead-letter
	// producer.
	Security kafkasec.Config
	// NoDedup inserts without deduplication tokens. Only for the control
	// run that proves the crash test can fail: it loses exactly-once.
	NoDedup bool

	// Rows whose time is more than MaxAge before now, or more than
	// MaxAhead after it, are not inserted: their message goes to the
	// dead-letter topic with reason "timestamp" (the rows of the message
	// inside the window are inserted; see window.go). MaxAge 0 is the
	// destination table's TTL, read at start (a row older than that is
	// dropped by the next merge anyway), cut to MaxAgeLimit; negative: no
	// bound back (ClickHouse then refuses a block spanning more than 100
	// days, and the batch is split to find the messages to dead-letter).
	// MaxAhead default 1 h; negative: no bound.
	MaxAge, MaxAhead time.Duration
	// Now is the clock the window is measured from (default time.Now);
	// a simulator replaying the past sets its own.
	Now func() time.Time
	// Clock measures how long a batch has been open (MaxDelay,
	// CatchUpDelay) and when a held dead letter is tried again (default
	// time.Now). Tests drive it to close batches without waiting for
	// them. It is not Now, which a simulator sets to the past, and not
	// the lease, which is measured on the system clock because the
	// broker's rebalance runs on real time.
	Clock func() time.Time

	// DeadLetterTimeout bounds one attempt to write a dead letter
	// (default 10 s). A failed attempt holds the message's partition and
	// is retried with backoff; the other partitions keep flowing.
	DeadLetterTimeout time.Duration
	// DLQPartitions is how many partitions the dead-letter topic gets when
	// the ingester creates it at start (default 1).
	DLQPartitions int32
	// SkipDedupCheck starts even if a table's deduplication window is too
	// small for this ingester's limits (see dedup.go): exactly-once is
	// then not guaranteed across a crash or a rebalance.
	SkipDedupCheck bool
	// TopicWatchEvery is how often a source topic that does not exist yet
	// is looked for (default 10 s, at least 100 ms). The topics that exist
	// are consumed meanwhile; one that appears is consumed from then on,
	// without a restart (see source_kafka.go, docs/ingest.md).
	TopicWatchEvery time.Duration
}

// Defaults.
const (
	DefaultGroup        = "spikehunt-ingest"
	DefaultSpansTopic   = "otlp_spans"
	DefaultMetricsTopic = "otlp_metrics"
	DefaultDLQTopic     = "spikehunt.dlq"

	DefaultSessionTimeout   = 45 * time.Second
	DefaultRebalanceTimeout = 60 * time.Second
	DefaultMaxAhead         = time.Hour
	// MaxAgeLimit is the most MaxAge may be, and what a longer table TTL
	// is cut to: 98 days back, today and tomorrow (MaxAhead) are the 100
	// day partitions one insert block may span.
	MaxAgeLimit = 98 * 24 * time.Hour
)

// Lease is how long after a poll the member may still insert what it
// polled: the rebalance timeout less two heartbeats (the rebalance may
// have begun a heartbeat before the poll returned, and the commit needs
// one) and a second of margin. Past it the group may have evicted the
// member and given its partitions to another, which re-inserts the batch
// from its intent: the member stops (fencing; see consumer.go).
func (c *Config) Lease() time.Duration {
	return c.RebalanceTimeout - 2*c.SessionTimeout/10 - time.Second
}

// WithDefaults returns c with its zero fields set to their defaults; c
// itself is not changed. (MaxAge 0 stays 0: the start reads the table's
// TTL for it.)
func (c Config) WithDefaults() Config {
	defaults.Fill(&c.Group, DefaultGroup)
	defaults.Fill(&c.SpansTopic, DefaultSpansTopic)
	defaults.Fill(&c.MetricsTopic, DefaultMetricsTopic)
	defaults.Fill(&c.DLQTopic, DefaultDLQTopic)
	if c.Instance == "" {
		c.Instance = DefaultInstance()
	}
	defaults.Fill(&c.ReportEvery, DefaultReportEvery)
	defaults.Fill(&c.MaxRows, 300_000)
	defaults.Fill(&c.MaxBytes, 32<<20)
	defaults.Fill(&c.MaxDelay, time.Second)
	defaults.Fill(&c.CatchUpDelay, max(10*time.Second, c.MaxDelay))
	defaults.Fill(&c.SessionTimeout, DefaultSessionTimeout)
	defaults.Fill(&c.RebalanceTimeout, DefaultRebalanceTimeout)
	defaults.Fill(&c.MaxAhead, DefaultMaxAhead)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	defaults.Fill(&c.DeadLetterTimeout, 10*time.Second)
	defaults.Fill(&c.DLQPartitions, 1)
	defaults.Fill(&c.TopicWatchEvery, 10*time.Second)
	return c
}

// Validate checks c as New would run it, its zero fields taken as their
// defaults. It does not change c.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("ingest: no Kafka brokers: set --kafka.brokers")
	}
	c = c.WithDefaults()
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
	case c.SessionTimeout < time.Second:
		return fmt.Errorf("ingest: session timeout %s, want ≥ 1s (brokers refuse less than 6s by default)", c.SessionTimeout)
	case c.Lease() < time.Second:
		return fmt.Errorf("ingest: rebalance timeout %s leaves no lease: want ≥ a fifth of the session timeout (%s) + 2s", c.RebalanceTimeout, c.SessionTimeout)
	case c.MaxAge > MaxAgeLimit:
		return fmt.Errorf("ingest: max age %s above %s: a batch could then span more than the 100 day partitions ClickHouse takes in one insert (max_partitions_per_insert_block)", c.MaxAge, MaxAgeLimit)
	case c.DeadLetterTimeout < 100*time.Millisecond:
		return fmt.Errorf("ingest: dead-letter timeout %s, want ≥ 100ms", c.DeadLetterTimeout)
	case c.TopicWatchEvery < 100*time.Millisecond:
		return fmt.Errorf("ingest: topic watch every %s, want ≥ 100ms", c.TopicWatchEvery)
	case c.DLQPartitions < 1:
		return fmt.Errorf("ingest: %d dead-letter partitions, want ≥ 1", c.DLQPartitions)
	case c.DLQTopic == c.SpansTopic || c.DLQTopic == c.MetricsTopic:
		return fmt.Errorf("ingest: the dead-letter topic %q is also a source topic: dead letters would be read again", c.DLQTopic)
	case c.SpansTopic == c.MetricsTopic:
		return fmt.Errorf("ingest: spans and metrics share topic %q: a message's signal is known by its topic", c.SpansTopic)
	}
	return c.Security.Validate()
}
