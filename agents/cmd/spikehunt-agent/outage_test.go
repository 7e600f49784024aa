package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// keepAll is a config that keeps every request, so each can be counted.
func keepAll(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(p, []byte("intake:\n  sample_every: 1\n  sampled_per_second: -1\nspool:\n  fsync_interval: 100ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// paced sends requests with unique trace ids at rate/s over the agent's
// unix socket from first to first+n-1, in datagrams of 50 lines.
func paced(ctx context.Context, sock string, first, n, rate int) (sent int, err error) {
	c, err := net.Dial("unixgram", sock)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	const perDgram = 50
	tick := time.NewTicker(time.Second * perDgram / time.Duration(rate))
	defer tick.Stop()
	var b strings.Builder
	for i := first; i < first+n; i += perDgram {
		b.Reset()
		for j := i; j < i+perDgram && j < first+n; j++ {
			fmt.Fprintf(&b, "billy /get %d 200 %s 7\n", 1000+j%500, traceID(j))
		}
		select {
		case <-ctx.Done():
			return sent, nil
		case <-tick.C:
		}
		if _, err := c.Write([]byte(b.String())); err != nil {
			return sent, err
		}
		sent = min(i+perDgram, first+n) - first
	}
	return sent, nil
}

// A 60 s broker outage under 5,000 requests/s: the agent spools, replays in
// order when the broker is back, and every request arrives exactly once.
func TestAgentDeliversEveryRequestExactlyOnceThroughABrokerOutage(t *testing.T) {
	k, err := testenv.StartKafka(testenv.KafkaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	p := startAgent(t, k.Brokers(), t.TempDir(), "--config", keepAll(t))
	const rate = 5000
	ctx := context.Background()
	before, err := paced(ctx, p.sock, 0, rate*5, rate) // 5 s with the broker up
	if err != nil {
		t.Fatal(err)
	}
	// Stop the broker for 60 s while the load goes on.
	done := make(chan int, 1)
	go func() {
		n, err := paced(ctx, p.sock, before, rate*60, rate)
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	if err := k.Pause(); err != nil {
		t.Fatal(err)
	}
	during := <-done
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := k.Restart(rctx); err != nil {
		t.Fatal(err)
	}
	after, err := paced(ctx, p.sock, before+during, rate*5, rate)
	if err != nil {
		t.Fatal(err)
	}
	total := before + during + after
	c := consume(t, k, func(c *consumed) bool { return len(c.spans) >= total }, 120*time.Second)
	missing, dups := 0, 0
	for i := 0; i < total; i++ {
		switch n := c.spans[traceID(i)]; {
		case n == 0:
			missing++
		case n > 1:
			dups++
		}
	}
	t.Logf("sent %d requests (%d during the outage): %d delivered, %d missing, %d duplicated", total, during, len(c.spans), missing, dups)
	if missing != 0 || dups != 0 {
		t.Fatalf("%d missing, %d duplicated of %d", missing, dups, total)
	}
	p.stop(t)
}

var metricsAddr = regexp.MustCompile(`metrics http://([0-9.:]+)/metrics`)

// kill -9 while the broker is down and the agent is spooling: a new agent
// on the same spool delivers everything the old one had spooled; what is
// lost is only what was still in memory (the exporter's open batch, at
// most export.max_delay of requests), and the restart reports the unclean
// end.
func TestAgentKilledWhileSpoolingLosesAtMostItsOpenBatch(t *testing.T) {
	k, err := testenv.StartKafka(testenv.KafkaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	if err := k.Pause(); err != nil { // the destination is down from the start
		t.Fatal(err)
	}
	spoolDir := t.TempDir()
	cfg := keepAll(t)
	p := startAgent(t, k.Brokers(), spoolDir, "--config", cfg)
	const rate = 2000
	ctx, stop := context.WithCancel(context.Background())
	sentCh := make(chan int, 1)
	go func() {
		n, _ := paced(ctx, p.sock, 0, rate*60, rate)
		sentCh <- n
	}()
	time.Sleep(5 * time.Second)
	p.cmd.Process.Signal(syscall.SIGKILL) // mid-stream
	p.cmd.Wait()
	stop()
	sent := <-sentCh
	rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := k.Restart(rctx); err != nil {
		t.Fatal(err)
	}
	p2 := startAgent(t, k.Brokers(), spoolDir, "--config", cfg)
	c := consume(t, k, func(c *consumed) bool { return len(c.spans) >= sent }, 60*time.Second)
	lost := sent - len(c.spans)
	// The bound: the exporter's open batch (max_delay 200 ms of requests)
	// plus what sat in the socket and the intake queue at the kill.
	bound := rate*200/1000 + 1000
	t.Logf("sent %d before the kill, delivered %d after restart: %d lost (bound %d)", sent, len(c.spans), lost, bound)
	if lost < 0 || lost > bound {
		t.Fatalf("lost %d requests, bound %d", lost, bound)
	}
	time.Sleep(300 * time.Millisecond)
	if out := p2.out.String(); !strings.Contains(out, `"Clean":false`) {
		t.Fatalf("the restarted agent did not report an unclean spool:\n%s", tail(out, 10))
	}
	p2.stop(t)
}
