package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/kafkasec"
	"github.com/spikehunt/spikehunt/pipelines/services/alerts"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

// alertPublisher sends what each detector pass found to Kafka as
// spikehunt.alert/v1 documents, deduplicated and rate-limited by the alerts
// package, and keeps its state in a file when asked to (else it rebuilds
// it from the detector tables at start, see alerts.LoadState).
type alertPublisher struct {
	pub       *alerts.Publisher
	sink      *alerts.KafkaSink
	statePath string
}

func newAlertPublisher(ctx context.Context, st store.Store, cfg alerts.Config, kafka alerts.KafkaConfig, statePath string) (*alertPublisher, error) {
	sink, err := alerts.NewKafkaSink(kafka)
	if err != nil {
		return nil, err
	}
	if kafka.Security.Enabled() {
		// A refusal (a wrong password or CA) fails the start with what to
		// fix; franz-go would retry it silently. A broker that does not
		// answer fails the first Send instead, as without security.
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := sink.Check(cctx)
		cancel()
		if errors.Is(err, kafkasec.ErrRefused) {
			sink.Close()
			return nil, fmt.Errorf("alerts: kafka: %w", err)
		}
	}
	pub, err := alerts.NewPublisher(cfg, sink)
	if err != nil {
		sink.Close()
		return nil, err
	}
	state, err := loadAlertState(ctx, st, statePath)
	if err != nil {
		sink.Close()
		return nil, err
	}
	pub.Restore(state)
	return &alertPublisher{pub: pub, sink: sink, statePath: statePath}, nil
}

// loadAlertState reads the saved state, or rebuilds one from the tables
// when there is no file yet.
func loadAlertState(ctx context.Context, st store.Store, path string) (alerts.State, error) {
	if path != "" {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			var s alerts.State
			if err := json.Unmarshal(b, &s); err != nil {
				return s, fmt.Errorf("alert state %s: %w (delete it to rebuild it from the detector tables)", path, err)
			}
			return s, nil
		case !errors.Is(err, os.ErrNotExist):
			return alerts.State{}, fmt.Errorf("alert state: %w", err)
		}
	}
	return alerts.LoadState(ctx, st, time.Now(), alerts.DefaultDedupHorizon)
}

// publish sends a pass's alerts; a failure is reported and the alerts stay
// in the publisher's outbox for the next pass, so detection goes on.
func (a *alertPublisher) publish(ctx context.Context, r detect.Result, stdout, stderr io.Writer) {
	sent, err := a.pub.Publish(ctx, alerts.Pass{NewSpikes: r.Spikes, Patterns: r.Patterns, Services: r.Services})
	if err != nil {
		fmt.Fprintf(stderr, "detect: alerts: %v (kept for the next pass)\n", err)
	}
	if len(sent) > 0 {
		fmt.Fprintf(stdout, "  %d alert(s) published\n", len(sent))
	}
	if a.statePath == "" {
		return
	}
	b, err := json.Marshal(a.pub.State())
	if err == nil {
		tmp := a.statePath + ".tmp"
		if err = os.WriteFile(tmp, b, 0o644); err == nil {
			err = os.Rename(tmp, a.statePath)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "detect: save the alert state: %v\n", err)
	}
}

func (a *alertPublisher) close() { a.sink.Close() }
