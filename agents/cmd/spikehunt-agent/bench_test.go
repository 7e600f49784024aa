package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/agents/client"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkAgentUnderLoad runs the built agent against a real broker for
// SPIKEHUNT_BENCH_SECONDS (default 30) while a generator sends 20,000
// requests/s over the line protocol (UDP) and every sampler runs at 1 Hz,
// then reports the agent process's CPU (share of one core) and peak RSS.
// The generator is agents/client, as a Go app would send.
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
	p := startAgent(b, k.Brokers(), b.TempDir(), "--host-name", "bench-node", "--log-level", "warn",
		"--intake.otlp-grpc", "", "--intake.otlp-http", "")
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

func agentUDP(p *agentProc) (string, error) {
	out := p.out.String()
	i := strings.Index(out, "line-udp ")
	if i < 0 {
		return "", fmt.Errorf("no line-udp address in the agent's output:\n%s", out)
	}
	return strings.Fields(out[i+len("line-udp "):])[0], nil
}

// udpLoad sends rate requests/s over UDP through agents/client, the way a
// Go app reports its requests (lines batched into datagrams of up to 8 KiB,
// flushed every 100 ms), until ctx ends. It returns how many the client
// accepted.
func udpLoad(ctx context.Context, addr string, rate int) int {
	c, err := client.New(client.Config{Addr: "udp://" + addr, Service: "billy"})
	if err != nil {
		return 0
	}
	defer c.Close()
	const perTick = 100
	tick := time.NewTicker(time.Second * perTick / time.Duration(rate))
	defer tick.Stop()
	endpoints := make([]string, 16)
	for i := range endpoints {
		endpoints[i] = fmt.Sprintf("/v1/item/%d", i)
	}
	sent := 0
	var id [16]byte
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return sent - int(c.Dropped())
		case <-tick.C:
		}
		for j := 0; j < perTick; j++ {
			n := i*perTick + j
			lat := time.Duration(800+n%4000) * time.Microsecond
			if n%5000 == 0 {
				lat = 750 * time.Millisecond
			}
			binary.BigEndian.PutUint64(id[8:], uint64(n+1))
			c.Record(endpoints[j%16], lat, "200", id, uint32(100+j%8))
		}
		sent += perTick
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
