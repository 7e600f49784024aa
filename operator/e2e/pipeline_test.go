package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/internal/alertsig"
	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/pipelines/services/alerts"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
	"github.com/spikehunt/spikehunt/pipelines/services/ingest"
)

// pipeline is the way from the node's requests to the alerts topic, in
// the embedded default's shape: the agent's OTLP span messages
// (export.EncodeSpans, partition key host.name) into an in-process source,
// the ingester (the same batching and decoding as from Kafka) into the
// store, and, on demand, a detector pass over the store whose result the
// alerts publisher sends to Kafka, as `spikehunt detect
// --alerts.kafka.brokers` does after each pass.
type pipeline struct {
	st      store.Store
	src     *ingest.MemorySource
	res     telemetry.Resource
	service string
	from    time.Time // the first pass's start: before the first request
	pub     *alerts.Publisher
	// published counts the alerts sent: the records on the alerts topic.
	published int

	mu    sync.Mutex
	batch []telemetry.Request
}

func startPipeline(t *testing.T, st store.Store, res telemetry.Resource, service string, brokers []string, alertTopic string, log *slog.Logger) *pipeline {
	t.Helper()
	p := &pipeline{st: st, src: ingest.NewMemorySource(1), res: res, service: service,
		from: time.Now().Truncate(time.Second)}
	in, err := ingest.NewWithMemory(ingest.Config{Group: "e2e", MaxDelay: 200 * time.Millisecond}, st, p.src, log.With("component", "ingest"))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := alertsig.NewSigner(alertKey)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := alerts.NewKafkaSink(alerts.KafkaConfig{Brokers: brokers, Topic: alertTopic, Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	if p.pub, err = alerts.NewPublisher(alerts.Config{}, sink); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := in.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("ingest stopped", "err", err)
		}
	}()
	go func() { // the agent's exporter: a message every 200 ms
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := p.flush(); err != nil {
					log.Error("export", "err", err)
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if dl := p.src.DeadLetters(); len(dl) > 0 {
			t.Errorf("%d span messages dead-lettered, first: %s: %s", len(dl), dl[0].Reason, dl[0].Detail)
		}
	})
	return p
}

// observe is the agent's exporter side of the intake's tap.
func (p *pipeline) observe(q telemetry.Request) {
	p.mu.Lock()
	p.batch = append(p.batch, q)
	p.mu.Unlock()
}

// flush sends the requests observed so far as one OTLP message.
func (p *pipeline) flush() error {
	p.mu.Lock()
	b := p.batch
	p.batch = nil
	p.mu.Unlock()
	if len(b) == 0 {
		return nil
	}
	msg, err := otlpwire.EncodeSpans(p.res, b)
	if err != nil {
		return err
	}
	p.src.Produce(ingest.DefaultSpansTopic, []byte(p.res.HostName), msg)
	return nil
}

// catchUp returns once every request observed before the call is in the
// store.
func (p *pipeline) catchUp(t *testing.T) {
	t.Helper()
	if err := p.flush(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the ingest catches up", func() error {
		if n := p.src.Lag(); n > 0 {
			return fmt.Errorf("%d messages not ingested", n)
		}
		return nil
	})
}

// detect ingests what was observed, runs a detector pass over the
// service from the first request to a second ago (requests a moment old
// may still be in flight), and publishes its alerts.
func (p *pipeline) detect(t *testing.T) (detect.Result, []alertdoc.Alert) {
	t.Helper()
	to := time.Now().Add(-time.Second).Truncate(time.Second)
	p.catchUp(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := detect.Pass(ctx, p.st, detect.Config{Service: p.service, From: p.from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	sent, err := p.pub.Publish(ctx, alerts.Pass{NewSpikes: r.Spikes, Patterns: r.Patterns, Services: r.Services})
	if err != nil {
		t.Fatal(err)
	}
	p.published += len(sent)
	return r, sent
}
