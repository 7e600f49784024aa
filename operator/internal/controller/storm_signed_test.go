package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/internal/alertsig"
	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/operator/internal/alertintake"
	"github.com/spikehunt/spikehunt/pipelines/services/alerts"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The storm of TestAlertStormNeverExceedsABudget as the detector sends it:
// signed pattern alerts on a real broker, read by the operator's Kafka
// intake, which verifies each signature. Between every ten signed alerts a
// forger writes one of their own, unsigned or signed with a secret of
// their own, naming other hosts. The budgets hold as before, the storm
// still arms captures, and no forged alert reaches the operator or arms
// anything.
func TestASignedAlertStormThroughKafkaHoldsTheBudgetsAndForgeriesArmNothing(t *testing.T) {
	k := testenv.SharedKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := fmt.Sprintf("spikehunt.alerts.storm-%d", time.Now().UnixNano())
	if err := k.CreateTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	key := alertsig.Key{ID: "k1", Secret: []byte("storm-signing-key-0123456789abcdef")}
	signer, err := alertsig.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	forger, err := alertsig.NewSigner(alertsig.Key{ID: "k1", Secret: []byte("the-forgers-own-key-0123456789abc")})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := alerts.NewKafkaSink(alerts.KafkaConfig{Brokers: k.Brokers(), Topic: topic, Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	raw, err := k.Client(kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	var sent, forged, offered atomic.Int64
	var mu sync.Mutex
	var offeredForgery []string
	reg := prometheus.NewRegistry()
	captures := runAlertStorm(t, "sk", func(t *testing.T, op *operator) stormSource {
		offer := func(ctx context.Context, as ...policy.Alert) error {
			if err := op.alerts.Offer(ctx, as...); err != nil {
				return err
			}
			for _, a := range as {
				if strings.HasPrefix(a.ID, "kafka/pattern-f") {
					mu.Lock()
					offeredForgery = append(offeredForgery, a.ID)
					mu.Unlock()
				}
			}
			offered.Add(int64(len(as)))
			return nil
		}
		consumer, err := alertintake.NewKafkaConsumer(alertintake.KafkaConfig{Brokers: k.Brokers(), Topic: topic,
			Group: topic, Keys: []alertsig.Key{key}}, alertintake.PolicySink(offer), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := consumer.Register(reg); err != nil {
			t.Fatal(err)
		}
		cctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- consumer.Run(cctx) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("consumer: %v", err)
			}
		})
		return stormSource{
			send: func(batch []policy.Alert) {
				docs := make([]alertdoc.Alert, len(batch))
				for i, a := range batch {
					docs[i] = detectorDoc(fmt.Sprintf("pattern-%032x", sent.Add(1)), a)
				}
				if err := sink.Send(ctx, docs); err != nil {
					t.Fatal(err)
				}
				n := forged.Add(1)
				doc := detectorDoc(fmt.Sprintf("pattern-f%031x", n), batch[0])
				doc.Pattern.AffectedHostsSample = []string{"sk-0", "sk-1", "sk-2"}
				r := &kgo.Record{Topic: topic, Key: []byte(doc.Service), Value: mustMarshal(t, doc)}
				if n%2 == 0 {
					forger.Sign(r, time.Now())
				}
				if err := raw.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			},
			drain: func() {
				for offered.Load() < sent.Load() && ctx.Err() == nil {
					time.Sleep(20 * time.Millisecond)
				}
				t.Logf("the intake offered %d of %d signed alerts", offered.Load(), sent.Load())
			},
			// Two synchronous produces per 10 ms tick, acknowledged by the
			// broker: on a loaded machine their round trips, not the
			// operator, set the pace.
			slack: 15 * time.Second,
		}
	})
	if offered.Load() != sent.Load() {
		t.Errorf("the operator was offered %d alerts, want the %d signed ones", offered.Load(), sent.Load())
	}
	if len(offeredForgery) > 0 {
		t.Errorf("%d forged alerts reached the operator, e.g. %s", len(offeredForgery), offeredForgery[0])
	}
	for _, c := range captures {
		if strings.HasPrefix(c.Spec.AlertID, "kafka/pattern-f") {
			t.Errorf("capture %s was armed for the forged alert %s", c.Name, c.Spec.AlertID)
		}
	}
	rejected := rejectedByReason(t, reg)
	if rejected[alertsig.ReasonUnsigned]+rejected[alertsig.ReasonBadSignature] != float64(forged.Load()) {
		t.Errorf("rejected %v, want the %d forgeries as unsigned or bad_signature", rejected, forged.Load())
	}
}

// detectorDoc is the detector's new-pattern alert that the intake turns
// into a (with the Kafka source's id).
func detectorDoc(id string, a policy.Alert) alertdoc.Alert {
	now := time.Now().UTC()
	p := alertdoc.PatternFacts{
		PatternID: a.PatternKey, Class: a.PatternClass, HostsAffected: len(a.Hosts), HostsTotal: 200,
		AffectedHostsSample: a.Hosts, LookbackStart: now.Add(-time.Hour), LookbackEnd: now,
	}
	if len(a.HWClasses) > 0 {
		p.Modifiers = []string{"hw-class-skewed"}
		p.HWClassSkew = map[string]float64{a.HWClasses[0]: 2}
	}
	return alertdoc.Alert{Schema: alertdoc.SchemaVersion, AlertID: id, Kind: alertdoc.KindPattern, Service: a.Service,
		DetectorVersion: "storm", GeneratedAt: now, Pattern: &alertdoc.PatternChange{Change: alertdoc.ChangeNew, PatternFacts: p}}
}

func mustMarshal(t *testing.T, a alertdoc.Alert) []byte {
	t.Helper()
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rejectedByReason reads the intake's rejected-records counter.
func rejectedByReason(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "spikehunt_alertintake_kafka_records_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
