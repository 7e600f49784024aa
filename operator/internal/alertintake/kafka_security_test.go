package alertintake

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/kafkasec"
	"github.com/spikehunt/spikehunt/pipelines/services/alerts"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The alert path over SASL_SSL: the detector's sink (SCRAM-SHA-512,
// signed) → the broker's SASL_SSL listener → this consumer (SCRAM-SHA-256)
// → the sink the operator's controllers read.
func TestSignedAlertsTravelOverSASLSSLFromDetectorToIntake(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic, group := uniqueName("spikehunt.alerts.sasl-ssl"), uniqueName("intake-sasl-ssl")
	if err := k.CreateTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	sink, err := alerts.NewKafkaSink(alerts.KafkaConfig{
		Brokers: k.SecureBrokers(), Topic: topic, Signer: testSigner(t, testKey),
		Security: k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA512, testenv.SecureKafkaUser),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	if err := sink.Check(ctx); err != nil {
		t.Fatal(err)
	}
	a := detectorSpikeGroupAlert(time.Now().UTC(), "spikegroup-5a5150000000000000000000000000cc")
	if err := sink.Send(ctx, []alertdoc.Alert{a}); err != nil {
		t.Fatal(err)
	}

	rec := &recordingSink{}
	runConsumer(t, KafkaConfig{Brokers: k.SecureBrokers(), Topic: topic, Group: group,
		Security: k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA256, testenv.SecureKafkaUser)}, rec)
	for ctx.Err() == nil {
		if got, _ := rec.alerts(); len(got) > 0 {
			if len(got) != 1 || got[0].RawID != a.AlertID {
				t.Fatalf("received %+v, want the one alert %s", got, a.AlertID)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the alert did not reach the intake's sink")
}

// An intake that does not trust the broker's CA ends Run at once with what
// to fix; the operator then exits instead of waiting for alerts that
// cannot come.
func TestIntakeWithAnUnknownCAStopsSayingSo(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	sec := k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA512, testenv.SecureKafkaUser)
	other, err := testenv.NewTestCA("not the broker's CA")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sec.TLS.CAFile, other.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewKafkaConsumer(KafkaConfig{Brokers: k.SecureBrokers(), Topic: uniqueName("t"), Keys: nil, AllowUnsigned: true, Security: sec}, &recordingSink{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, kafkasec.ErrRefused) || !strings.Contains(err.Error(), "not issued by a CA of kafka.tls.ca-file") {
			t.Fatalf("Run: %v; want ErrRefused naming the CA file", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run still waits 20 s later")
	}
}

// The detector's sink with a wrong password: the start-up check and a
// Send both say the authentication was refused, Send within its timeout.
func TestDetectorSinkWithAWrongPasswordSaysSo(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	sink, err := alerts.NewKafkaSink(alerts.KafkaConfig{
		Brokers: k.SecureBrokers(), Topic: uniqueName("t"), Signer: testSigner(t, testKey), SendTimeout: 2 * time.Second,
		Security: k.ClientSecurity(t, kafkasec.MechanismPlain, testenv.KafkaUser{Name: testenv.SecureKafkaUser.Name, Password: "wrong"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sink.Check(ctx); !errors.Is(err, kafkasec.ErrRefused) {
		t.Errorf("Check: %v, want ErrRefused", err)
	}
	start := time.Now()
	err = sink.Send(ctx, []alertdoc.Alert{detectorSpikeGroupAlert(time.Now().UTC(), "spikegroup-00000000000000000000000000000bad")})
	if !errors.Is(err, kafkasec.ErrRefused) || !strings.Contains(err.Error(), "SASL PLAIN authentication refused") {
		t.Errorf("Send: %v; want ErrRefused saying the authentication was refused", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Send returned after %v, want within its 2 s timeout and the 5 s check", took)
	}
}
