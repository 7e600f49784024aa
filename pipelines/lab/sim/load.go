package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/services/ingest"
)

// Load simulates cfg into st the embedded way: the simulated agents produce
// into an in-process source, and an ingester (the same batching and
// decoding as from Kafka) inserts it. It returns once every message is
// inserted. progress, if not nil, gets (hosts simulated, hosts total).
// The schema must be applied.
//
// Loading is idempotent per configuration. The ingest's deduplication
// tokens name offset ranges, and an in-process source starts at offset 0
// in every process with batch boundaries set by timing, so they cannot
// recognise a second load. Load therefore records each finished load in
// sim_loads: a configuration loaded before is not loaded again (Stats.Skipped),
// and the rows of one that did not finish (a crash half-way) are deleted
// before it is loaded again. Those rows are the configuration's service on
// its simulated hosts over its time range: don't point the simulator at a
// store whose real data uses the same service and host names.
func Load(ctx context.Context, st store.Store, cfg Config, log *slog.Logger, progress func(done, total int)) (Truth, Stats, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return Truth{}, Stats{}, err
	}
	id := loadID(cfg)
	done, err := loaded(ctx, st, id)
	if err != nil {
		return Truth{}, Stats{}, err
	}
	if done {
		_, truth := Plan(cfg)
		if progress != nil {
			progress(cfg.Hosts, cfg.Hosts)
		}
		return truth, Stats{Skipped: true}, nil
	}
	if err := deletePartial(ctx, st, cfg); err != nil {
		return Truth{}, Stats{}, err
	}
	src := ingest.NewMemorySource(4)
	// A group of its own per attempt: its tokens must not match those of an
	// earlier attempt whose rows were deleted (the engine would drop the
	// new blocks as duplicates of the deleted ones).
	group := fmt.Sprintf("sim-%s-%d", id, time.Now().UnixNano())
	in, err := ingest.NewWithMemory(ingest.Config{Group: group, MaxRows: 200_000, MaxDelay: 250 * time.Millisecond,
		// The simulated fleet's clock: its rows are as old as its
		// scenario, and the ingest's time window is measured from it.
		Now: func() time.Time { return cfg.Start.Add(cfg.Duration) }}, st, src, log)
	if err != nil {
		return Truth{}, Stats{}, err
	}
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	ingestErr := make(chan error, 1)
	go func() { ingestErr <- in.Run(ictx) }()

	truth, stats, err := Run(ctx, cfg, &MemorySink{Source: src}, progress)
	if err != nil {
		return truth, stats, err
	}
	for src.Lag() > 0 {
		select {
		case err := <-ingestErr:
			return truth, stats, fmt.Errorf("sim: ingest stopped with %d messages left: %v", src.Lag(), err)
		case <-ctx.Done():
			return truth, stats, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	if err := <-ingestErr; err != nil {
		return truth, stats, err
	}
	if dl := src.DeadLetters(); len(dl) > 0 {
		return truth, stats, fmt.Errorf("sim: %d messages dead-lettered, first: %s: %s", len(dl), dl[0].Reason, dl[0].Detail)
	}
	return truth, stats, markLoaded(ctx, st, id, cfg, stats)
}

// loadsTable is the simulator's own bookkeeping, not part of the
// platform's schema: one row per finished load.
const loadsTable = `CREATE TABLE IF NOT EXISTS sim_loads (
	load_id String, service String, scenario String, window_start DateTime('UTC'), window_end DateTime('UTC'),
	hosts UInt32, kept UInt64, points UInt64, finished_at DateTime('UTC') DEFAULT now()
) ENGINE = ReplacingMergeTree ORDER BY load_id`

// loadID names a configuration: everything that shapes its data.
func loadID(cfg Config) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%+v", cfg)
	return fmt.Sprintf("%016x", h.Sum64())
}

func loaded(ctx context.Context, st store.Store, id string) (bool, error) {
	if err := st.Exec(ctx, loadsTable); err != nil {
		return false, fmt.Errorf("sim: %w", err)
	}
	tab, err := store.Select(ctx, st, "SELECT count() FROM sim_loads WHERE load_id = "+store.QuoteString(id))
	if err != nil {
		return false, fmt.Errorf("sim: %w", err)
	}
	return len(tab.Rows) == 1 && tab.Rows[0][0] != "0", nil
}

// deletePartial removes what an unfinished load of cfg may have left.
// Each table is looked at on its own: the rollups outlive the requests
// they were fed from (their TTLs differ), so a load whose requests have
// aged out still has rollups to remove, or a reload would count them twice.
func deletePartial(ctx context.Context, st store.Store, cfg Config) error {
	hosts, _ := Plan(cfg)
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = store.QuoteString(h.Name)
	}
	in := strings.Join(names, ",")
	from, to := cfg.Start.Unix(), cfg.Start.Add(cfg.Duration).Unix()
	svc := store.QuoteString(cfg.Service)
	var where []string
	for _, table := range []string{"requests", "latency_1s", "latency_1m"} {
		where = append(where, fmt.Sprintf("%s WHERE service = %s AND host IN (%s) AND ts >= toDateTime(%d) AND ts < toDateTime(%d)", table, svc, in, from, to))
	}
	where = append(where, fmt.Sprintf("counters WHERE host IN (%s) AND ts_start >= toDateTime(%d) AND ts_start < toDateTime(%d)", in, from, to))
	for _, w := range where {
		tab, err := store.Select(ctx, st, "SELECT count() FROM "+w)
		if err != nil {
			return fmt.Errorf("sim: look for a partial load: %w", err)
		}
		if tab.Rows[0][0] == "0" {
			continue
		}
		if err := st.Exec(ctx, "DELETE FROM "+w); err != nil {
			return fmt.Errorf("sim: remove a partial load: %w", err)
		}
	}
	return nil
}

func markLoaded(ctx context.Context, st store.Store, id string, cfg Config, s Stats) error {
	err := st.Exec(ctx, fmt.Sprintf("INSERT INTO sim_loads (load_id, service, scenario, window_start, window_end, hosts, kept, points) SELECT %s, %s, %s, %d, %d, %d, %d, %d",
		store.QuoteString(id), store.QuoteString(cfg.Service), store.QuoteString(cfg.Scenario),
		cfg.Start.Unix(), cfg.Start.Add(cfg.Duration).Unix(), cfg.Hosts, s.Kept, s.Points))
	if err != nil {
		return fmt.Errorf("sim: record the load: %w", err)
	}
	return nil
}
