package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkAgentUnderLoad runs the built agent against a real broker for
// SPIKEHUNT_BENCH_SECONDS (default 30) while a generator sends 20,000
// requests/s over the line protocol (UDP) and every sampler runs at 1 Hz,
// then reports the agent process's CPU (share of one core) and peak RSS.
// It measures once, whatever b.N is.
func BenchmarkAgentUnderLoad(b *testing.B) {
	agentBench.Do(func() { agentBench.cpu, agentBench.rss, agentBench.sent, agentBench.err = measureAgent(b) })
	if agentBench.err != nil {
		b.Fatal(agentBench.err)
	}
	b.ReportMetric(agentBench.cpu, "agent.cpu_pct_of_core:%")
	b.ReportMetric(agentBench.rss, "agent.rss_mib:MiB")
	b.ReportMetric(agentBench.sent, "agent.load_requests_per_s:req/s")
}

var agentBench struct {
	sync.Once
	cpu, rss, sent float64
	err            error
}

func measureAgent(b *testing.B) (cpuPct, rssMiB, rate float64, err error) {
	secs := 30
	if v, err := strconv.Atoi(os.Getenv("SPIKEHUNT_BENCH_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	k := testenv.SharedKafka(b)
	p := startAgentB(b, k.Brokers())
	udp, err := agentUDP(p)
	if err != nil {
		return 0, 0, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+2)*time.Second)
	defer cancel()
	sentCh := make(chan int, 1)
	go func() { sentCh <- udpLoad(ctx, udp, 20000) }()
	time.Sleep(2 * time.Second) // warm-up: connections, first batches
	cpu0, wall0 := procCPU(p.cmd.Process.Pid), time.Now()
	time.Sleep(time.Duration(secs) * time.Second)
	cpu1, wall1 := procCPU(p.cmd.Process.Pid), time.Now()
	rss := procHWM(p.cmd.Process.Pid)
	cancel()
	sent := <-sentCh
	return 100 * (cpu1 - cpu0) / wall1.Sub(wall0).Seconds(), rss, float64(sent) / float64(secs+2), nil
}

// startAgentB starts the agent for a benchmark (startAgent needs a *testing.T).
func startAgentB(b *testing.B, brokers []string) *agentProc {
	dir := b.TempDir()
	sock := dir + "/agent.sock"
	args := []string{"--kafka.brokers", strings.Join(brokers, ","), "--spool.dir", dir + "/spool", "--listen", "127.0.0.1:0",
		"--intake.line-unix", sock, "--intake.line-udp", "127.0.0.1:0", "--intake.otlp-grpc", "", "--intake.otlp-http", "",
		"--host-name", "bench-node", "--log-level", "warn"}
	p := &agentProc{out: &syncBuffer{}, sock: sock}
	p.cmd = execAgent(args, p.out)
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	for i := 0; i < 400; i++ {
		if strings.Contains(p.out.String(), "line-udp") {
			return p
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("agent did not start:\n%s", p.out.String())
	return nil
}

func agentUDP(p *agentProc) (string, error) {
	out := p.out.String()
	i := strings.Index(out, "line-udp ")
	if i < 0 {
		return "", fmt.Errorf("no line-udp address in the agent's output:\n%s", out)
	}
	return strings.Fields(out[i+len("line-udp "):])[0], nil
}

// udpLoad sends rate requests/s in datagrams of 40 lines until ctx ends.
func udpLoad(ctx context.Context, addr string, rate int) int {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return 0
	}
	defer c.Close()
	const per = 40
	tick := time.NewTicker(time.Second * per / time.Duration(rate))
	defer tick.Stop()
	var sb strings.Builder
	sent := 0
	for i := 0; ; i++ {
		sb.Reset()
		for j := 0; j < per; j++ {
			lat := 800 + (i*per+j)%4000
			if (i*per+j)%5000 == 0 {
				lat = 750_000
			}
			fmt.Fprintf(&sb, "billy /v1/item/%d %d 200 %032x %d\n", j%16, lat, i*per+j+1, 100+j%8)
		}
		select {
		case <-ctx.Done():
			return sent
		case <-tick.C:
		}
		c.Write([]byte(sb.String()))
		sent += per
	}
}

// procCPU is the process's user+system CPU time in seconds.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are the
	// 14th and 15th fields, in clock ticks (USER_HZ = 100).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// procHWM is the process's peak resident set in MiB.
func procHWM(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024
		}
	}
	return 0
}
