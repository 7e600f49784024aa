package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

var agentBin string

func TestMain(m *testing.M) {
	if op := os.Getenv(childOpEnv); op != "" {
		os.Exit(childMain(op))
	}
	dir, err := os.MkdirTemp("", "agent-bin-")
	if err != nil {
		panic(err)
	}
	agentBin = filepath.Join(dir, "spikehunt-agent")
	if out, err := exec.Command("go", "build", "-o", agentBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build agent: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	testenv.StopShared()
	os.RemoveAll(dir)
	os.Exit(code)
}

// agentProc is a running agent binary.
type agentProc struct {
	cmd     *exec.Cmd
	out     *testenv.SyncBuffer
	sock    string
	capSock string // the capture control socket
}

// startAgent runs the agent on free local ports with a spool in dir.
// Flags in extra override the defaults above them (the last one wins).
func startAgent(t testing.TB, brokers []string, spoolDir string, extra ...string) *agentProc {
	t.Helper()
	return startAgentBinary(t, agentBin, brokers, spoolDir, extra...)
}

// startAgentBinary is startAgent with the agent binary bin (a baseline
// build for a benchmark's comparison) instead of this tree's.
func startAgentBinary(t testing.TB, bin string, brokers []string, spoolDir string, extra ...string) *agentProc {
	t.Helper()
	tmp := t.TempDir()
	sock := filepath.Join(tmp, "agent.sock")
	args := append([]string{
		"--capture.dir", filepath.Join(tmp, "captures"), "--capture.socket", filepath.Join(tmp, "capture.sock"),
		"--kafka.brokers", strings.Join(brokers, ","), "--spool.dir", spoolDir, "--listen", "127.0.0.1:0",
		"--intake.line-unix", sock, "--intake.line-udp", "127.0.0.1:0", "--intake.otlp-grpc", "127.0.0.1:0",
		"--intake.otlp-http", "127.0.0.1:0", "--host-name", "test-node", "--hw-class", "gen5",
	}, extra...)
	p := &agentProc{out: &testenv.SyncBuffer{}, sock: sock, capSock: filepath.Join(tmp, "capture.sock")}
	// A test that moves the sockets waits for, and talks to, its own.
	for i := 0; i+1 < len(extra); i++ {
		switch extra[i] {
		case "--intake.line-unix":
			p.sock, sock = extra[i+1], extra[i+1]
		case "--capture.socket":
			p.capSock = extra[i+1]
		}
	}
	p.cmd = execAgentBinary(bin, args, p.out)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		if t.Failed() {
			t.Logf("agent output:\n%s", tail(p.out.String(), 40))
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(sock); err == nil {
			return p
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("agent did not open %s:\n%s", sock, p.out.String())
	return nil
}

func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func execAgent(args []string, out *testenv.SyncBuffer) *exec.Cmd {
	return execAgentBinary(agentBin, args, out)
}

func execAgentBinary(bin string, args []string, out *testenv.SyncBuffer) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	return cmd
}

// stop ends the agent gracefully.
func (p *agentProc) stop(t *testing.T) {
	p.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("agent did not stop:\n%s", tail(p.out.String(), 20))
	}
}

// sendLines writes line-protocol requests over the unix socket, blocking
// when the agent's socket buffer is full (so none is lost on the way).
func sendLines(t *testing.T, sock string, lines []string) {
	t.Helper()
	c, err := net.Dial("unixgram", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b bytes.Buffer
	for i, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
		if b.Len() > 7000 || i == len(lines)-1 {
			if _, err := c.Write(b.Bytes()); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
}

func traceID(i int) string { return fmt.Sprintf("%032x", i+1) }

// consumed is what the agent wrote to Kafka.
type consumed struct {
	spans       map[string]int // trace id → times seen
	weights     map[string]int64
	points      map[string]int // metric name → data points
	hosts       map[string]bool
	badInterval int
}

func consume(t *testing.T, k *testenv.Kafka, want func(c *consumed) bool, timeout time.Duration) *consumed {
	t.Helper()
	return consumeTopics(t, k, "otlp_spans", "otlp_metrics", want, timeout)
}

// consumeTopics is consume from other topics.
func consumeTopics(t *testing.T, k *testenv.Kafka, spansTopic, metricsTopic string, want func(c *consumed) bool, timeout time.Duration) *consumed {
	t.Helper()
	cl, err := k.Client(kgo.ConsumeTopics(spansTopic, metricsTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c := &consumed{spans: map[string]int{}, weights: map[string]int64{}, points: map[string]int{}, hosts: map[string]bool{}}
	deadline := time.Now().Add(timeout)
	lastProgress := time.Now()
	// Stop at what the test wants, at the timeout, or after 10 s without a
	// record once records flowed (what is missing then stays missing).
	for time.Now().Before(deadline) && !want(c) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		if fs.NumRecords() > 0 {
			lastProgress = time.Now()
		} else if len(c.spans) > 0 && time.Since(lastProgress) > 10*time.Second {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			switch r.Topic {
			case spansTopic:
				td, err := (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(r.Value)
				if err != nil {
					t.Errorf("undecodable span message: %v", err)
					return
				}
				for i := 0; i < td.ResourceSpans().Len(); i++ {
					rs := td.ResourceSpans().At(i)
					h, _ := rs.Resource().Attributes().Get("host.name")
					c.hosts[h.Str()] = true
					if string(r.Key) != h.Str() {
						t.Errorf("record key %q, host.name %q", r.Key, h.Str())
					}
					ss := rs.ScopeSpans().At(0).Spans()
					for j := 0; j < ss.Len(); j++ {
						s := ss.At(j)
						tid := s.TraceID()
						id := hex.EncodeToString(tid[:])
						c.spans[id]++
						w, _ := s.Attributes().Get("spikehunt.weight")
						c.weights[id] = w.Int()
					}
				}
			case metricsTopic:
				md, err := (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(r.Value)
				if err != nil {
					t.Errorf("undecodable metric message: %v", err)
					return
				}
				ms := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
				for i := 0; i < ms.Len(); i++ {
					m := ms.At(i)
					if m.Type() != pmetric.MetricTypeSum {
						c.points[m.Name()] += m.Gauge().DataPoints().Len()
						continue
					}
					dps := m.Sum().DataPoints()
					for j := 0; j < dps.Len(); j++ {
						if d := dps.At(j).Timestamp().AsTime().Sub(dps.At(j).StartTimestamp().AsTime()); d < 500*time.Millisecond || d > 5*time.Second {
							c.badInterval++
						}
					}
					c.points[m.Name()] += dps.Len()
				}
			}
		})
	}
	return c
}

// The agent end to end: line-protocol requests and kernel counters reach a
// real broker as OTLP, with the sampling weights and the host's identity.
func TestAgentExportsRequestsAndCountersToKafka(t *testing.T) {
	k := testenv.SharedKafka(t)
	p := startAgent(t, k.Brokers(), t.TempDir())
	var lines []string
	const n = 2000
	for i := 0; i < n; i++ {
		lat := 1000 + i%50 // fast: sampled 1 in 10 with weight 10
		if i%100 == 0 {
			lat = 900_000 // slow: always kept with weight 1
		}
		lines = append(lines, fmt.Sprintf("billy /get %d 200 %s %d", lat, traceID(i), 1000+i%8))
	}
	sendLines(t, p.sock, lines)
	c := consume(t, k, func(c *consumed) bool {
		return c.points["system.cpu.time"] > 0 && c.points["system.network.packet.count"] > 0 && weightSum(c) >= n*9/10
	}, 30*time.Second)
	for i := 0; i < n; i += 100 {
		if c.spans[traceID(i)] != 1 || c.weights[traceID(i)] != 1 {
			t.Fatalf("slow request %d: seen %d times with weight %d, want once with weight 1", i, c.spans[traceID(i)], c.weights[traceID(i)])
		}
	}
	if s := weightSum(c); s < n*8/10 || s > n*12/10 {
		t.Errorf("sum of weights %d for %d requests: sampling is biased", s, n)
	}
	if !c.hosts["test-node"] || len(c.hosts) != 1 {
		t.Errorf("hosts %v, want test-node", c.hosts)
	}
	if c.badInterval > 0 {
		t.Errorf("%d counter points with an interval outside 0.5–5 s", c.badInterval)
	}
	for _, m := range []string{"system.cpu.time", "spikehunt.softirqs", "system.network.packet.count", "system.disk.operations", "spikehunt.context_switches"} {
		if c.points[m] == 0 {
			t.Errorf("no %s points", m)
		}
	}
	p.stop(t)
}

func weightSum(c *consumed) int {
	s := 0
	for _, w := range c.weights {
		s += int(w)
	}
	return s
}

// A graceful stop with the broker unreachable ends in bounded time and
// says where the undelivered records are.
func TestAgentStopsPromptlyWhenTheBrokerIsDown(t *testing.T) {
	p := startAgent(t, []string{"127.0.0.1:1"}, t.TempDir())
	time.Sleep(2500 * time.Millisecond) // a couple of sampling passes to deliver
	start := time.Now()
	p.stop(t)
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("stopping took %v", d)
	}
	if out := p.out.String(); !strings.Contains(out, "they stay in the spool") || strings.Contains(out, "record not delivered") {
		t.Fatalf("shutdown report:\n%s", tail(out, 5))
	}
}
