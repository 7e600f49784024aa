package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/store"
)

// refusingInserts is the real store refusing inserts into requests, as an
// overloaded server would (retryable), until open is set.
type refusingInserts struct {
	store.Store
	open     atomic.Bool
	attempts atomic.Int64
}

func (s *refusingInserts) Insert(ctx context.Context, table string, input proto.Input, opts ...store.Option) error {
	if table == "requests" && !s.open.Load() {
		s.attempts.Add(1)
		return errors.New("test: the server is too busy to take inserts")
	}
	return s.Store.Insert(ctx, table, input, opts...)
}

// A member stuck retrying an insert past the rebalance
// timeout was evicted, its partitions given to another member, which
// re-inserted the batch from its intent; when its insert finally went
// through, the batch was there twice unless ClickHouse still remembered
// the token. Both members here insert without tokens, so only fencing
// keeps the rows exactly once: the stuck member stops inserting when its
// lease runs out (before the group evicts it) and never inserts the batch
// it gave up.
func TestAMemberPastItsLeaseDoesNotInsertTheBatchItHeld(t *testing.T) {
	p := newPipeline(t, 2)
	p.cfg.NoDedup = true
	p.cfg.SessionTimeout, p.cfg.RebalanceTimeout = 6*time.Second, 5*time.Second // lease 2.8 s
	var recs []*kgo.Record
	for m := range 20 {
		host := fmt.Sprintf("node-%02d", m)
		recs = append(recs, &kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte(host), Value: agentSpans(t, host, 100, m*100)})
	}
	p.produce(t, recs...)

	stuck := &refusingInserts{Store: p.st}
	p.cfg.Instance = "stuck"
	p.run(t, stuck)
	deadline := time.Now().Add(30 * time.Second)
	for stuck.attempts.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if stuck.attempts.Load() == 0 {
		t.Fatal("the stuck member never tried to insert")
	}
	// A second member joins; the stuck one holds its batch past the
	// rebalance timeout (5 s), by which the group would evict it.
	p.cfg.Instance = "healthy"
	p.run(t, p.st)
	time.Sleep(12 * time.Second)
	stuck.open.Store(true)
	p.waitFor(t, "SELECT uniqExact(trace_id, span_id) FROM requests", "2000")
	// A late insert of the stuck member's retry loop (backoff up to 10 s)
	// would show as duplicates.
	for range 12 {
		if got := p.query(t, "SELECT count() FROM requests"); got != "2000" {
			t.Fatalf("%s rows for 2000 requests: the member inserted a batch it no longer owned", got)
		}
		time.Sleep(time.Second)
	}
}
