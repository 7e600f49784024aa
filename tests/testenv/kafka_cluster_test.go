package testenv_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestKafkaClusterOptionsAreCheckedWithTheFieldToFix(t *testing.T) {
	notEmpty := t.TempDir()
	if err := os.WriteFile(notEmpty+"/x", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := t.TempDir(), t.TempDir()
	for _, tc := range []struct {
		name string
		opts testenv.KafkaClusterOptions
		want string
	}{
		{"a negative start timeout", testenv.KafkaClusterOptions{StartTimeout: -time.Second}, "StartTimeout"},
		{"two log dirs for three nodes", testenv.KafkaClusterOptions{LogDirs: []string{a, b}}, "one per node"},
		{"a relative log dir", testenv.KafkaClusterOptions{LogDirs: []string{a, b, "data"}}, "not an absolute path"},
		{"a log dir shared by two nodes", testenv.KafkaClusterOptions{LogDirs: []string{a, b, a}}, "each node needs its own"},
		{"a log dir that does not exist", testenv.KafkaClusterOptions{LogDirs: []string{a, b, a + "/missing"}}, "create it first"},
		{"a log dir with files in it", testenv.KafkaClusterOptions{LogDirs: []string{a, b, notEmpty}}, "not empty"},
		{"a property the cluster generates", testenv.KafkaClusterOptions{Properties: map[string]string{"listeners": "x"}}, "listeners"},
		{"an ssl property", testenv.KafkaClusterOptions{Properties: map[string]string{"ssl.keystore.location": "x"}}, "ssl.keystore.location"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tc.want)
			}
			if _, err := testenv.StartKafkaCluster(tc.opts); err == nil {
				t.Fatal("StartKafkaCluster started with options Validate refuses")
			}
		})
	}
	if err := (testenv.KafkaClusterOptions{LogDirs: []string{a, b, t.TempDir()}}).Validate(); err != nil {
		t.Fatalf("three empty log dirs refused: %v", err)
	}
}

// The cluster as the fault tests use it: topics of replication factor 3
// over TLS, acks=all writes that survive the leader's kill -9 (two of
// three in sync is enough), a node that comes back in sync, and a
// topic's second creation refused.
func TestKafkaClusterKeepsWritingWhenTheLeaderIsKilled(t *testing.T) {
	c, err := testenv.StartKafkaCluster(testenv.KafkaClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.LogTails(40))
		}
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	if got := len(c.Brokers()); got != testenv.KafkaClusterNodes {
		t.Fatalf("%d brokers, want %d", got, testenv.KafkaClusterNodes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.CreateTopic(ctx, "replicated", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(ctx, "replicated", 1); !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("second CreateTopic: %v, want TopicAlreadyExists", err)
	}
	st, err := c.Partition(ctx, "replicated", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.ISR) != 3 || st.Leader < 0 {
		t.Fatalf("after CreateTopic: %+v, want a leader and 3 in sync", st)
	}
	if ctl, err := c.ActiveController(ctx); err != nil || ctl < 0 || ctl >= testenv.KafkaClusterNodes {
		t.Fatalf("ActiveController() = %d, %v; want a node index", ctl, err)
	}
	cl, err := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("replicated"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, kgo.StringRecord("before")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(st.Leader); err != nil {
		t.Fatal(err)
	}
	if c.Running(st.Leader) {
		t.Fatalf("node %d runs after Kill", st.Leader)
	}
	if err := cl.ProduceSync(ctx, kgo.StringRecord("during")).FirstErr(); err != nil {
		t.Fatalf("acks=all write with one of three nodes down: %v", err)
	}
	after, err := c.Partition(ctx, "replicated", 0)
	if err != nil {
		t.Fatal(err)
	}
	if after.Leader == st.Leader || after.Leader < 0 {
		t.Fatalf("leader %d after killing node %d", after.Leader, st.Leader)
	}
	if err := c.Start(ctx, st.Leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitInSync(ctx, "replicated"); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx, after.Leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitInSync(ctx, "replicated"); err != nil {
		t.Fatal(err)
	}
	rd, err := c.Client(kgo.ConsumeTopics("replicated"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var got []string
	for len(got) < 2 && ctx.Err() == nil {
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if strings.Join(got, ",") != "before,during" {
		t.Fatalf("read %q, want before,during", got)
	}
}
