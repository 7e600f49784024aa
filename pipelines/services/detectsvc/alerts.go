package detectsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/kafkasec"
	"github.com/spikehunt/spikehunt/pipelines/services/alerts"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

// AlertOutbox sends what each detector pass found to Kafka as
// spikehunt.alert/v1 documents, deduplicated and rate-limited by the alerts
// package, and keeps its state in a file when asked to (else it rebuilds
// it from the detector tables at start, see alerts.LoadState).
type AlertOutbox struct {
	pub       *alerts.Publisher
	sink      *alerts.KafkaSink
	statePath string
	topic     string
	// missing is 1 while the last send found no alerts topic.
	missing prometheus.Gauge
	mu      sync.Mutex
	failed  error // the last pass's send error; nil once a send succeeds
}

// Health is the /healthz check of alerting: always ok (detection and the
// store go on without it, and the alerts wait in the outbox), but
// "degraded: alerts: …" while the last send failed, naming the topic.
func (a *AlertOutbox) Health() (ok bool, detail string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failed == nil {
		return true, "ok"
	}
	if errors.Is(a.failed, alerts.ErrTopicMissing) {
		return true, fmt.Sprintf("degraded: alerts: the topic %s does not exist; detection goes on and the alerts are kept for the next pass", a.topic)
	}
	return true, fmt.Sprintf("degraded: alerts: the last send failed (kept for the next pass): %v", a.failed)
}

// NewAlertOutbox connects to Kafka (failing at once on a refusal of its
// credentials) and restores what was alerted from statePath, or from the
// detector tables when statePath is empty or not written yet.
func NewAlertOutbox(ctx context.Context, st store.Store, cfg alerts.Config, kafka alerts.KafkaConfig, statePath string) (*AlertOutbox, error) {
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
	return &AlertOutbox{pub: pub, sink: sink, statePath: statePath, topic: kafka.WithDefaults().Topic,
		missing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spikehunt_detect_alerts_topic_missing",
			Help: "1 while the last pass's alerts could not be sent because the alerts topic does not exist (see /healthz); they wait for the next pass.",
		})}, nil
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

// Publish sends a pass's alerts; a failure is reported and the alerts stay
// in the publisher's outbox for the next pass, so detection goes on.
func (a *AlertOutbox) Publish(ctx context.Context, r detect.Result, stdout, stderr io.Writer) {
	sent, err := a.pub.Publish(ctx, alerts.Pass{NewSpikes: r.Spikes, Patterns: r.Patterns, Services: r.Services, PatternsSkipped: r.PatternsSkipped})
	if err != nil {
		fmt.Fprintf(stderr, "detect: alerts: %v (kept for the next pass)\n", err)
	}
	a.mu.Lock()
	// A pass with nothing to send has an empty outbox: nothing failed
	// before it either, since failed alerts stay in the outbox.
	a.failed = err
	if errors.Is(a.failed, alerts.ErrTopicMissing) {
		a.missing.Set(1)
	} else {
		a.missing.Set(0)
	}
	a.mu.Unlock()
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

// Missing is the gauge that is 1 while the alerts topic is missing, for
// the service's registry.
func (a *AlertOutbox) Missing() prometheus.Collector { return a.missing }

// Close closes the Kafka client.
func (a *AlertOutbox) Close() { a.sink.Close() }
