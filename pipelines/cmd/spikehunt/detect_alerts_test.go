package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/internal/alertsig"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/vocab"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// TestDetectPublishesAlerts: spikehunt detect with --alerts.kafka.brokers
// sends a spike-group alert and a new-pattern alert for a simulated
// thousand-spikes fleet to a real broker, keyed by service and signed with
// the key of --alerts.signing-key-file; a second run with the same state
// file sends nothing again.
func TestDetectPublishesAlerts(t *testing.T) {
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	cfg := sim.Config{Scenario: sim.ThousandSpikes, Hosts: 20, Duration: time.Hour, Start: start, Seed: 9, CounterStep: 30 * time.Second}
	if _, _, err := sim.Load(ctx, st, cfg, nil, nil); err != nil {
		t.Fatal(err)
	}
	k := testenv.SharedKafka(t)
	topic := "alerts-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if err := k.CreateTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "alerts.json")
	key := alertsig.Key{ID: "k1", Secret: []byte("detect-test-signing-key-0123456789")}
	keyFile := filepath.Join(t.TempDir(), key.ID)
	if err := os.WriteFile(keyFile, append(key.Secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	verifier, err := alertsig.NewVerifier(alertsig.VerifierConfig{Keys: []alertsig.Key{key}})
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"detect", "--dsn", "chdb://" + st.Dir() + "?database=" + st.Database(), "--service", "checkout",
		"--from", start.Format(time.RFC3339), "--to", start.Add(time.Hour).Format(time.RFC3339), "--every", "0",
		"--lookback", "1h", "--alerts.kafka.brokers", k.Brokers()[0], "--alerts.topic", topic, "--alerts.state", state,
		"--alerts.signing-key-file", keyFile}
	code, out, errs := runCLI(t, args...)
	if code != 0 || !strings.Contains(out, "alert(s) published") {
		t.Fatalf("detect: exit %d\n%s\n%s", code, out, errs)
	}
	recs := readTopic(t, k, topic)
	kinds := map[string]int{}
	for _, r := range recs {
		a, err := alertdoc.Parse(r.Value)
		if err != nil {
			t.Fatalf("record %d: %v\n%s", r.Offset, err, r.Value)
		}
		if string(r.Key) != "checkout" || a.Service != "checkout" {
			t.Errorf("record %d: key %q, service %q", r.Offset, r.Key, a.Service)
		}
		if id, err := verifier.Verify(r, time.Now()); err != nil || id != key.ID {
			t.Errorf("record %d: signature key %q: %v", r.Offset, id, err)
		}
		kinds[a.Kind]++
		if a.Kind == alertdoc.KindPattern && a.Pattern.Class != vocab.ClassFleetRecurrent {
			t.Errorf("pattern alert of class %q, want fleet-recurrent", a.Pattern.Class)
		}
	}
	if kinds[alertdoc.KindSpikeGroup] == 0 || kinds[alertdoc.KindPattern] != 1 {
		t.Fatalf("alerts by kind %v, want spike groups and one pattern", kinds)
	}
	// The same range again, with the saved state: nothing new to say.
	if code, out, errs := runCLI(t, args...); code != 0 || strings.Contains(out, "alert(s) published") {
		t.Fatalf("second detect: exit %d\n%s\n%s", code, out, errs)
	}
	if n := len(readTopic(t, k, topic)); n != len(recs) {
		t.Errorf("%d records after a re-run, want %d", n, len(recs))
	}
}

// readTopic reads every record of topic from the start.
func readTopic(t *testing.T, k *testenv.Kafka, topic string) []*kgo.Record {
	t.Helper()
	cl, err := k.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r); n++ })
		if n == 0 {
			return out
		}
	}
}
