package testenv_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// hostAddress is an IPv4 address of this machine other than loopback:
// what a test cluster's pods reach the host on.
func hostAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatalf("no IPv4 address other than loopback among %v", addrs)
	return ""
}

func TestKafkaAndS3ListenAndAdvertiseTheHostTheyAreGiven(t *testing.T) {
	host := hostAddress(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	k, err := testenv.StartKafka(testenv.KafkaOptions{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	if got := k.Brokers(); len(got) != 1 || !strings.HasPrefix(got[0], host+":") {
		t.Fatalf("Brokers() = %v, want one address on %s", got, host)
	}
	if err := k.CreateTopic(ctx, "listen-host", 1); err != nil {
		t.Fatal(err)
	}
	// The client learns the broker's address from metadata: a record
	// round-trips only if the advertised listener is the given host.
	cl, err := k.Client(kgo.ConsumeTopics("listen-host"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "listen-host", Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fs := cl.PollFetches(ctx)
	if err := fs.Err(); err != nil {
		t.Fatal(err)
	}
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "hello" {
		t.Fatalf("fetched %d records, want the one produced", len(recs))
	}

	s3 := testenv.S3At(t, host)
	if !strings.HasPrefix(s3.Endpoint, host+":") {
		t.Fatalf("S3At endpoint %s, want one on %s", s3.Endpoint, host)
	}
	sc, err := s3.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.PutObject(ctx, s3.Bucket, "k", strings.NewReader("v"), 1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.StartKafka(testenv.KafkaOptions{Host: "node-1"}); err == nil || !strings.Contains(err.Error(), "not an IP address") {
		t.Errorf("StartKafka with Host %q: %v, want an error saying it is not an IP address", "node-1", err)
	}
}
