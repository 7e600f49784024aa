package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/agents/client"
	"github.com/spikehunt/spikehunt/tests/cgroupfixture"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkAgentUnderLoad runs the built agent against a real broker for
// SPIKEHUNT_BENCH_SECONDS (default 30) while a generator sends 20,000
// requests/s over the line protocol (UDP) and every sampler runs at 1 Hz,
// then reports the agent process's CPU (share of one core) and peak RSS.
// The generator is agents/client, as a Go app would send.
// It measures once, whatever b.N is. SPIKEHUNT_BENCH_CPUPROFILE=file also
// saves the agent's CPU profile over the measured seconds.
func BenchmarkAgentUnderLoad(b *testing.B) {
	agentBench.Do(func() { agentBench.r, agentBench.err = measureAgent(b) })
	if agentBench.err != nil {
		b.Fatal(agentBench.err)
	}
	r := agentBench.r
	b.ReportMetric(r.cpuPct, "agent.cpu_pct_of_core:%")
	b.ReportMetric(r.sysPct, "agent.cpu_sys_pct_of_core:%")
	b.ReportMetric(r.switches, "agent.context_switches_per_s:/s")
	b.ReportMetric(r.rssMiB, "agent.rss_mib:MiB")
	b.ReportMetric(r.rate, "agent.load_requests_per_s:req/s")
}

var agentBench struct {
	sync.Once
	r   agentFigures
	err error
}

// BenchmarkAgentUnderLoadWith200Cgroups is BenchmarkAgentUnderLoad with
// the cgroup sampler over the 200 workload cgroups of a busy node
// (tests/cgroupfixture), v1 and v2, instead of this machine's few: the
// agent's budget, 1% of a core and 40 MiB at 20,000 requests/s, holds with
// every sampler on such a node. It measures each layout once, whatever b.N
// is; SPIKEHUNT_BENCH_CPUPROFILE=file saves file.v1 and file.v2.
//
// SPIKEHUNT_BENCH_BASELINE_REF=<git ref> also measures the agent built from
// that commit, alternately with this tree's (SPIKEHUNT_BENCH_ROUNDS each,
// default 3, the first of each round swapping), and reports both medians
// and their ratio: on a shared machine only figures taken side by side in
// one run compare the code rather than the load (CONTRIBUTING.md).
func BenchmarkAgentUnderLoadWith200Cgroups(b *testing.B) {
	baseline := baselineAgent(b)
	for _, layout := range []string{"v1", "v2"} {
		b.Run("cgroup="+layout, func(b *testing.B) {
			run := agentCgroupBench[layout]
			run.Do(func() {
				tree := cgroupfixture.Tree(b, layout == "v2")
				profile := os.Getenv("SPIKEHUNT_BENCH_CPUPROFILE")
				if profile != "" {
					profile += "." + layout
				}
				measure := func(bin, profile string) (agentFigures, error) {
					r, err := measureBinaryUnder(b, bin, []string{"--path.cgroupfs", tree}, profile, agentUDP, func(ctx context.Context, addr string) int {
						return udpLoad(ctx, addr, 20000)
					})
					if err == nil && r.cgroups != cgroupfixture.Workloads {
						err = fmt.Errorf("the agent's cgroup sampler saw %v cgroups, want %d", r.cgroups, cgroupfixture.Workloads)
					}
					return r, err
				}
				if baseline == "" {
					run.r, run.err = measure(agentBin, profile)
					return
				}
				run.base, run.r, run.err = measureAlternately(b, baseline, measure)
			})
			if run.err != nil {
				b.Fatal(run.err)
			}
			r := run.r
			b.ReportMetric(r.cpuPct, "agent.cpu_pct_of_core_200_cgroups_"+layout+":%")
			b.ReportMetric(r.cpuPct/1, "agent.cpu_budget_ratio_200_cgroups_"+layout+":x")
			b.ReportMetric(r.rssMiB, "agent.rss_mib_200_cgroups_"+layout+":MiB")
			b.ReportMetric(r.rssMiB/40, "agent.rss_budget_ratio_200_cgroups_"+layout+":x")
			b.ReportMetric(r.rate, "agent.load_requests_per_s_200_cgroups_"+layout+":req/s")
			if baseline != "" {
				b.ReportMetric(run.base.cpuPct, "agent.baseline_cpu_pct_of_core_200_cgroups_"+layout+":%")
				b.ReportMetric(run.base.rssMiB, "agent.baseline_rss_mib_200_cgroups_"+layout+":MiB")
				b.ReportMetric(r.cpuPct/run.base.cpuPct, "agent.cpu_ratio_to_baseline_200_cgroups_"+layout+":x")
				b.ReportMetric(r.cpuPer10k/run.base.cpuPer10k, "agent.cpu_per_load_ratio_to_baseline_200_cgroups_"+layout+":x")
				b.ReportMetric(r.rssMiB/run.base.rssMiB, "agent.rss_ratio_to_baseline_200_cgroups_"+layout+":x")
			}
		})
	}
}

var agentCgroupBench = map[string]*struct {
	sync.Once
	r, base agentFigures // base: the baseline build's, with SPIKEHUNT_BENCH_BASELINE_REF
	err     error
}{"v1": {}, "v2": {}}

// agentFigures are what one run measured: CPU (user+system, and system
// alone) as a share of one core, context switches of all the agent's
// threads per second (its wake-ups), peak RSS, the load's rate, and the
// cgroups the agent's sampler counted at the end (reported and
// aggregated).
type agentFigures struct {
	cpuPct, sysPct, switches, rssMiB, rate, cgroups float64
	// cpuPer10k is the CPU share per 10,000 requests/s: on a loaded
	// machine the generator falls short of its rate by different amounts
	// in runs compared side by side (medianFigures sets it).
	cpuPer10k float64
}

func measureAgent(b *testing.B) (agentFigures, error) {
	return measureAgentUnder(b, nil, os.Getenv("SPIKEHUNT_BENCH_CPUPROFILE"), agentUDP, func(ctx context.Context, addr string) int {
		return udpLoad(ctx, addr, 20000)
	})
}

// measureAgentUnder runs the agent with extra flags under the load that
// load sends to the address addrOf finds in its output, and measures it
// over SPIKEHUNT_BENCH_SECONDS after a 2 s warm-up; profile, when not
// empty, is where the agent's CPU profile over that time goes. load
// returns how many requests (or spans) it sent.
func measureAgentUnder(b *testing.B, extra []string, profile string, addrOf func(*agentProc) (string, error), load func(ctx context.Context, addr string) int) (agentFigures, error) {
	return measureBinaryUnder(b, agentBin, extra, profile, addrOf, load)
}

// measureBinaryUnder is measureAgentUnder with the agent binary bin.
func measureBinaryUnder(b *testing.B, bin string, extra []string, profile string, addrOf func(*agentProc) (string, error), load func(ctx context.Context, addr string) int) (agentFigures, error) {
	secs := 30
	if v, err := strconv.Atoi(os.Getenv("SPIKEHUNT_BENCH_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	k := testenv.SharedKafka(b)
	extra = append([]string{"--host-name", "bench-node", "--log-level", "warn", "--intake.otlp-grpc", "", "--intake.otlp-http", ""}, extra...)
	if profile != "" {
		extra = append(extra, "--debug.pprof")
	}
	p := startAgentBinary(b, bin, k.Brokers(), b.TempDir(), extra...)
	addr, err := addrOf(p)
	if err != nil {
		return agentFigures{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+2)*time.Second)
	defer cancel()
	sentCh := make(chan int, 1)
	go func() { sentCh <- load(ctx, addr) }()
	time.Sleep(2 * time.Second) // warm-up: connections, first batches
	pid := p.cmd.Process.Pid
	user0, sys0 := testenv.ProcCPU(pid)
	sw0, wall0 := procSwitches(pid), time.Now()
	if profile != "" {
		if err := fetchProfile(p, secs, profile); err != nil {
			return agentFigures{}, err
		}
	}
	time.Sleep(time.Until(wall0.Add(time.Duration(secs) * time.Second)))
	user1, sys1 := testenv.ProcCPU(pid)
	sw1, wall := procSwitches(pid), time.Since(wall0).Seconds()
	rss := procHWM(pid)
	cgroups, err := agentMetricSum(p, `spikehunt_collect_cgroups{state="reported"}`, `spikehunt_collect_cgroups{state="aggregated"}`)
	if err != nil {
		return agentFigures{}, err
	}
	cancel()
	sent := <-sentCh
	// Stopped now rather than at the benchmark's end: an agent left running
	// beside the next one measured would load the machine under it.
	p.cmd.Process.Kill()
	p.cmd.Wait()
	return agentFigures{
		cpuPct:   100 * (user1 + sys1 - user0 - sys0) / wall,
		sysPct:   100 * (sys1 - sys0) / wall,
		switches: float64(sw1-sw0) / wall,
		rssMiB:   rss,
		rate:     float64(sent) / float64(secs+2),
		cgroups:  cgroups,
	}, nil
}

// agentMetricSum is the sum of the agent's /metrics samples named.
func agentMetricSum(p *agentProc, names ...string) (float64, error) {
	out := p.out.String()
	i := strings.Index(out, "metrics http://")
	if i < 0 {
		return 0, fmt.Errorf("no metrics address in the agent's output:\n%s", out)
	}
	resp, err := http.Get(strings.Fields(out[i+len("metrics "):])[0])
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, l := range strings.Split(string(body), "\n") {
		for _, n := range names {
			if v, ok := strings.CutPrefix(l, n+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("%s: %w", l, err)
				}
				sum += f
			}
		}
	}
	return sum, nil
}

// fetchProfile saves the agent's CPU profile over secs seconds to path
// (SPIKEHUNT_BENCH_CPUPROFILE; read it with go tool pprof).
func fetchProfile(p *agentProc, secs int, path string) error {
	out := p.out.String()
	i := strings.Index(out, "metrics http://")
	if i < 0 {
		return fmt.Errorf("no metrics address in the agent's output:\n%s", out)
	}
	base := strings.TrimSuffix(strings.Fields(out[i+len("metrics "):])[0], "/metrics")
	resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cpu profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
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
// Go app reports its requests (lines batched into datagrams of up to
// 60 KiB, flushed every 50 ms: the client's defaults), until ctx ends. It returns how many the client
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

// procSwitches is the sum of voluntary and involuntary context switches
// over the process's threads.
func procSwitches(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n int64
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "voluntary_ctxt_switches:") || strings.HasPrefix(l, "nonvoluntary_ctxt_switches:") {
				v, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
				n += v
			}
		}
	}
	return n
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
