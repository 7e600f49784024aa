package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/agents/export"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/kafkasec"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The agent's own Kafka sink → the SASL_SSL listener → ingest over
// SASL_SSL → rows in the embedded engine.
func TestAgentExportOverSASLSSLLandsRowsInTheEngine(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	st := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	n := topicSeq.Add(1)
	cfg := Config{
		Brokers: k.SecureBrokers(), Group: fmt.Sprintf("g%d", n),
		SpansTopic: fmt.Sprintf("spans%d", n), MetricsTopic: fmt.Sprintf("metrics%d", n), DLQTopic: fmt.Sprintf("dlq%d", n),
		MaxRows: 5000, MaxDelay: 200 * time.Millisecond, Instance: fmt.Sprintf("ingest-%d", n),
		Security: k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA512, testenv.SecureKafkaUser),
	}
	for _, topic := range []string{cfg.SpansTopic, cfg.MetricsTopic, cfg.DLQTopic} {
		if err := k.CreateTopic(ctx, topic, 2); err != nil {
			t.Fatal(err)
		}
	}
	// The agent authenticates as the same user with another mechanism.
	sink, err := export.NewKafkaSink(export.KafkaConfig{
		Brokers: k.SecureBrokers(), TracesTopic: cfg.SpansTopic, MetricsTopic: cfg.MetricsTopic, Key: "node-7",
		Security: k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA256, testenv.SecureKafkaUser),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	if err := sink.Check(ctx); err != nil {
		t.Fatal(err)
	}
	delivered := make(chan error, 10)
	for m := range 10 {
		if err := sink.Send(export.KindTraces, agentSpans(t, "node-7", 100, m*100), func(err error) { delivered <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		if err := <-delivered; err != nil {
			t.Fatalf("delivery: %v", err)
		}
	}

	p := &pipeline{k: k, st: st, cfg: cfg}
	p.start(t)
	p.waitFor(t, "SELECT count(), uniqExact(trace_id, span_id), any(host) FROM requests", "1000\t1000\tnode-7")
}

// An ingester whose password the broker refuses does not start: New
// returns an error that says what to fix, within the start-up check's
// bound, instead of a consumer that waits for ever without a word.
func TestIngestWithAWrongPasswordFailsAtStartSayingSo(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	st := testenv.ClickHouse(t)
	cfg := Config{
		Brokers: k.SecureBrokers(), Group: "refused",
		Security: k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA512, testenv.KafkaUser{Name: testenv.SecureKafkaUser.Name, Password: "wrong"}),
	}
	start := time.Now()
	_, err := New(cfg, st, slog.New(slog.DiscardHandler))
	if !errors.Is(err, kafkasec.ErrRefused) || !strings.Contains(err.Error(), "SASL SCRAM-SHA-512 authentication refused") {
		t.Fatalf("New: %v; want ErrRefused saying the authentication was refused", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("refused after %v, want within the 15 s check", took)
	}
}
