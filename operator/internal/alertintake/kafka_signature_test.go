package alertintake

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/internal/alertsig"
	"github.com/spikehunt/spikehunt/pipelines/services/alerts"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// Anyone who could write to the alerts topic made the
// operator widen captures. On a real broker, between two alerts the
// detector signed (with the current key and with the next one, as during a
// rotation), a forger writes: an unsigned alert, one signed with a secret
// of their own under the detector's key id, one under a key id the
// operator does not hold, a signed alert whose body was changed, and a
// signed alert replayed two hours later; and a signed record of 300 KiB
// (no alert is that large: it is refused before it is hashed). Only the two signed alerts reach
// the sink, which is the operator's only way from an alert to a Capture;
// each forgery is counted under its reason and committed, so the
// partition moves on.
func TestForgedAlertsAreRefusedCountedAndNeverReachTheOperator(t *testing.T) {
	k := testenv.SharedKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic, group := uniqueName("spikehunt.alerts.intake-forged"), uniqueName("intake-forged")
	if err := k.CreateTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	nextKey := alertsig.Key{ID: "k2", Secret: []byte("the-next-signing-key-0123456789ab")}
	now := time.Now().UTC()
	doc := func(id string) []byte { return mustJSON(t, detectorSpikeGroupAlert(now, id)) }
	signedRecord := func(key alertsig.Key, at time.Time, id string) *kgo.Record {
		r := &kgo.Record{Topic: topic, Key: []byte("billy"), Value: doc(id)}
		testSigner(t, key).Sign(r, at)
		return r
	}
	send := recordProducer(t, k)

	signed := detectorSpikeGroupAlert(now, "spikegroup-a0000000000000000000000000000000")
	publisher(t, k, topic)(ctx, signed)
	send(ctx, &kgo.Record{Topic: topic, Key: []byte("billy"), Value: doc("spikegroup-a1111111111111111111111111111111")})
	send(ctx, signedRecord(alertsig.Key{ID: testKey.ID, Secret: bytes.Repeat([]byte("f"), 32)}, now, "spikegroup-a2222222222222222222222222222222"))
	send(ctx, signedRecord(alertsig.Key{ID: "k9", Secret: testKey.Secret}, now, "spikegroup-a3333333333333333333333333333333"))
	tampered := signedRecord(testKey, now, "spikegroup-a4444444444444444444444444444444")
	tampered.Value = bytes.Replace(tampered.Value, []byte(`"web-01"`), []byte(`"db-01"`), 1)
	send(ctx, tampered)
	send(ctx, signedRecord(testKey, now.Add(-2*time.Hour), "spikegroup-a5555555555555555555555555555555"))
	huge := signedRecord(testKey, now, "spikegroup-a7777777777777777777777777777777")
	huge.Value = append(bytes.Repeat([]byte(" "), 300<<10), huge.Value...) // still valid JSON, but no alert is that large
	testSigner(t, testKey).Sign(huge, now)
	send(ctx, huge)
	rotated := detectorSpikeGroupAlert(now, "spikegroup-a6666666666666666666666666666666")
	signedPublisher(t, k, topic, nextKey)(ctx, rotated)

	ch := make(chan Alert, 16)
	c, stop := runConsumer(t, KafkaConfig{Brokers: k.Brokers(), Topic: topic, Group: group,
		Keys: []alertsig.Key{testKey, nextKey}}, ChannelSink(ch))
	defer stop()
	got := receive(t, ctx, ch, 2)
	if got[0].RawID != signed.AlertID || got[1].RawID != rotated.AlertID {
		t.Errorf("the operator got %s and %s, want the two signed alerts %s and %s", got[0].RawID, got[1].RawID, signed.AlertID, rotated.AlertID)
	}
	waitCommitted(t, ctx, k, group, topic, 8)
	select {
	case a := <-ch:
		t.Errorf("a forged alert reached the operator: %s", a.RawID)
	default:
	}
	for reason, want := range map[string]float64{
		alertsig.ReasonUnsigned: 1, alertsig.ReasonBadSignature: 2, alertsig.ReasonUnknownKey: 1,
		alertsig.ReasonStale: 1, alertsig.ReasonFuture: 0, alertsig.ReasonMalformed: 0, rejectRecordTooLarge: 1,
	} {
		if got := testutil.ToFloat64(c.metrics.rejected.WithLabelValues(reason)); got != want {
			t.Errorf("rejected{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if got := testutil.ToFloat64(c.metrics.emitted); got != 2 {
		t.Errorf("emitted = %v, want 2", got)
	}
}

// allow_unsigned, as while the detector is being switched to signing:
// the unsigned alert passes (counted as such), a signed one still has to
// verify.
func TestAllowUnsignedLetsUnsignedAlertsThroughButStillVerifiesSignedOnes(t *testing.T) {
	k := testenv.SharedKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic, group := uniqueName("spikehunt.alerts.intake-unsigned"), uniqueName("intake-unsigned")
	if err := k.CreateTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	unsigned := detectorSpikeGroupAlert(now, "spikegroup-b0000000000000000000000000000000")
	forged := &kgo.Record{Topic: topic, Key: []byte("billy"), Value: mustJSON(t, detectorSpikeGroupAlert(now, "spikegroup-b1111111111111111111111111111111"))}
	testSigner(t, alertsig.Key{ID: testKey.ID, Secret: bytes.Repeat([]byte("f"), 32)}).Sign(forged, now)
	sink, err := alerts.NewKafkaSink(alerts.KafkaConfig{Brokers: k.Brokers(), Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	if err := sink.Send(ctx, []alertdoc.Alert{unsigned}); err != nil {
		t.Fatal(err)
	}
	recordProducer(t, k)(ctx, forged)

	ch := make(chan Alert, 4)
	c, stop := runConsumer(t, KafkaConfig{Brokers: k.Brokers(), Topic: topic, Group: group,
		Keys: []alertsig.Key{testKey}, AllowUnsigned: true}, ChannelSink(ch))
	defer stop()
	if got := receive(t, ctx, ch, 1); got[0].RawID != unsigned.AlertID {
		t.Errorf("got %s, want the unsigned alert %s", got[0].RawID, unsigned.AlertID)
	}
	waitCommitted(t, ctx, k, group, topic, 2)
	if got := testutil.ToFloat64(c.metrics.unsigned); got != 1 {
		t.Errorf("unsigned = %v, want 1", got)
	}
	if got := testutil.ToFloat64(c.metrics.rejected.WithLabelValues(alertsig.ReasonBadSignature)); got != 1 {
		t.Errorf("rejected{reason=bad_signature} = %v, want 1", got)
	}
}
