package kafkacluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The agent's topics, one partition each: the agent keys its records by
// host, so one host's requests are one partition, whose leader the faults
// aim at.
const spansTopic, metricsTopic = "otlp_spans", "otlp_metrics"

// chain is the whole path under load: the cluster, the store, the ingest,
// the agent, the load on the agent and a probe reading the spans topic.
type chain struct {
	cluster *testenv.KafkaCluster
	st      store.Store
	ingest  *testenv.Proc
	agent   *testenv.Proc
	load    *load
	probe   *probe
}

// startChain starts the cluster with opts, the topics, the store, the
// ingest and the agent, then the load, and returns once requests have
// reached the store.
func startChain(t testing.TB, opts testenv.KafkaClusterOptions) *chain {
	t.Helper()
	c, err := testenv.StartKafkaCluster(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.LogTails(30))
		}
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, topic := range []string{spansTopic, metricsTopic} {
		if err := c.CreateTopic(ctx, topic, 1); err != nil {
			t.Fatal(err)
		}
	}
	ch := &chain{cluster: c}
	var dsn string
	dsn, ch.st = startStore(t)
	ch.ingest = startIngest(t, c, dsn)
	var sock string
	ch.agent, sock = startAgent(t, c)
	ch.probe = startProbe(t, c, spansTopic)
	ch.load = startLoad(t, sock)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if _, unique, err := stored(ctx, ch.st); err == nil && unique > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no request reached the store within a minute of the start")
		}
	}
	return ch
}

// inSync waits until every partition of the chain's topics and the
// group offsets is back on all three nodes, and fails t if that takes
// longer than limit.
func (ch *chain) inSync(t testing.TB, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := ch.cluster.WaitInSync(ctx, spansTopic, metricsTopic, "__consumer_offsets"); err != nil {
		t.Fatalf("the cluster did not recover: %v", err)
	}
}

// outcome is what a fault run measured.
type outcome struct {
	sent, rows, unique int64
	pause              time.Duration // longest stretch with no new record readable
}

// finish lets the load run on for a few seconds after the recovery (so
// the pause's window ends in steady flow), stops it, waits until the
// store holds every request sent, and checks the chain: each request
// stored exactly once, the agent and the ingest still the processes
// started at the beginning. from is the fault's start.
func (ch *chain) finish(t testing.TB, from time.Time) outcome {
	t.Helper()
	time.Sleep(3 * time.Second)
	to := time.Now()
	sent, err := ch.load.stop()
	if err != nil {
		t.Fatal(err)
	}
	o := outcome{sent: sent, pause: ch.probe.longestGap(from, to)}
	ctx := context.Background()
	deadline := time.Now().Add(90 * time.Second)
	for {
		o.rows, o.unique, err = stored(ctx, ch.st)
		if err == nil && o.unique >= sent {
			// A duplicate would come with the same batches: give a late
			// one the ingest's batch delay, twice over, to show.
			time.Sleep(2 * time.Second)
			o.rows, o.unique, err = stored(ctx, ch.st)
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	lost, dup := sent-o.unique, o.rows-o.unique
	t.Logf("sent %d requests, stored %d rows, %d distinct: %d lost, %d duplicated; pause (longest stretch without a new record readable) %.1f s",
		sent, o.rows, o.unique, lost, dup, o.pause.Seconds())
	for _, p := range []*testenv.Proc{ch.agent, ch.ingest} {
		if said := complaints(p.Out.String(), 6); said != "" {
			t.Logf("the %s's warnings and errors:\n%s", p.Name, said)
		} else {
			t.Logf("the %s logged no warning or error", p.Name)
		}
		if !p.Alive() {
			t.Errorf("the %s exited during the fault (%v): it needed a restart", p.Name, p.Cmd.ProcessState)
		}
	}
	if lost != 0 || dup != 0 {
		t.Fatalf("%d of %d requests lost, %d duplicated", lost, sent, dup)
	}
	return o
}

// complaints are the first n warning and error lines of a process's
// output (slog's text or JSON), and how many there were in all.
func complaints(out string, n int) string {
	var keep []string
	total := 0
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, "level=WARN") && !strings.Contains(l, "level=ERROR") &&
			!strings.Contains(l, `"level":"WARN"`) && !strings.Contains(l, `"level":"ERROR"`) {
			continue
		}
		if total++; len(keep) < n {
			keep = append(keep, l)
		}
	}
	if total > n {
		keep = append(keep, fmt.Sprintf("… %d lines in all", total))
	}
	return strings.Join(keep, "\n")
}
