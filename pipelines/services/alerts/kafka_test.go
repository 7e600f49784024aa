package alerts

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
	"github.com/spikehunt/spikehunt/tests/fakeclock"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// Publish through a real broker, read the topic back: one record per alert,
// keyed by service, valid against the schema; the same pass published again,
// also by a restarted publisher, adds no record.
func TestAlertKafkaEndToEnd(t *testing.T) {
	k := testenv.SharedKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic = "spikehunt.alerts.e2e"
	if err := k.CreateTopic(ctx, topic, 3); err != nil {
		t.Fatal(err)
	}
	newSink := func() *KafkaSink {
		s, err := NewKafkaSink(KafkaConfig{Brokers: k.Brokers(), Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	f := fleet{t0: time.Now().UTC().Truncate(time.Second)}
	clock := fakeclock.New(f.t0.Add(time.Minute))
	p, err := NewPublisher(Config{Clock: clock}, newSink())
	if err != nil {
		t.Fatal(err)
	}
	pass := Pass{
		NewSpikes: append(f.windows("billy", 0, "h1", "h2", "h3"), f.windows("zeta", 0, "z1")...),
		Patterns:  []detect.Pattern{f.pattern("billy", 48)},
	}
	sent, err := p.Publish(ctx, pass)
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 3 {
		t.Fatalf("published %d alerts, want 2 spike groups and 1 pattern", len(sent))
	}

	cl, err := k.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for len(recs) < len(sent) && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	}
	if len(recs) != len(sent) {
		t.Fatalf("read %d records, want %d", len(recs), len(sent))
	}
	schema := loadSchema(t, true)
	byID := map[string]alertdoc.Alert{}
	for _, a := range sent {
		byID[a.AlertID] = a
	}
	partition := map[string]int32{}
	for _, r := range recs {
		if errs := schema.validate(r.Value); len(errs) > 0 {
			t.Errorf("record does not match alert.schema.json: %v\n%s", errs, r.Value)
		}
		got, err := alertdoc.Parse(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Key) != got.Service {
			t.Errorf("record key %q, alert service %q", r.Key, got.Service)
		}
		headers := map[string]string{}
		for _, h := range r.Headers {
			headers[h.Key] = string(h.Value)
		}
		if headers["schema"] != alertdoc.SchemaVersion || headers["kind"] != got.Kind {
			t.Errorf("headers %v for a %s alert", headers, got.Kind)
		}
		if diff := cmp.Diff(byID[got.AlertID], got); diff != "" {
			t.Errorf("record %s (-sent +read):\n%s", got.AlertID, diff)
		}
		if p, ok := partition[got.Service]; ok && p != r.Partition {
			t.Errorf("service %s on partitions %d and %d: its alerts would lose their order", got.Service, p, r.Partition)
		}
		partition[got.Service] = r.Partition
	}

	records := func() int64 {
		t.Helper()
		ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}
	clock.Advance(time.Minute)
	if again, err := p.Publish(ctx, pass); err != nil || len(again) != 0 {
		t.Errorf("re-publishing the same pass sent %d alerts (%v)", len(again), err)
	}
	// A restarted process with the saved state, through JSON.
	saved, err := json.Marshal(p.State())
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(saved, &st); err != nil {
		t.Fatal(err)
	}
	p2, err := NewPublisher(Config{Clock: clock}, newSink())
	if err != nil {
		t.Fatal(err)
	}
	p2.Restore(st)
	if again, err := p2.Publish(ctx, pass); err != nil || len(again) != 0 {
		t.Errorf("a restored publisher re-sent %d alerts (%v)", len(again), err)
	}
	if n := records(); n != 3 {
		t.Errorf("the topic holds %d records, want 3", n)
	}
}
