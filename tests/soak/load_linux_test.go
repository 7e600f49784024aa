package soak

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// agentRate is the requests a second each agent binary is sent, with
// unique trace ids: a busy node's worth, every one kept (keepAll), so
// that each can be counted.
const agentRate = 250

const keepAll = "intake:\n  sample_every: 1\n  sampled_per_second: -1\nspool:\n  fsync_interval: 100ms\n  max_bytes: 8388608\n  segment_bytes: 1048576\n"

// agent is one agent binary, a node of the soak, and the load on its
// line-protocol socket.
type agent struct {
	name, spool, clockFile, metrics string
	p                               *testenv.Proc
	// Requests sent: trace ids idPrefix·1 … idPrefix·sent, and when each
	// datagram of them went (its last id), for the accounting of the
	// faults' windows.
	idPrefix byte
	sent     atomic.Int64
	mu       sync.Mutex
	marks    []mark
	cancel   context.CancelFunc
	done     chan error
}

type mark struct {
	at   time.Time
	last int64
}

func startAgent(t testing.TB, c *testenv.KafkaCluster, dir, name string, prefix byte, spool string) *agent {
	t.Helper()
	a := &agent{name: name, spool: spool, clockFile: filepath.Join(dir, name+".clock"), metrics: freeAddr(t), idPrefix: prefix}
	cfg, sock := filepath.Join(dir, name+".yaml"), filepath.Join(dir, name+".sock")
	if err := os.WriteFile(cfg, []byte(keepAll), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--config", cfg, "--spool.dir", spool, "--listen", a.metrics,
		"--capture.enabled=false", "--capture.dir", filepath.Join(dir, name+"-captures"), "--capture.socket", filepath.Join(dir, name+"-capture.sock"),
		"--intake.line-unix", sock, "--intake.line-udp", "", "--intake.otlp-grpc", "", "--intake.otlp-http", "",
		"--host-name", name, "--hw-class", "gen5", "--debug.clock-offset-file", a.clockFile}, tlsFlags(c)...)
	a.p = testenv.StartProc(t, name, agentBin, args...)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if !a.p.Alive() || time.Now().After(deadline) {
			t.Fatalf("agent %s did not open %s:\n%s", name, sock, testenv.Tail(a.p.Out.String(), 30))
		}
	}
	conn, err := net.Dial("unixgram", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel, a.done = cancel, make(chan error, 1)
	go func() {
		defer conn.Close()
		a.done <- a.run(ctx, conn)
	}()
	t.Cleanup(func() { a.stop() })
	return a
}

// traceID is request n's id: the agent's prefix byte, then n.
func (a *agent) traceID(n int64) string { return fmt.Sprintf("%02x%030x", a.idPrefix, n) }

// run sends agentRate requests a second in datagrams of 25; a datagram
// waits while the agent's socket buffer is full, so none is lost before
// the agent.
func (a *agent) run(ctx context.Context, c net.Conn) error {
	const perDgram = 25
	tick := time.NewTicker(time.Second * perDgram / agentRate)
	defer tick.Stop()
	var b strings.Builder
	for next := int64(1); ; next += perDgram {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		b.Reset()
		for i := next; i < next+perDgram; i++ {
			fmt.Fprintf(&b, "soak /get %d 200 %s 7\n", 1000+i%500, a.traceID(i))
		}
		if _, err := c.Write([]byte(b.String())); err != nil {
			return fmt.Errorf("send to agent %s: %w", a.name, err)
		}
		a.sent.Store(next + perDgram - 1)
		a.mu.Lock()
		a.marks = append(a.marks, mark{time.Now(), next + perDgram - 1})
		a.mu.Unlock()
	}
}

func (a *agent) stop() (int64, error) {
	a.cancel()
	err := <-a.done
	a.done <- err
	return a.sent.Load(), err
}

// idsIn is the range of trace ids sent within [from, to].
func (a *agent) idsIn(from, to time.Time) (lo, hi int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	lo, hi = -1, -1
	prev := int64(0)
	for _, m := range a.marks {
		if !m.at.Before(from) && !m.at.After(to) {
			if lo < 0 {
				lo = prev + 1
			}
			hi = m.last
		}
		prev = m.last
	}
	return lo, hi
}

func tlsFlags(c *testenv.KafkaCluster) []string {
	sec := c.ClientSecurity()
	return []string{"--kafka.brokers", strings.Join(c.Brokers(), ","), "--kafka.tls.enabled", "--kafka.tls.ca-file", sec.TLS.CAFile}
}

// fleet is the rest of the fleet: hosts node-0000 … as their agents
// would send them (sampled spans and kernel counters, OTLP, keyed by
// host), made by the simulator one minute at a time, a minute after
// that minute began, and produced to the cluster over TLS like an
// agent's records (idempotent, acks=all).
type fleet struct {
	cfg     sim.Config
	sink    *sim.KafkaSink
	kept    atomic.Int64 // spans sent: each is one row of requests
	points  atomic.Int64
	windows atomic.Int64
	slowest atomic.Int64 // ns, the longest a minute took to make and hand over
	cancel  context.CancelFunc
	done    chan error
}

const fleetWindow = time.Minute // sim's shortest run

func startFleet(t testing.TB, c *testenv.KafkaCluster, hosts int, rps float64, log *logger) *fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sink, err := sim.NewKafkaSink(ctx, c.Brokers(), "", "", c.ClientSecurity())
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{cfg: sim.Config{Scenario: sim.Healthy, Hosts: hosts, RPS: rps, Duration: fleetWindow}, sink: sink, cancel: cancel, done: make(chan error, 1)}
	start := time.Now().UTC().Truncate(time.Second)
	go func() { f.done <- f.run(ctx, start, log) }()
	t.Cleanup(func() { f.stop() })
	return f
}

func (f *fleet) run(ctx context.Context, start time.Time, log *logger) error {
	for k := 0; ; k++ {
		from := start.Add(time.Duration(k) * fleetWindow)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(from.Add(fleetWindow))):
		}
		cfg := f.cfg
		cfg.Start, cfg.Seed = from, uint64(k+1) // a seed per minute: trace ids never repeat
		t0 := time.Now()
		_, st, err := sim.Run(context.WithoutCancel(ctx), cfg, f.sink, nil)
		if err != nil {
			return fmt.Errorf("fleet minute %d: %w", k, err)
		}
		f.kept.Add(st.Kept)
		f.points.Add(st.Points)
		f.windows.Add(1)
		if d := int64(time.Since(t0)); d > f.slowest.Load() {
			f.slowest.Store(d)
		}
		if k == 0 {
			log.printf("fleet: first minute of %d hosts: %d spans, %d counter points, %d messages, made in %.1f s", cfg.Hosts, st.Kept, st.Points, st.Messages, time.Since(t0).Seconds())
		}
	}
}

// stop ends the fleet after the minute in hand and flushes the producer.
func (f *fleet) stop() error {
	if f.cancel == nil {
		return nil
	}
	f.cancel()
	err := <-f.done
	f.done <- err
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if cerr := f.sink.Close(ctx); err == nil && cerr != nil {
		err = fmt.Errorf("fleet: flush: %w", cerr)
	}
	f.cancel = nil
	return err
}

var servingOn = regexp.MustCompile(`on http://(\S+)\n`)
