package alertintake

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/internal/alertsig"
	"github.com/spikehunt/spikehunt/pipelines/services/alerts"
	"github.com/spikehunt/spikehunt/tests/fakeclock"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The detector's publisher (pipelines/services/alerts.KafkaSink) and poison records
// on one partition of a real broker: the consumer hands on the two firing
// alerts, counts and skips the rest, never stalls behind a poison record,
// and commits, so that a consumer of the same group later reads only what
// came after.
func TestKafkaConsumerRoundTrip(t *testing.T) {
	k := testenv.SharedKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic, group := uniqueName("spikehunt.alerts.intake-roundtrip"), uniqueName("intake-roundtrip")
	if err := k.CreateTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Second)
	spikeGroup := detectorSpikeGroupAlert(t0, "spikegroup-11111111111111111111111111111111")
	newPattern := alertdoc.Alert{
		Schema: alertdoc.SchemaVersion, AlertID: "pattern-22222222222222222222222222222222", Kind: alertdoc.KindPattern,
		Service: "billy", DetectorVersion: "v1", GeneratedAt: t0,
		Pattern: &alertdoc.PatternChange{Change: alertdoc.ChangeNew, PatternFacts: alertdoc.PatternFacts{
			PatternID: "billy/fleet-synchronized", Class: "fleet-synchronized", HostsAffected: 40, HostsTotal: 50,
			HWClassSkew: map[string]float64{"gen4": 1.1, "gen5": 0.9}, AffectedHostsSample: []string{"web-03", "web-04"},
			LookbackStart: t0.Add(-time.Hour), LookbackEnd: t0,
		}},
	}
	resolved := newPattern
	resolved.AlertID = "pattern-33333333333333333333333333333333"
	resolved.Pattern = &alertdoc.PatternChange{Change: alertdoc.ChangeResolved, PatternFacts: newPattern.Pattern.PatternFacts}

	publish := publisher(t, k, topic)
	raw := rawProducer(t, k, topic)
	raw(ctx, []byte("{this is not json"))
	publish(ctx, spikeGroup, resolved)
	raw(ctx, []byte(`{"schema": "spikehunt.alert/v2", "alert_id": "x", "kind": "spike-group", "service": "billy"}`))
	raw(ctx, mustJSON(t, map[string]any{"schema": "spikehunt.alert/v1", "alert_id": "pattern-44444444444444444444444444444444",
		"kind": "spike-group", "service": "billy", "pattern": map[string]any{"change": "new", "class": "isolated-host"}}))
	publish(ctx, newPattern)

	clock := fakeclock.New(t0.Add(time.Minute))
	ch := make(chan Alert, 16)
	c, stop := runConsumer(t, KafkaConfig{Brokers: k.Brokers(), Topic: topic, Group: group, Clock: clock}, ChannelSink(ch))
	got := receive(t, ctx, ch, 2)
	want := []Alert{
		{
			Source: SourceKafka, Key: "kafka/" + spikeGroup.AlertID, Service: "billy",
			HWClasses: []string{"gen5", "gen4"}, Hosts: []string{"web-01", "web-02"},
			WindowStart: t0.Add(-10 * time.Second), WindowEnd: t0.Add(-8 * time.Second),
			ReceivedAt: clock.Now(), RawID: spikeGroup.AlertID,
		},
		{
			Source: SourceKafka, Key: "kafka/" + newPattern.AlertID, Service: "billy", PatternClass: FleetSynchronized,
			PatternKey: "billy/fleet-synchronized", Hosts: []string{"web-03", "web-04"},
			WindowStart: t0.Add(-time.Hour), WindowEnd: t0, ReceivedAt: clock.Now(), RawID: newPattern.AlertID,
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
	waitCommitted(t, ctx, k, group, topic, 6)
	for _, m := range []struct {
		name      string
		got, want float64
	}{
		{"accepted", testutil.ToFloat64(c.metrics.accepted), 3},
		{"rejected bad_json", testutil.ToFloat64(c.metrics.rejected.WithLabelValues(rejectBadJSON)), 1},
		{"rejected unknown_schema", testutil.ToFloat64(c.metrics.rejected.WithLabelValues(rejectUnknownSchema)), 1},
		{"rejected invalid", testutil.ToFloat64(c.metrics.rejected.WithLabelValues(rejectInvalid)), 1},
		{"skipped resolved", testutil.ToFloat64(c.metrics.skipped.WithLabelValues(skipResolved)), 1},
		{"emitted", testutil.ToFloat64(c.metrics.emitted), 2},
		{"commit errors", testutil.ToFloat64(c.metrics.commitErrors), 0},
	} {
		if m.got != m.want {
			t.Errorf("%s = %v, want %v", m.name, m.got, m.want)
		}
	}
	stop()

	later := detectorSpikeGroupAlert(t0, "spikegroup-55555555555555555555555555555555")
	publish(ctx, later)
	_, stop = runConsumer(t, KafkaConfig{Brokers: k.Brokers(), Topic: topic, Group: group, Clock: clock}, ChannelSink(ch))
	defer stop()
	if got := receive(t, ctx, ch, 1); got[0].Key != "kafka/"+later.AlertID {
		t.Errorf("the restarted member read %s first, want %s: the earlier records were not committed", got[0].Key, later.AlertID)
	}
}

// A poll whose alerts the sink never took is not committed: the next
// member of the group gets them.
func TestKafkaConsumerDoesNotCommitWhatTheSinkDidNotTake(t *testing.T) {
	k := testenv.SharedKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic, group := uniqueName("spikehunt.alerts.intake-nocommit"), uniqueName("intake-nocommit")
	if err := k.CreateTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	a := detectorSpikeGroupAlert(time.Now().UTC(), "spikegroup-66666666666666666666666666666666")
	publisher(t, k, topic)(ctx, a)

	offered := make(chan struct{}, 1)
	stuck := SinkFunc(func(ctx context.Context, _ []Alert) error {
		select {
		case offered <- struct{}{}:
		default:
		}
		<-ctx.Done() // the operator never takes it
		return ctx.Err()
	})
	c, stop := runConsumer(t, KafkaConfig{Brokers: k.Brokers(), Topic: topic, Group: group}, stuck)
	select {
	case <-offered:
	case <-ctx.Done():
		t.Fatal("the alert was never offered to the sink")
	}
	stop()
	if got := testutil.ToFloat64(c.metrics.emitted); got != 0 {
		t.Errorf("emitted = %v, want 0", got)
	}
	adm := kadm.NewClient(kafkaClient(t, k))
	offsets, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offsets.Lookup(topic, 0); ok && o.At > 0 {
		t.Errorf("committed offset %d for an alert the sink never took", o.At)
	}

	ch := make(chan Alert, 1)
	_, stop = runConsumer(t, KafkaConfig{Brokers: k.Brokers(), Topic: topic, Group: group}, ChannelSink(ch))
	defer stop()
	if got := receive(t, ctx, ch, 1); got[0].Key != "kafka/"+a.AlertID {
		t.Errorf("the next member got %s, want %s", got[0].Key, a.AlertID)
	}
}

func detectorSpikeGroupAlert(t0 time.Time, id string) alertdoc.Alert {
	return alertdoc.Alert{
		Schema: alertdoc.SchemaVersion, AlertID: id, Kind: alertdoc.KindSpikeGroup,
		Service: "billy", DetectorVersion: "v1", GeneratedAt: t0,
		SpikeGroup: &alertdoc.SpikeGroup{
			Count: 3, HostsCount: 2, Hosts: []string{"web-01", "web-02"}, HWClasses: map[string]int{"gen4": 1, "gen5": 2},
			FirstWindowStart: t0.Add(-10 * time.Second), LastWindowEnd: t0.Add(-8 * time.Second),
			PeakMS: 1010, PeakHost: "web-02", SpikeIDs: []string{"a", "b", "c"}, TopSuspects: []alertdoc.GroupSuspect{},
		},
	}
}

// testKey is the detector's signing key in these tests; runConsumer
// verifies with it unless the config names keys of its own.
var testKey = alertsig.Key{ID: "k1", Secret: []byte("test-signing-key-0123456789abcdef")}

func testSigner(t testing.TB, k alertsig.Key) *alertsig.Signer {
	t.Helper()
	s, err := alertsig.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// publisher sends detector alerts the way `spikehunt detect` does, signed
// with testKey.
func publisher(t *testing.T, k *testenv.Kafka, topic string) func(context.Context, ...alertdoc.Alert) {
	t.Helper()
	return signedPublisher(t, k, topic, testKey)
}

func signedPublisher(t *testing.T, k *testenv.Kafka, topic string, key alertsig.Key) func(context.Context, ...alertdoc.Alert) {
	t.Helper()
	sink, err := alerts.NewKafkaSink(alerts.KafkaConfig{Brokers: k.Brokers(), Topic: topic, Signer: testSigner(t, key)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	return func(ctx context.Context, as ...alertdoc.Alert) {
		t.Helper()
		if err := sink.Send(ctx, as); err != nil {
			t.Fatal(err)
		}
	}
}

// rawProducer sends arbitrary bytes to the topic, signed with testKey: a
// poison record from a key holder.
func rawProducer(t *testing.T, k *testenv.Kafka, topic string) func(context.Context, []byte) {
	t.Helper()
	send := recordProducer(t, k)
	signer := testSigner(t, testKey)
	return func(ctx context.Context, value []byte) {
		t.Helper()
		r := &kgo.Record{Topic: topic, Key: []byte("billy"), Value: value}
		signer.Sign(r, time.Now())
		send(ctx, r)
	}
}

// recordProducer sends records as they are.
func recordProducer(t *testing.T, k *testenv.Kafka) func(context.Context, *kgo.Record) {
	t.Helper()
	cl := kafkaClient(t, k)
	return func(ctx context.Context, r *kgo.Record) {
		t.Helper()
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func kafkaClient(t *testing.T, k *testenv.Kafka, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := k.Client(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// runConsumer runs a consumer until the returned stop is called (also at
// cleanup); stop waits for Run to return nil.
func runConsumer(t *testing.T, cfg KafkaConfig, sink Sink) (*KafkaConsumer, func()) {
	t.Helper()
	if cfg.KeysDir == "" && cfg.Keys == nil && !cfg.AllowUnsigned {
		cfg.Keys = []alertsig.Key{testKey}
	}
	c, err := NewKafkaConsumer(cfg, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return 30s after its context ended")
		}
	}
	t.Cleanup(stop)
	return c, stop
}

func receive(t *testing.T, ctx context.Context, ch <-chan Alert, n int) []Alert {
	t.Helper()
	var got []Alert
	for len(got) < n {
		select {
		case a := <-ch:
			got = append(got, a)
		case <-ctx.Done():
			t.Fatalf("received %d alerts, want %d: %+v", len(got), n, got)
		}
	}
	return got
}

// waitCommitted waits until the group has committed offset want on
// partition 0 of topic.
func waitCommitted(t *testing.T, ctx context.Context, k *testenv.Kafka, group, topic string, want int64) {
	t.Helper()
	adm := kadm.NewClient(kafkaClient(t, k))
	var last int64 = -1
	for ctx.Err() == nil {
		offsets, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			if o, ok := offsets.Lookup(topic, 0); ok {
				if last = o.At; last == want {
					return
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("committed offset %d, want %d", last, want)
}

// uniqueName gives each run its own topic and group on the shared broker
// (go test -count=2 runs a test twice against one broker).
func uniqueName(prefix string) string {
	return prefix + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
