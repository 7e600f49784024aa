package alertintake

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/spikehunt/spikehunt/internal/alertsig"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// Two operators consuming with the same group split the alerts topic: the
// one left without a partition never sees an alert. It says so in its log,
// naming the member that holds the partition, and its gauge reads 0; the
// other logs its assignment and its gauge reads 1.
func TestAConsumerWithoutAPartitionNamesTheMemberThatHoldsIt(t *testing.T) {
	k := testenv.SharedKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic, group := uniqueName("spikehunt.alerts.intake-split"), uniqueName("intake-split")
	if err := k.CreateTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	start := func(clientID string) (*KafkaConsumer, *testenv.TailBuffer) {
		logs := testenv.NewTailBuffer(4 << 20)
		c, err := NewKafkaConsumer(KafkaConfig{Brokers: k.Brokers(), Topic: topic, Group: group, ClientID: clientID,
			Keys: []alertsig.Key{testKey}, TopicWatchEvery: 200 * time.Millisecond}, ChannelSink(make(chan Alert, 4)),
			slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
		if err != nil {
			t.Fatal(err)
		}
		c.group.warnAfter = 3 * time.Second
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("%s: Run: %v", clientID, err)
			}
		})
		return c, logs
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			if ctx.Err() != nil {
				t.Fatalf("not within the test's time: %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	first, firstLog := start("operator-a")
	waitFor("operator-a owns the partition", func() bool { return testutil.ToFloat64(first.metrics.owned) == 1 })
	if !strings.Contains(firstLog.String(), "partitions assigned") {
		t.Errorf("operator-a's log does not say it was assigned the partition:\n%s", firstLog)
	}

	second, secondLog := start("operator-b")
	waitFor("operator-b warns that it owns nothing", func() bool { return strings.Contains(secondLog.String(), "owns no partition") })
	warning := ""
	for _, line := range strings.Split(secondLog.String(), "\n") {
		if strings.Contains(line, "owns no partition") {
			warning = line
		}
	}
	if !strings.Contains(warning, "operator-a@") || !strings.Contains(warning, topic+"[0]") || !strings.Contains(warning, group) {
		t.Errorf("the warning does not name the group and the member that holds the partition:\n%s", warning)
	}
	if got := testutil.ToFloat64(second.metrics.owned); got != 0 {
		t.Errorf("operator-b's spikehunt_alertintake_kafka_partitions_owned = %v, want 0", got)
	}
	if got := testutil.ToFloat64(first.metrics.owned); got != 1 {
		t.Errorf("operator-a's spikehunt_alertintake_kafka_partitions_owned = %v after operator-b joined, want 1", got)
	}
	if strings.Contains(firstLog.String(), "owns no partition") {
		t.Errorf("operator-a warned although it owns the partition:\n%s", firstLog)
	}
}

// Every operator replica makes its consumer at start, but only the leader
// runs it. A standby's consumer must not join the group: a member that
// never polls, holding the partition, would keep every alert from the
// leader (the e2e cluster test's "no Capture" flake). The leader gets the
// alert, and the broker sees one member.
func TestAStandbysConsumerTakesNoPartOfTheGroup(t *testing.T) {
	k := testenv.SharedKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic, group := uniqueName("spikehunt.alerts.intake-standby"), uniqueName("intake-standby")
	if err := k.CreateTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	cfg := KafkaConfig{Brokers: k.Brokers(), Topic: topic, Group: group, Keys: []alertsig.Key{testKey}, TopicWatchEvery: 200 * time.Millisecond}
	if _, err := NewKafkaConsumer(cfg, ChannelSink(make(chan Alert, 4)), nil); err != nil { // the standby's, never run
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // time enough for a client that joins at once to have joined

	ch := make(chan Alert, 4)
	leader, _ := runConsumer(t, cfg, ChannelSink(ch))
	a := detectorSpikeGroupAlert(time.Now().UTC(), "spikegroup-88888888888888888888888888888888")
	publisher(t, k, topic)(ctx, a)
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	if got := receive(t, rctx, ch, 1); got[0].Key != "kafka/"+a.AlertID {
		t.Errorf("the leader got %s, want %s", got[0].Key, a.AlertID)
	}
	cl, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if members := describeGroup(ctx, kadm.NewClient(cl), group); strings.Count(members, "@") != 1 {
		t.Errorf("the group's members, as the broker sees them: %s; want the leader's alone", members)
	}
	if got := testutil.ToFloat64(leader.metrics.owned); got != 1 {
		t.Errorf("the leader owns %v partitions, want 1", got)
	}
}

// A standby built long before it becomes the leader has owned nothing only
// since its Run began: it does not warn about the hours it stood by.
func TestALateLeaderDoesNotWarnAboutItsTimeAsStandby(t *testing.T) {
	k := testenv.SharedKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic, group := uniqueName("spikehunt.alerts.intake-late"), uniqueName("intake-late")
	if err := k.CreateTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	logs := testenv.NewTailBuffer(4 << 20)
	c, err := NewKafkaConsumer(KafkaConfig{Brokers: k.Brokers(), Topic: topic, Group: group, Keys: []alertsig.Key{testKey},
		TopicWatchEvery: 200 * time.Millisecond}, ChannelSink(make(chan Alert, 4)), slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	c.group.warnAfter = 2 * time.Second
	time.Sleep(3 * time.Second) // standing by, longer than warnAfter
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for testutil.ToFloat64(c.metrics.owned) != 1 {
		if ctx.Err() != nil {
			t.Fatal("the consumer was never assigned the partition")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // the watch's next looks
	if strings.Contains(logs.String(), "owns no partition") {
		t.Errorf("the new leader warned about its time as a standby:\n%s", logs)
	}
}
