package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/kafkasec"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// Against a broker that enforces ACLs, an ingester
// that may read and write its topics but not create one fails at start,
// within bounded time, with the kafka-topics.sh command that creates the
// missing dead-letter topic; once the topic exists it starts.
func TestAnIngestThatMayNotCreateTheDeadLetterTopicFailsAtStartSayingHowToCreateIt(t *testing.T) {
	user := testenv.KafkaUser{Name: "ingest-no-create", Password: "ingest-no-create-pw"}
	k, err := testenv.StartKafka(testenv.KafkaOptions{SASLSSL: &testenv.SASLSSLOptions{Users: []testenv.KafkaUser{user}, Authorize: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kafka broker log (tail):\n%s", k.Log())
		}
		if err := k.Stop(); err != nil {
			t.Error(err)
		}
	})
	st := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	n := topicSeq.Add(1)
	cfg := Config{
		Brokers: k.SecureBrokers(), Group: fmt.Sprintf("acl-g%d", n),
		SpansTopic: fmt.Sprintf("acl-spans%d", n), MetricsTopic: fmt.Sprintf("acl-metrics%d", n), DLQTopic: fmt.Sprintf("acl-dlq%d", n),
		MaxRows: 5000, MaxDelay: 200 * time.Millisecond, Instance: fmt.Sprintf("ingest-%d", n),
		Security: k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA512, user),
	}
	for _, topic := range []string{cfg.SpansTopic, cfg.MetricsTopic} {
		if err := k.CreateTopic(ctx, topic, 2); err != nil {
			t.Fatal(err)
		}
	}
	// Granted as the super user (the PLAINTEXT listener): everything the
	// ingester does with its topics and group, except CREATE.
	admin, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	principal := "User:" + user.Name
	acls := kadm.NewACLs().Allow(principal).AllowHosts().
		Topics(cfg.SpansTopic, cfg.MetricsTopic, cfg.DLQTopic).Groups(cfg.Group).
		Operations(kadm.OpRead, kadm.OpWrite, kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternLiteral)
	results, err := kadm.NewClient(admin).CreateACLs(ctx, acls)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil {
			t.Fatalf("grant %v %v on %s: %v", r.Operation, r.Type, r.Name, r.Err)
		}
	}

	start := time.Now()
	in, err := New(cfg, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithTimeout(ctx, 60*time.Second)
	err = in.Run(runCtx)
	stop()
	took := time.Since(start)
	if !errors.Is(err, errDLQRefused) {
		t.Fatalf("Run after %v: %v; want the dead-letter topic refused", took, err)
	}
	wantCmd := fmt.Sprintf("kafka-topics.sh --bootstrap-server %s --create --topic %s --partitions 1 --replication-factor 1", k.SecureBrokers()[0], cfg.DLQTopic)
	if !strings.Contains(err.Error(), wantCmd) {
		t.Errorf("Run: %v\nwant the command %q", err, wantCmd)
	}
	if took > 45*time.Second {
		t.Errorf("refused after %v, want well within the start-up bound", took)
	}

	if err := k.CreateTopic(ctx, cfg.DLQTopic, 1); err != nil {
		t.Fatal(err)
	}
	in, err = New(cfg, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop = context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- in.Run(runCtx) }()
	deadline := time.Now().Add(60 * time.Second)
	healthy := false
	for !healthy && time.Now().Before(deadline) {
		select {
		case err := <-done:
			stop()
			t.Fatalf("Run with the dead-letter topic created: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		healthy, _ = in.Health()
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if !healthy {
		_, why := in.Health()
		t.Fatalf("not healthy within 60 s with the dead-letter topic created: %s", why)
	}
}
