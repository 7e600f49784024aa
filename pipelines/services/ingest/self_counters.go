package ingest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// The pipeline's own figures in the counters table
// (docs/pipeline-health.md): what the ingest and the detectors write
// about themselves, beside the agents' spikehunt.agent.* and
// spikehunt.capture.* that arrive in the agents' metric streams. The OTel
// semantic conventions have no names for these, hence spikehunt.*. The host
// column is the instance (Config.Instance, `--instance`), cpu is −1.
const (
	// MetricIngestRows counts the rows the ingester stored (a delta), by
	// destination in the device column: requests, counters (the agents'
	// points; not these rows), dlq (messages dead-lettered).
	MetricIngestRows = "spikehunt.ingest.rows"
	// MetricIngestLag is the consumer lag (a gauge), by topic in the
	// device column: the records behind the high watermark, summed over
	// the partitions of the topic this instance holds, as of its last
	// fetch of each.
	MetricIngestLag = "spikehunt.ingest.lag"
	// MetricIngestDLQ counts dead-lettered messages (a delta), by source
	// topic in device and reason in mode. An interval without any has one
	// row per topic with mode '' and value 0, so the series never pauses.
	MetricIngestDLQ = "spikehunt.ingest.dlq"
)

// The destinations of MetricIngestRows.
const (
	DestRequests = "requests"
	DestCounters = "counters"
	DestDLQ      = "dlq"
)

// DefaultReportEvery is how often an ingester writes its own rows.
const DefaultReportEvery = 10 * time.Second

// DefaultInstance names this process in the host column of its own rows:
// the host name (a pod's name in Kubernetes), else "unknown".
func DefaultInstance() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "unknown"
}

// SelfCounters writes a component's own figures as rows of the counters
// table: a delta row has interval_ms > 0, a gauge row interval_ms = 0,
// like the agents' points once decoded (rows_counters.go).
//
// Rows are added with Delta and Gauge, then Flush inserts them as a block
// of their own, never inside a batch of the ingest's exactly-once
// handshake (intent.go): they carry no Kafka offsets, and a batch retried
// after a crash must be the very same rows. Each block has a
// deduplication token of its own, fixed when the block is sealed, so a
// Flush that fails after the engine took the block and is retried stores
// it once. Blocks that do not go in wait for the next Flush, up to
// maxPendingBlocks; older ones are then let go, and Flush says so.
//
// It is not safe for concurrent use.
type SelfCounters struct {
	st       store.Store
	instance string
	rows     *CounterRows // rows since the last Flush
	pending  []selfBlock  // sealed, not yet inserted, oldest first
	lost     int          // blocks let go since the last Flush that reported it
}

type selfBlock struct {
	rows  *CounterRows
	token string
}

// maxPendingBlocks bounds what waits while the store refuses inserts: at
// one block per 10 s, ten minutes.
const maxPendingBlocks = 60

// NewSelfCounters writes rows whose host is instance (DefaultInstance
// when empty) into st.
func NewSelfCounters(st store.Store, instance string) *SelfCounters {
	if instance == "" {
		instance = DefaultInstance()
	}
	return &SelfCounters{st: st, instance: instance, rows: NewCounterRows()}
}

// Instance is the host column of the rows.
func (s *SelfCounters) Instance() string { return s.instance }

// Delta adds the change v of a count over [start, end). An interval
// shorter than a millisecond is stored as one: interval_ms = 0 would make
// the row a gauge.
func (s *SelfCounters) Delta(metric, device, mode string, start, end time.Time, v float64) {
	ms := (end.Sub(start) + time.Millisecond/2).Milliseconds()
	s.rows.appendOwn(start, uint32(min(max(ms, 1), 1<<32-1)), s.instance, metric, device, mode, v)
}

// Gauge adds the reading v of a level at t.
func (s *SelfCounters) Gauge(metric, device, mode string, t time.Time, v float64) {
	s.rows.appendOwn(t, 0, s.instance, metric, device, mode, v)
}

// Flush seals the rows added since the last Flush into a block and
// inserts every block not yet stored, oldest first, stopping at the first
// error, which it returns (the blocks stay for the next Flush).
func (s *SelfCounters) Flush(ctx context.Context) error {
	if s.rows.Rows() > 0 {
		s.pending = append(s.pending, selfBlock{rows: s.rows,
			token: fmt.Sprintf("spikehunt.self/%s/%d/%016x", s.instance, time.Now().UnixNano(), rand.Uint64())})
		s.rows = NewCounterRows()
		if n := len(s.pending) - maxPendingBlocks; n > 0 {
			clear(s.pending[:n])
			s.pending = s.pending[n:]
			s.lost += n
		}
	}
	for len(s.pending) > 0 {
		b := s.pending[0]
		err := s.st.Insert(ctx, "counters", b.rows.Input(),
			store.WithSetting("distributed_foreground_insert", "1"), store.WithSetting("insert_deduplication_token", b.token))
		if err != nil {
			return fmt.Errorf("ingest: write %s's own counters rows (%d block(s) wait): %w", s.instance, len(s.pending), err)
		}
		s.pending[0] = selfBlock{}
		s.pending = s.pending[1:]
	}
	if s.lost > 0 {
		err := fmt.Errorf("ingest: %d block(s) of %s's own counters rows were let go while the store refused them", s.lost, s.instance)
		s.lost = 0
		return err
	}
	return nil
}
