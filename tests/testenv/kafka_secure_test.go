package testenv_test

import (
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestSASLSSLOptionsRefuseWhatKafkasSyntaxCannotCarry(t *testing.T) {
	for _, o := range []testenv.SASLSSLOptions{
		{},
		{Users: []testenv.KafkaUser{{Name: "a"}}},
		{Users: []testenv.KafkaUser{{Name: "a", Password: `b"; user_c="d`}}},
		{Users: []testenv.KafkaUser{{Name: "a,b", Password: "c"}}},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: accepted", o)
		}
	}
}

// BenchmarkKafkaStart starts a broker with and without the SASL_SSL
// listener (its CA and certificate made in Go, SCRAM users written at
// format time): what a test package pays for SharedSecureKafka.
func BenchmarkKafkaStart(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts testenv.KafkaOptions
	}{
		{"plaintext", testenv.KafkaOptions{}},
		{"sasl_ssl", testenv.KafkaOptions{SASLSSL: &testenv.SASLSSLOptions{Users: []testenv.KafkaUser{testenv.SecureKafkaUser}}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				start := time.Now()
				k, err := testenv.StartKafka(tc.opts)
				if err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				if tc.opts.SASLSSL != nil && (len(k.SecureBrokers()) != 1 || !strings.HasPrefix(k.SecureBrokers()[0], "127.0.0.1:")) {
					b.Errorf("SecureBrokers() = %v", k.SecureBrokers())
				}
				if err := k.Stop(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/start")
		})
	}
}
