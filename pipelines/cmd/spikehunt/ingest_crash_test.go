package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The crash test of exactly-once ingest: requests flow from Kafka while
// the ingester is killed with SIGKILL again and again, half the time at a
// random moment and half right after an insert whose offsets are not yet
// committed. Afterwards every request is in ClickHouse exactly once. The
// control run, without deduplication, must show duplicates: the test can
// fail.
func TestIngestExactlyOnceAcrossKill9(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dedup    bool
		requests int
		kills    int
	}{
		{"dedup", true, 1_000_000, 20},
		{"control-without-dedup", false, 200_000, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count, unique, procs := crashRun(t, tc.dedup, tc.requests, tc.kills)
			t.Cleanup(func() {
				if t.Failed() {
					logIngestRuns(t, procs)
				}
			})
			t.Logf("%d requests sent, %d rows, %d unique (trace_id, span_id), %d kills", tc.requests, count, unique, tc.kills)
			if unique != tc.requests {
				t.Fatalf("%d unique requests in ClickHouse, want %d: requests were lost", unique, tc.requests)
			}
			switch {
			case tc.dedup && count != tc.requests:
				t.Fatalf("%d rows for %d requests: duplicates", count, tc.requests)
			case !tc.dedup && count == tc.requests:
				t.Fatalf("no duplicates without deduplication: the kills never hit the window the handshake guards, so the test proves nothing")
			}
		})
	}
}

var crashSeq int

func crashRun(t *testing.T, dedup bool, requests, kills int) (count, unique int, procs []*ingestProc) {
	k := testenv.SharedKafka(t)
	ctx := context.Background()
	crashSeq++
	topic, group := fmt.Sprintf("crash-spans-%d", crashSeq), fmt.Sprintf("crash-%d", crashSeq)
	for _, tp := range []string{topic, topic + "-metrics", topic + "-dlq"} {
		if err := k.CreateTopic(ctx, tp, 3); err != nil {
			t.Fatal(err)
		}
	}
	produceRequests(t, k, topic, requests)

	dir := t.TempDir()
	args := []string{"ingest", "--dsn", "chdb://" + dir + "?database=crash", "--migrate", "--listen", "",
		"--kafka.brokers", k.Brokers()[0], "--group", group, "--instance-id", "crash-test", "--kafka.session-timeout", "6s",
		"--topic.spans", topic, "--topic.metrics", topic + "-metrics", "--topic.dlq", topic + "-dlq",
		// Batches close at 200 ms even while behind (the catch-up delay would
		// hold them up to 10 s): every run inserts, so the kills land around
		// inserts and the control run is sure to show duplicates.
		"--batch.rows", "20000", "--batch.delay", "200ms", "--batch.catch-up-delay", "200ms"}
	if !dedup {
		args = append(args, "--unsafe.no-dedup")
	}
	rng := rand.New(rand.NewPCG(uint64(crashSeq), 42))
	for i := range kills {
		// Even runs kill themselves right after an insert, so the first run
		// is one of them: a run killed at a random moment may already have
		// consumed everything (the control run has 10 batches), and then no
		// kill would land between an insert and its commit.
		p := startIngest(t, args, i%2 == 0, 1+rng.IntN(3))
		procs = append(procs, p)
		if i%2 == 1 { // a random moment
			time.Sleep(time.Duration(300+rng.IntN(2200)) * time.Millisecond)
			p.cmd.Process.Kill()
		}
		p.wait(t, 10*time.Second) // a self-kill comes after its inserts; one with nothing left to insert is killed
	}
	p := startIngest(t, args, false, 0)
	procs = append(procs, p)
	waitLagZero(t, k, group, topic)
	p.cmd.Process.Signal(os.Interrupt)
	p.wait(t, 30*time.Second)

	// Read through serve-clickhouse in a process of its own: this test
	// process may hold the shared embedded engine open on another directory
	// (one engine per process).
	st := serveStore(t, "chdb://"+dir+"?database=crash")
	tab, err := store.Select(ctx, st, "SELECT count(), uniqExact(trace_id, span_id) FROM requests")
	if err != nil {
		t.Fatal(err)
	}
	count, _ = strconv.Atoi(tab.Rows[0][0])
	unique, _ = strconv.Atoi(tab.Rows[0][1])
	if unique != requests {
		// Where the missing rows went: the dead-letter topic, or rows that
		// never arrived.
		t.Logf("dead letters on %s-dlq: %d", topic, countMessages(t, k, topic+"-dlq"))
	}
	return count, unique, procs
}

// countMessages counts the messages of topic.
func countMessages(t testing.TB, k *testenv.Kafka, topic string) int64 {
	cl, err := k.Client()
	if err != nil {
		t.Log(err)
		return -1
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Log(err)
		return -1
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// logIngestRuns logs what each ingest run said beyond its info lines.
func logIngestRuns(t *testing.T, procs []*ingestProc) {
	for i, p := range procs {
		var keep []string
		for _, l := range strings.Split(p.out.String(), "\n") {
			if !strings.Contains(l, "level=INFO") && !strings.Contains(l, `"level":"INFO"`) && strings.TrimSpace(l) != "" {
				keep = append(keep, l)
			}
		}
		if len(keep) > 40 {
			keep = append(keep[:20], append([]string{"…"}, keep[len(keep)-20:]...)...)
		}
		t.Logf("ingest run %d (%s):\n%s", i, p.cmd.ProcessState, strings.Join(keep, "\n"))
	}
}

// produceRequests sends n requests from 300 hosts as agent export
// requests of 1,000 spans, keyed by host.
func produceRequests(t testing.TB, k *testenv.Kafka, topic string, n int) {
	t.Helper()
	produceRequestsFrom(t, k, topic, n, 300)
}

// produceRequestsFrom sends n requests from hosts hosts, the hosts in
// turn, as agent export requests of 1,000 spans, keyed by host.
func produceRequestsFrom(t testing.TB, k *testenv.Kafka, topic string, n, hosts int) {
	t.Helper()
	cl, err := k.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Within the ingest's accepted window (the requests TTL back), on
	// whatever day the test runs.
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Hour)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var perr error
	const perMessage = 1000
	reqs := make([]telemetry.Request, perMessage)
	for m := 0; m*perMessage < n; m++ {
		host := fmt.Sprintf("node-%03d", m%hosts)
		for i := range reqs {
			id := m*perMessage + i
			r := &reqs[i]
			r.Service, r.Endpoint, r.Status, r.Weight = "billy", "/v1/item", "200", 10
			r.Start, r.Duration = t0.Add(time.Duration(id)*time.Microsecond), time.Duration(500+id%4000)*time.Microsecond
			// Ids as random as real ones (they do not compress), and
			// unique: splitmix64 is a bijection.
			binary.BigEndian.PutUint64(r.TraceID[:8], splitmix(uint64(id)^0x5bd1e995))
			binary.BigEndian.PutUint64(r.TraceID[8:], splitmix(uint64(id)))
			binary.BigEndian.PutUint64(r.SpanID[:], splitmix(uint64(id)^0x9e3779b9))
		}
		b, err := otlpwire.EncodeSpans(telemetry.Resource{HostName: host, HWClass: "gen5"}, reqs)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte(host), Value: b}, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				perr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if perr != nil {
		t.Fatal(perr)
	}
}

// splitmix64's finalizer.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

type ingestProc struct {
	cmd *exec.Cmd
	out *bytes.Buffer
}

// startIngest starts the binary; with selfKill it SIGKILLs itself after
// its killAfter-th insert, before committing.
func startIngest(t testing.TB, args []string, selfKill bool, killAfter int) *ingestProc {
	t.Helper()
	p := &ingestProc{cmd: exec.Command(spikehuntBin, args...), out: &bytes.Buffer{}}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.Env = os.Environ()
	if selfKill {
		p.cmd.Env = append(p.cmd.Env, "SPIKEHUNT_TEST_KILL_AFTER_INSERTS="+strconv.Itoa(killAfter))
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

// wait waits for the process to end, killing it after timeout.
func (p *ingestProc) wait(t testing.TB, timeout time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-done
	}
}

// waitLagZero waits up to 3 minutes until the group has committed every
// message of topic.
func waitLagZero(t testing.TB, k *testenv.Kafka, group, topic string) {
	t.Helper()
	waitLagZeroWithin(t, k, group, topic, 3*time.Minute)
}

// waitLagZeroWithin waits up to limit until the group has committed every
// message of topic.
func waitLagZeroWithin(t testing.TB, k *testenv.Kafka, group, topic string, limit time.Duration) {
	t.Helper()
	cl, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		ends, err1 := adm.ListEndOffsets(ctx, topic)
		committed, err2 := adm.FetchOffsets(ctx, group)
		if err1 == nil && err2 == nil {
			behind := int64(0)
			ends.Each(func(o kadm.ListedOffset) {
				c, ok := committed.Lookup(topic, o.Partition)
				if !ok {
					behind += o.Offset
					return
				}
				behind += o.Offset - c.At
			})
			if behind == 0 {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("group %s still behind on %s after %s", group, topic, limit)
}
