package sim

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/ingest"
	"github.com/spikehunt/spikehunt/pipelines/store"
)

// Load simulates cfg into st the embedded way: the simulated agents produce
// into an in-process source, and an ingester (the same batching, decoding
// and deduplication tokens as from Kafka) inserts it. It returns once
// every message is inserted. progress, if not nil, gets (hosts simulated,
// hosts total). The schema must be applied.
func Load(ctx context.Context, st store.Store, cfg Config, log *slog.Logger, progress func(done, total int)) (Truth, Stats, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	src := ingest.NewMemorySource(4)
	// The group names the deduplication tokens: a fleet loaded twice with
	// the same seed and range inserts nothing the second time.
	cfg = cfg.Defaults()
	group := fmt.Sprintf("sim-%s-%d-%d-%d", cfg.Scenario, cfg.Seed, cfg.Start.Unix(), cfg.Hosts)
	in, err := ingest.NewWithMemory(ingest.Config{Group: group, MaxRows: 200_000, MaxDelay: 250 * time.Millisecond}, st, src, log)
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
	return truth, stats, nil
}
