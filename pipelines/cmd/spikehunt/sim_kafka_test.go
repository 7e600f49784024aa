package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/spikehunt/spikehunt/kafkasec"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// spikehunt sim --kafka.brokers takes the same --kafka.tls.* and
// --kafka.sasl.* flags as the ingest: over SASL_SSL its messages reach the
// topics, and a refused password is an error at start, not a hang.
func TestSimProducesOverSASLSSLWithTheIngestsKafkaFlags(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	flags := func(sec kafkasec.Config) []string {
		return []string{"sim", "--kafka.brokers", k.SecureBrokers()[0], "--hosts", "2", "--duration", "2m", "--seed", "3",
			"--kafka.tls.enabled", "--kafka.tls.ca-file", sec.TLS.CAFile,
			"--kafka.sasl.mechanism", sec.SASL.Mechanism, "--kafka.sasl.username", sec.SASL.Username, "--kafka.sasl.password-file", sec.SASL.PasswordFile}
	}

	wrong := k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA512, testenv.KafkaUser{Name: testenv.SecureKafkaUser.Name, Password: "wrong"})
	start := time.Now()
	code, _, errs := runCLI(t, flags(wrong)...)
	if code != 1 || !strings.Contains(errs, "SASL SCRAM-SHA-512 authentication refused") {
		t.Fatalf("wrong password: exit %d, stderr %q; want exit 1 saying the authentication was refused", code, errs)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("refused after %v, want within the 15 s check", took)
	}

	code, _, errs = runCLI(t, flags(k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA512, testenv.SecureKafkaUser))...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	cl, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, "otlp_spans", "otlp_metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"otlp_spans", "otlp_metrics"} {
		var n int64
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic == topic && o.Err == nil {
				n += o.Offset
			}
		})
		if n == 0 {
			t.Errorf("%s has no messages after the simulation", topic)
		}
	}
}
