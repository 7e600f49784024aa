package export

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/kafkasec"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkKafkaSinkPlaintextVsSASLSSL produces the agent's export
// requests (2,000 spans each, the exporter's default batch) through
// KafkaSink to one broker, over its PLAINTEXT and its SASL_SSL listener
// (SCRAM-SHA-512): the cost of TLS on the agent's path, as MB/s and
// requests/s of the same sink and broker.
func BenchmarkKafkaSinkPlaintextVsSASLSSL(b *testing.B) {
	k := testenv.SharedSecureKafka(b)
	payload := benchSpans(b, 2000)
	for _, tc := range []struct {
		name    string
		brokers []string
		sec     kafkasec.Config
	}{
		{"plaintext", k.Brokers(), kafkasec.Config{}},
		{"sasl_ssl", k.SecureBrokers(), k.ClientSecurity(b, kafkasec.MechanismSCRAMSHA512, testenv.SecureKafkaUser)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			topic := fmt.Sprintf("bench-%s-%d", tc.name, time.Now().UnixNano())
			if err := k.CreateTopic(context.Background(), topic, 1); err != nil {
				b.Fatal(err)
			}
			sink, err := NewKafkaSink(KafkaConfig{Brokers: tc.brokers, TracesTopic: topic, MetricsTopic: topic, Key: "node-1", Security: tc.sec})
			if err != nil {
				b.Fatal(err)
			}
			defer sink.Close()
			// Connected and authenticated before the clock starts.
			if err := sink.Check(context.Background()); err != nil {
				b.Fatal(err)
			}
			done := make(chan error, 1024)
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			inflight := 0
			for range b.N {
				for {
					err := sink.Send(KindTraces, payload, func(err error) { done <- err })
					if err == nil {
						inflight++
						break
					}
					if !errors.Is(err, ErrFull) {
						b.Fatal(err)
					}
					if err := <-done; err != nil {
						b.Fatal(err)
					}
					inflight--
				}
				for inflight > 512 {
					if err := <-done; err != nil {
						b.Fatal(err)
					}
					inflight--
				}
			}
			for ; inflight > 0; inflight-- {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "export.kafka_"+tc.name+"_requests_per_s:requests/s")
		})
	}
}

// benchSpans is one export request of n requests with distinct ids.
func benchSpans(b *testing.B, n int) []byte {
	b.Helper()
	t0 := testenv.RecentDay().Add(3 * time.Hour)
	reqs := make([]telemetry.Request, n)
	for i := range reqs {
		r := &reqs[i]
		r.Service, r.Endpoint, r.Status = "billy", fmt.Sprintf("/v1/item/%d", i%16), "200"
		r.Start, r.Duration = t0.Add(time.Duration(i)*time.Millisecond), time.Duration(1000+i%5000)*time.Microsecond
		binary.BigEndian.PutUint64(r.TraceID[8:], uint64(i))
		binary.BigEndian.PutUint64(r.SpanID[:], uint64(i))
		r.Weight = 10
	}
	p, err := otlpwire.EncodeSpans(telemetry.Resource{HostName: "node-1", NodeName: "node-1", HWClass: "gen5"}, reqs)
	if err != nil {
		b.Fatal(err)
	}
	return p
}
