package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestDedupNeedFollowsTheIngestersLimits(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        Config
		partitions int32
		self       bool
		want       int64
	}{
		// lease 60 − 9 − 1 = 50 s; 2 × 50 + 45 + 10 = 155 s of one batch a second, 4 blocks each.
		{"defaults, one partition", Config{}, 1, false, 155 * 4},
		{"defaults, twelve partitions", Config{}, 12, false, 12 * 155 * 4},
		{"counters add the own reports", Config{}, 12, true, 12*155*4 + 12*16},
		// A batch every 200 ms: five times the blocks.
		{"a short batch delay", Config{MaxDelay: 200 * time.Millisecond, CatchUpDelay: 10 * time.Second}, 3, false, 3 * 775 * 4},
		// lease 5 − 1.2 − 1 = 2.8 s; 5.6 + 6 + 10 = 21.6 s → 22 batches.
		{"short timeouts", Config{SessionTimeout: 6 * time.Second, RebalanceTimeout: 5 * time.Second}, 1, false, 22 * 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Brokers = []string{"k:9092"}
			cfg = cfg.WithDefaults()
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			if got, _ := dedupNeed(&cfg, tc.partitions, tc.self); got != tc.want {
				t.Errorf("dedupNeed = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestTableFactsAreReadFromEngineFull(t *testing.T) {
	for _, tc := range []struct {
		name, engine, full string
		want               tableFacts
	}{
		{"single server", "MergeTree", "MergeTree PARTITION BY toDate(ts) ORDER BY (service, host, ts) TTL ts + toIntervalDay(7) SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 20000, index_granularity = 8192",
			tableFacts{name: "t", window: 20000, seconds: -1, ttl: 7 * 24 * time.Hour}},
		{"replicated, seconds set", "ReplicatedMergeTree", "ReplicatedMergeTree('/clickhouse/tables/{shard}/db/requests', '{replica}') TTL ts + toIntervalDay(3) SETTINGS replicated_deduplication_window = 500, replicated_deduplication_window_seconds = 60",
			tableFacts{name: "t", replicated: true, window: 500, seconds: 60, ttl: 3 * 24 * time.Hour}},
		{"no settings, no TTL", "MergeTree", "MergeTree ORDER BY x SETTINGS index_granularity = 8192",
			tableFacts{name: "t", window: -1, seconds: -1}},
		{"the other kind's setting is not this one's", "ReplicatedMergeTree", "ReplicatedMergeTree ORDER BY x SETTINGS non_replicated_deduplication_window = 100",
			tableFacts{name: "t", replicated: true, window: -1, seconds: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, parseTableFacts("t", tc.engine, tc.full), cmp.AllowUnexported(tableFacts{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// Nothing checked that the tables' deduplication
// window covers the ingester's retries. With the window forced small, the
// ingester now refuses to start, saying what it needs and how to set it;
// with the schema's default it starts.
func TestTheIngesterRefusesToStartWhenTheDedupWindowIsTooSmall(t *testing.T) {
	k := testenv.SharedKafka(t)
	st := testenv.ClickHouse(t)
	ctx := context.Background()
	if _, err := schema.Apply(ctx, st, schema.Options{DedupWindow: 100}); err != nil {
		t.Fatal(err)
	}
	n := topicSeq.Add(1)
	p := &pipeline{k: k, st: st, cfg: Config{Brokers: k.Brokers(), Group: "dedup-small", SpansTopic: "spans-dedup-" + fmt.Sprint(n), MetricsTopic: "metrics-dedup-" + fmt.Sprint(n),
		DLQTopic: "dlq-dedup-" + fmt.Sprint(n), Instance: "ingest-dedup"}}
	for _, topic := range []string{p.cfg.SpansTopic, p.cfg.MetricsTopic} {
		if err := k.CreateTopic(ctx, topic, 3); err != nil {
			t.Fatal(err)
		}
	}
	in, err := New(p.cfg, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err = in.Run(rctx)
	if !errors.Is(err, ErrDedupWindowTooSmall) {
		t.Fatalf("Run = %v, want ErrDedupWindowTooSmall", err)
	}
	for _, want := range []string{"table requests remembers the last 100 insert blocks", "needs 1860", "3 partitions of " + p.cfg.SpansTopic,
		"ALTER TABLE requests MODIFY SETTING non_replicated_deduplication_window = 1860", "table counters", "table latency_1s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if ok, detail := in.Health(); ok || !strings.HasPrefix(detail, "starting") {
		t.Errorf("health %v %q, want not ok, starting", ok, detail)
	}

	// As the error says: raise it, and the ingester starts.
	for _, table := range []string{"requests", "counters", "latency_1s", "latency_1m"} {
		if err := st.Exec(ctx, "ALTER TABLE "+table+" MODIFY SETTING non_replicated_deduplication_window = 20000"); err != nil {
			t.Fatal(err)
		}
	}
	in, _ = p.run(t, st)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if ok, _ := in.Health(); ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	ok, detail := in.Health()
	t.Fatalf("with the window raised: health %v %q, want ok", ok, detail)
}
