package alertintake

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// Before any detector has published, the alerts topic may not exist. The
// consumer waits for it and says so (the gauge, TopicMissing), the
// webhook keeps taking alerts meanwhile, and once the topic is created
// its alerts are consumed without a restart.
func TestKafkaConsumerWaitsForAMissingTopic(t *testing.T) {
	k := testenv.SharedKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic, group := uniqueName("spikehunt.alerts.intake-missing"), uniqueName("intake-missing")
	ch := make(chan Alert, 4)
	c, _ := runConsumer(t, KafkaConfig{Brokers: k.Brokers(), Topic: topic, Group: group, TopicWatchEvery: 200 * time.Millisecond}, ChannelSink(ch))

	for deadline := time.Now().Add(30 * time.Second); !c.TopicMissing(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the consumer never said the alerts topic is missing")
		}
	}
	if got := testutil.ToFloat64(c.metrics.missing); got != 1 {
		t.Errorf("spikehunt_alertintake_kafka_topic_missing = %v, want 1", got)
	}

	// The webhook is not held up by the missing topic.
	f := newWebhookFixture(t, nil)
	if status, resp := f.do(t, f.alertmanagerRequest(t, readTestdata(t, "alertmanager.json"), "Bearer "+testToken)); status != http.StatusAccepted {
		t.Fatalf("webhook while the alerts topic is missing: status %d (%s), want 202", status, resp)
	}
	if got, _ := f.sink.alerts(); len(got) != 2 {
		t.Errorf("webhook while the alerts topic is missing: the sink got %d alerts, want 2", len(got))
	}

	if err := k.CreateTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	a := detectorSpikeGroupAlert(time.Now().UTC(), "spikegroup-77777777777777777777777777777777")
	publisher(t, k, topic)(ctx, a)
	if got := receive(t, ctx, ch, 1); got[0].Key != "kafka/"+a.AlertID {
		t.Errorf("got %s, want %s", got[0].Key, a.AlertID)
	}
	// The client may find the new topic on its own before the watch looks
	// again (every TopicWatchEvery): give the watch a few of its rounds.
	for deadline := time.Now().Add(5 * time.Second); c.TopicMissing() || testutil.ToFloat64(c.metrics.missing) != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the topic exists and was consumed, but 5s later TopicMissing = %v, gauge %v", c.TopicMissing(), testutil.ToFloat64(c.metrics.missing))
		}
	}
}
