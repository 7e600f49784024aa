package alertintake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/alertsig"
	"github.com/spikehunt/spikehunt/kafkasec"
)

// kafkaCheckTimeout bounds Run's first check of a secured connection.
const kafkaCheckTimeout = 15 * time.Second

// KafkaConsumer reads the detector's alerts topic as a member of a consumer
// group and hands the firing alerts of each poll to a Sink, then commits
// the poll's offsets. A record whose signature does not verify, or that is
// not a valid spikehunt.alert/v1 document, is counted, logged and committed
// with the rest: a forged or poison record never stops the partition and
// never reaches the sink.
type KafkaConsumer struct {
	cfg     KafkaConfig
	sink    Sink
	log     *slog.Logger
	opts    []kgo.Opt
	cl      *kgo.Client // made by Run
	metrics *kafkaMetrics
	// verify is nil when there are no keys (AllowUnsigned): then a signed
	// record cannot be checked and is refused as unknown_key.
	verify *alertsig.Verifier
	// missing: the alerts topic did not exist when last looked for.
	missing atomic.Bool
	group   *groupWatch
}

// NewKafkaConsumer checks cfg and prepares the group member. It neither
// connects nor joins the group until Run: only the replica that holds the
// leader's lease runs it.
func NewKafkaConsumer(cfg KafkaConfig, sink Sink, log *slog.Logger) (*KafkaConsumer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, errors.New("intake: kafka: no sink")
	}
	if log == nil {
		log = slog.Default()
	}
	keys := cfg.Keys
	if cfg.KeysDir != "" {
		dirKeys, err := alertsig.LoadKeyDir(cfg.KeysDir)
		if err != nil {
			return nil, fmt.Errorf("intake: kafka: keys_dir: %w", err)
		}
		keys = append(slices.Clip(keys), dirKeys...)
	}
	var verify *alertsig.Verifier
	if len(keys) > 0 {
		v, err := alertsig.NewVerifier(alertsig.VerifierConfig{Keys: keys, MaxAge: cfg.MaxSignatureAge, MaxSkew: cfg.MaxClockSkew})
		if err != nil {
			return nil, fmt.Errorf("intake: kafka: %w", err)
		}
		verify = v
	}
	start := kgo.NewOffset().AtStart()
	if cfg.StartAt == StartAtLatest {
		start = kgo.NewOffset().AtEnd()
	}
	metrics := newKafkaMetrics()
	group := newGroupWatch(log, cfg.Topic, cfg.Group, metrics.owned.Set)
	sec, err := cfg.Security.Options()
	if err != nil {
		return nil, fmt.Errorf("intake: kafka: %w", err)
	}
	base := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.WithLogger(newKgoLogger(log)),
		kafkasec.RefusalLog(log, cfg.Security),
	}, sec...)
	// The client Run uses is made there: a franz-go group client joins its
	// group as soon as it exists, and a standby replica's member, never
	// polling, would be assigned the partitions and hold the alerts back
	// from the leader. One without the group is made here, so that a bad
	// option fails at start on every replica.
	probe, err := kgo.NewClient(base...)
	if err != nil {
		return nil, fmt.Errorf("intake: kafka: %w", err)
	}
	probe.Close()
	opts := append(slices.Clip(base),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(start),
		// Offsets are committed by Run after the sink took the poll's
		// alerts, never by a timer that may run before.
		kgo.DisableAutoCommit(),
		// A rebalance waits until the poll is handed on and committed, so
		// the next owner of a partition starts after what this member
		// delivered, not before it (which would deliver it twice).
		kgo.BlockRebalanceOnPoll(),
	)
	opts = append(opts, group.options()...)
	if cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(cfg.SessionTimeout), kgo.HeartbeatInterval(cfg.SessionTimeout/10))
	}
	return &KafkaConsumer{cfg: cfg, sink: sink, log: log, opts: opts, metrics: metrics, verify: verify, group: group}, nil
}

// Register adds the consumer's metrics to reg.
func (c *KafkaConsumer) Register(reg prometheus.Registerer) error { return c.metrics.register(reg) }

// Run consumes until ctx ends, then leaves the group and closes the
// client; it returns nil then. A poll whose alerts the sink has not taken
// when ctx ends is not committed: the group's next member reads it again.
func (c *KafkaConsumer) Run(ctx context.Context) error {
	c.group.start(time.Now()) // before the client, whose group may assign at once
	cl, err := kgo.NewClient(c.opts...)
	if err != nil {
		return fmt.Errorf("intake: kafka: %w", err)
	}
	c.cl = cl
	defer func() {
		// Leaving the group is a rebalance, which BlockRebalanceOnPoll holds
		// until allowed: without this Close would wait for ever when Run
		// stops between a poll and its commit.
		c.cl.AllowRebalance()
		c.cl.Close()
	}()
	if err := c.checkSecurity(ctx); err != nil {
		return err
	}
	c.log.Info("intake: kafka: consuming the detector's alerts", "brokers", strings.Join(c.cfg.Brokers, ","), "topic", c.cfg.Topic,
		"group", c.cfg.Group, "start_at", c.cfg.StartAt)
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	defer func() { stopWatch(); <-watched }() // before the client closes
	go func() {
		defer close(watched)
		c.watch(wctx)
	}()
	for {
		fetches := c.cl.PollRecords(ctx, c.cfg.MaxPollRecords)
		if fetches.IsClientClosed() {
			return errors.New("intake: kafka: client closed")
		}
		if ctx.Err() != nil {
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				c.log.Warn("intake: kafka: fetch", "topic", topic, "partition", p, "err", err)
			}
		})
		var alerts []Alert
		polled := 0
		fetches.EachRecord(func(r *kgo.Record) {
			polled++
			if a, ok := c.decode(r); ok {
				alerts = append(alerts, a)
			}
		})
		if polled > 0 {
			c.log.Debug("intake: kafka: polled", "records", polled, "alerts", len(alerts))
		}
		if len(alerts) > 0 {
			if err := c.emit(ctx, alerts); err != nil {
				return nil // ctx ended; nothing of this poll is committed
			}
		}
		if polled > 0 {
			// The alerts are handed on: commit them even if ctx just ended,
			// or the next member delivers them again.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err := c.cl.CommitUncommittedOffsets(cctx)
			cancel()
			if err != nil {
				c.metrics.commitErrors.Inc()
				c.log.Warn("intake: kafka: commit offsets; their records come again after a restart or rebalance", "err", err)
			}
		}
		c.cl.AllowRebalance()
	}
}

// watch looks for the alerts topic every TopicWatchEvery until ctx ends.
// While it is missing the group has nothing to join: the gauge says so and
// a warning names the topic, once. Once it exists a metadata refresh lets
// the group's leader assign it at once rather than at the next periodic
// refresh. From then on it checks that this member owns a partition of
// it (groupWatch.check).
func (c *KafkaConsumer) watch(ctx context.Context) {
	adm := kadm.NewClient(c.cl)
	warnedMissing, warnedUnowned, refreshed := false, false, false
	for ctx.Err() == nil {
		lctx, cancel := context.WithTimeout(ctx, c.cfg.TopicWatchEvery+5*time.Second)
		td, err := adm.ListTopics(lctx, c.cfg.Topic)
		cancel()
		d, listed := td[c.cfg.Topic]
		switch {
		case err != nil || (listed && d.Err != nil && !errors.Is(d.Err, kerr.UnknownTopicOrPartition)):
			// Brokers out of reach, or refusing: the fetch loop and
			// checkSecurity say so; look again later.
		case listed && d.Err == nil && len(d.Partitions) > 0:
			c.metrics.missing.Set(0)
			c.missing.Store(false)
			if warnedMissing {
				warnedMissing = false
				c.log.Info("intake: kafka: the alerts topic exists now; consuming it", "topic", c.cfg.Topic)
			}
			if !refreshed {
				// The client's own metadata may predate the topic (it
				// refreshes every few minutes): look now.
				refreshed = true
				c.cl.ForceMetadataRefresh()
			}
			warnedUnowned = c.group.check(ctx, adm, time.Now(), warnedUnowned)
		default:
			c.metrics.missing.Set(1)
			c.missing.Store(true)
			refreshed = false
			if !warnedMissing {
				warnedMissing = true
				c.log.Warn("intake: kafka: the alerts topic does not exist yet; waiting for it (the detector creates it when it first publishes, "+
					"or create it with kafka-topics.sh); the webhooks are not affected", "topic", c.cfg.Topic, "every", c.cfg.TopicWatchEvery)
			}
		}
		t := time.NewTimer(c.cfg.TopicWatchEvery)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// TopicMissing says whether the alerts topic was missing when last looked
// for. Safe for concurrent use.
func (c *KafkaConsumer) TopicMissing() bool { return c.missing.Load() }

// checkSecurity returns what to fix when the brokers refuse a secured
// consumer (a wrong password or CA), which franz-go would otherwise retry
// without a word for ever. Brokers that do not answer are only logged: the
// consumer waits for them. A plaintext consumer is not checked.
func (c *KafkaConsumer) checkSecurity(ctx context.Context) error {
	sec := c.cfg.Security
	if !sec.Enabled() {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, kafkaCheckTimeout)
	defer cancel()
	err := kafkasec.Check(cctx, c.cl, sec)
	switch {
	case err == nil:
		c.log.Info("intake: kafka: connected", "security", sec.String())
		return nil
	case errors.Is(err, kafkasec.ErrRefused):
		return fmt.Errorf("intake: kafka: %w", err)
	case ctx.Err() != nil:
		return nil
	}
	c.log.Warn("intake: kafka: brokers not reachable at start; waiting for them", "security", sec.String(), "err", err)
	return nil
}

// decode verifies one record's signature and turns it into an Alert,
// counting and logging what it refuses or skips.
func (c *KafkaConsumer) decode(r *kgo.Record) (Alert, bool) {
	now := c.cfg.Clock.Now()
	if reason, err := c.refusal(r, now); reason != "" {
		c.metrics.rejected.WithLabelValues(reason).Inc()
		// Forgeries are logged at debug level, like the webhook's
		// refusals, so that a flood of them cannot fill the log; the
		// metric counts every one.
		c.log.Debug("intake: kafka: record refused", "reason", reason, "topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "err", err)
		return Alert{}, false
	}
	a, skip, err := decodeDetectorAlert(r.Value, now)
	if err != nil {
		reason := reasonOf(err)
		c.metrics.rejected.WithLabelValues(reason).Inc()
		c.log.Warn("intake: kafka: record skipped", "reason", reason, "topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "err", err)
		return Alert{}, false
	}
	c.metrics.accepted.Inc()
	if skip != "" {
		c.metrics.skipped.WithLabelValues(skip).Inc()
		return Alert{}, false
	}
	return a, true
}

// refusal says why r is refused before its document is parsed (its size,
// its signature), or "" when it may be parsed. An unsigned record passes
// only when AllowUnsigned is set.
func (c *KafkaConsumer) refusal(r *kgo.Record, now time.Time) (string, error) {
	if len(r.Value) > c.cfg.MaxRecordBytes {
		return rejectRecordTooLarge, fmt.Errorf("intake: kafka: a record of %d bytes, more than max_record_bytes %d", len(r.Value), c.cfg.MaxRecordBytes)
	}
	if c.verify == nil {
		if hasSignatureHeader(r) {
			return alertsig.ReasonUnknownKey, errors.New("intake: kafka: a signed record, but no keys are configured (set keys_dir)")
		}
		c.metrics.unsigned.Inc()
		return "", nil
	}
	_, err := c.verify.Verify(r, now)
	var se *alertsig.Error
	switch {
	case err == nil:
		return "", nil
	case errors.Is(err, alertsig.ErrUnsigned) && c.cfg.AllowUnsigned:
		c.metrics.unsigned.Inc()
		return "", nil
	case errors.As(err, &se):
		return se.Reason, err
	}
	return alertsig.ReasonBadSignature, err
}

func hasSignatureHeader(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == alertsig.HeaderKeyID || h.Key == alertsig.HeaderTime || h.Key == alertsig.HeaderSignature {
			return true
		}
	}
	return false
}

// emit hands alerts to the sink, retrying with backoff until it takes
// them or ctx ends.
func (c *KafkaConsumer) emit(ctx context.Context, alerts []Alert) error {
	for wait := time.Duration(0); ; {
		err := c.sink.Emit(ctx, alerts)
		if err == nil {
			c.metrics.emitted.Add(float64(len(alerts)))
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.metrics.emitErrors.Inc()
		wait = min(max(2*wait, 100*time.Millisecond), 10*time.Second)
		c.log.Warn("intake: kafka: the operator did not take the alerts; retrying", "alerts", len(alerts), "in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
