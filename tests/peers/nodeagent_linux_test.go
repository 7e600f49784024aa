package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The load of the goal: 20,000 OTLP spans/s on one node
// (SPIKEHUNT_BENCH_RATE to change, for a profile with more samples).
var nodeLoad = spanLoad{Apps: 4, Rate: benchRate(20000), BatchSize: 512}

// batch100Load is the same rate in batches of 100 spans (telemetrygen's
// and many SDKs' smaller exports): five times the requests, where what a
// node agent pays per request shows.
var batch100Load = spanLoad{Apps: nodeLoad.Apps, Rate: nodeLoad.Rate, BatchSize: 100}

func benchRate(def int) int {
	if v, err := strconv.Atoi(os.Getenv("SPIKEHUNT_BENCH_RATE")); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkNodeAgent gives spikehunt-agent and the OpenTelemetry Collector
// used as a node agent (testdata/collector-node-agent.yaml) the same
// OTLP/gRPC load from one generator, one after the other, both exporting
// to one real Kafka broker on topics of their own, and compares what each
// process costs over the same measured seconds: CPU as a share of one
// core, peak and final RSS, and the bytes each adds to Kafka's log per
// span it accepted. spikehunt-agent forwards the requests it samples (the
// slow ones and a rate-bounded sample of the rest) and the Collector every
// span: that is the difference a user buys.
//
// SPIKEHUNT_BENCH_SECONDS (default 30) is the measured time of each,
// after SPIKEHUNT_BENCH_WARMUP_SECONDS (default 5). Before the load, each
// is measured idle for SPIKEHUNT_BENCH_IDLE_SECONDS (default 10): its
// fixed cost (timers, sampling, metrics), apart from the cost per span.
// It measures once,
// whatever b.N is. It needs the Collector of `deps/install.sh
// otelcol-peers` (make bench-peers-agent installs it).
// SPIKEHUNT_BENCH_CPUPROFILE=file also saves spikehunt-agent's CPU
// profile over its measured seconds (go tool pprof file);
// (the batches of 100 in file.batch100, the baseline's in
// file.baseline.batch100); SPIKEHUNT_BENCH_PERF=file records it with perf instead, at 2,999 Hz with
// the kernel's side of its syscalls (perf report -i file).
//
// Each then gets the same rate in batches of 100 spans (batch100Load), where
// the cost per request shows: peers.agent_cpu_ratio_batch100. With
// SPIKEHUNT_BENCH_BASELINE_REF=<git ref> the agent built at that commit is
// measured too, in the same run (peers.baseline_agent_cpu_ratio_batch100):
// a before and after side by side.
func BenchmarkNodeAgent(b *testing.B) {
	nodeAgentBench.Do(func() { nodeAgentBench.r, nodeAgentBench.err = measureNodeAgents(b) })
	if nodeAgentBench.err != nil {
		b.Fatal(nodeAgentBench.err)
	}
	a, c := nodeAgentBench.r.agent, nodeAgentBench.r.collector
	b.ReportMetric(a.cpuPct, "peers.agent_cpu_pct:%")
	b.ReportMetric(c.cpuPct, "peers.collector_cpu_pct:%")
	b.ReportMetric(a.idleCPUPct, "peers.agent_idle_cpu_pct:%")
	fl := nodeAgentBench.r.floor.cpuPct
	b.ReportMetric(fl, "peers.grpc_floor_cpu_pct:%")
	b.ReportMetric((a.cpuPct-fl)/(c.cpuPct-fl), "peers.agent_cpu_ratio_above_floor:x")
	b.ReportMetric(c.idleCPUPct, "peers.collector_idle_cpu_pct:%")
	b.ReportMetric(a.cpuPct/c.cpuPct, "peers.agent_cpu_ratio:x")
	b.ReportMetric(a.peakMiB, "peers.agent_rss_peak_mib:MiB")
	b.ReportMetric(c.peakMiB, "peers.collector_rss_peak_mib:MiB")
	b.ReportMetric(a.endMiB, "peers.agent_rss_end_mib:MiB")
	b.ReportMetric(c.endMiB, "peers.collector_rss_end_mib:MiB")
	b.ReportMetric(a.peakMiB/c.peakMiB, "peers.agent_rss_ratio:x")
	b.ReportMetric(a.kafkaBytesPerSpan(), "peers.agent_kafka_bytes_per_req:B")
	b.ReportMetric(c.kafkaBytesPerSpan(), "peers.collector_kafka_bytes_per_req:B")
	b.ReportMetric(a.kafkaBytesPerSpan()/c.kafkaBytesPerSpan(), "peers.agent_kafka_bytes_ratio:x")
	b.ReportMetric(a.cpuUSPerSpan(), "peers.agent_cpu_us_per_span:us")
	b.ReportMetric(c.cpuUSPerSpan(), "peers.collector_cpu_us_per_span:us")
	a100, c100 := nodeAgentBench.r.agent100, nodeAgentBench.r.collector100
	b.ReportMetric(a100.cpuPct/c100.cpuPct, "peers.agent_cpu_ratio_batch100:x")
	b.ReportMetric(a100.cpuUSPerRequest(batch100Load), "peers.agent_cpu_us_per_request_batch100:us")
	b.ReportMetric(c100.cpuUSPerRequest(batch100Load), "peers.collector_cpu_us_per_request_batch100:us")
	if base := nodeAgentBench.r.baseline100; base.wall > 0 {
		b.ReportMetric(base.cpuPct/c100.cpuPct, "peers.baseline_agent_cpu_ratio_batch100:x")
		b.ReportMetric(base.cpuUSPerRequest(batch100Load), "peers.baseline_agent_cpu_us_per_request_batch100:us")
	}
	b.ReportMetric(a.spansPerS(), "peers.agent_load_spans_per_s:spans/s")
	b.ReportMetric(c.spansPerS(), "peers.collector_load_spans_per_s:spans/s")
}

var nodeAgentBench struct {
	sync.Once
	r   nodeAgentFigures
	err error
}

type nodeAgentFigures struct {
	agent, collector, floor phaseFigures
	// The same at batch100Load; baseline100 is the agent of
	// SPIKEHUNT_BENCH_BASELINE_REF, when set.
	agent100, collector100, baseline100 phaseFigures
}

// phaseFigures are one node agent's measured seconds.
type phaseFigures struct {
	name            string
	wall            float64 // measured seconds
	cpuPct          float64 // user+system CPU over wall, % of one core
	idleCPUPct      float64 // the same before the load, started and idle
	peakMiB, endMiB float64 // VmHWM (the whole run) and VmRSS at the end
	accepted        int64   // spans the receiver accepted during wall
	kafkaBytes      int64   // growth of the node agent's topics' logs during wall
	topicBytes      map[string]int64
	// For the checks and the notes, over the whole run: what the generator
	// sent and saw accepted, and what the node agent says it received and
	// wrote to Kafka.
	sentTotal, acceptedTotal, failedTotal int64
	missedTotal                           int64
	receivedTotal, exportedTotal          float64
	keptTotal                             float64 // spikehunt-agent: requests kept for export
	log                                   string  // the end of its output
	exportedWhat                          string
}

func (p phaseFigures) spansPerS() float64 { return float64(p.accepted) / p.wall }

// cpuUSPerSpan is the node agent's CPU per span accepted, all its work
// (sampling, export, runtime) included: the figure that does not depend
// on the rate the generator reached.
func (p phaseFigures) cpuUSPerSpan() float64 { return p.cpuPct / 100 * 1e6 / p.spansPerS() }

// cpuUSPerRequest is cpuUSPerSpan per export request of load.
func (p phaseFigures) cpuUSPerRequest(load spanLoad) float64 {
	return p.cpuUSPerSpan() * float64(load.BatchSize)
}

func (p phaseFigures) kafkaBytesPerSpan() float64 {
	return float64(p.kafkaBytes) / float64(p.accepted)
}

func benchSeconds(env string, def int) time.Duration {
	if v, err := strconv.Atoi(os.Getenv(env)); err == nil && v > 0 {
		return time.Duration(v) * time.Second
	}
	return time.Duration(def) * time.Second
}

// peersCollectorBinary is the Collector `deps/install.sh otelcol-peers`
// builds, or an error that says how to build it.
func peersCollectorBinary() (string, error) {
	bin := os.Getenv("SPIKEHUNT_PEERS_OTELCOL")
	if bin == "" {
		return "", errors.New("SPIKEHUNT_PEERS_OTELCOL is not set: run `deps/install.sh otelcol-peers` and export what `deps/install.sh env` prints (make bench-peers does both)")
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("the peers' Collector is not built (SPIKEHUNT_PEERS_OTELCOL=%s): run `deps/install.sh otelcol-peers`: %w", bin, err)
	}
	return bin, nil
}

// buildAgent builds spikehunt-agent from this tree into dir.
func buildAgent(dir string) (string, error) {
	bin := filepath.Join(dir, "spikehunt-agent")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/spikehunt/spikehunt/agents/cmd/spikehunt-agent").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build spikehunt-agent: %w\n%s", err, out)
	}
	return bin, nil
}

// buildAgentAt builds spikehunt-agent as it is at the git commit ref (a
// branch, a tag, a hash) of this repository into dir, from that commit's
// files (git archive), leaving the repository as it is.
func buildAgentAt(ref, dir string) (string, error) {
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.Command("sh", "-c", `cd "$(git rev-parse --show-toplevel)" && git archive "$1" | tar -x -C "$2"`, "sh", ref, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %w\n%s", ref, err, out)
	}
	bin := filepath.Join(dir, "spikehunt-agent-baseline")
	cmd := exec.Command("go", "build", "-o", bin, "./agents/cmd/spikehunt-agent")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build spikehunt-agent at %s: %w\n%s", ref, err, out)
	}
	return bin, nil
}

// nodeAgentProc is a node agent running as a child process.
type nodeAgentProc struct {
	cmd     *exec.Cmd
	out     *tailBuffer
	grpc    string // its OTLP/gRPC intake
	metrics string // its Prometheus metrics URL
	topics  []string
	// spikehunt: spikehunt-agent rather than the Collector (their metrics
	// differ, and only the agent serves a CPU profile); baseline: the
	// agent of SPIKEHUNT_BENCH_BASELINE_REF.
	spikehunt, baseline bool
}

func (p *nodeAgentProc) stop() {
	p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

func startNodeAgent(bin, config, brokers, dir string) (*nodeAgentProc, error) {
	grpcAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config", config, "--kafka.brokers", brokers,
		"--intake.otlp-grpc", grpcAddr, "--intake.otlp-http", "127.0.0.1:0",
		"--intake.line-udp", "127.0.0.1:0", "--intake.line-unix", filepath.Join(dir, "agent.sock"),
		"--listen", listen, "--spool.dir", filepath.Join(dir, "spool"), "--host-name", "bench-node",
		"--capture.dir", filepath.Join(dir, "captures"), "--capture.socket", filepath.Join(dir, "capture.sock"))
	if os.Getenv("SPIKEHUNT_BENCH_CPUPROFILE") != "" {
		cmd.Args = append(cmd.Args, "--debug.pprof")
	}
	p, err := startProc(cmd, grpcAddr, "http://"+listen+"/metrics", []string{"peers-agent-spans", "peers-agent-metrics"})
	if p != nil {
		p.spikehunt = true
	}
	return p, err
}

func startCollector(bin, config, brokers string) (*nodeAgentProc, error) {
	grpcAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	telemetry, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(telemetry, ":")
	topics := []string{"peers-collector-spans", "peers-collector-metrics"}
	cmd := exec.Command(bin, "--config", "file:"+config)
	cmd.Env = append(os.Environ(), "OTLP_GRPC_ENDPOINT="+grpcAddr, "KAFKA_BROKERS="+brokers,
		"TRACES_TOPIC="+topics[0], "METRICS_TOPIC="+topics[1], "TELEMETRY_PORT="+port)
	return startProc(cmd, grpcAddr, "http://"+telemetry+"/metrics", topics)
}

func startProc(cmd *exec.Cmd, grpcAddr, metrics string, topics []string) (*nodeAgentProc, error) {
	p := &nodeAgentProc{cmd: cmd, out: &tailBuffer{max: 16 << 10}, grpc: grpcAddr, metrics: metrics, topics: topics}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // none outlives a killed benchmark
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	if err := waitListening(grpcAddr, 30*time.Second); err != nil {
		p.stop()
		return nil, fmt.Errorf("%s: %w; its output:\n%s", filepath.Base(cmd.Path), err, p.out.String())
	}
	if err := waitListening(strings.TrimSuffix(strings.TrimPrefix(metrics, "http://"), "/metrics"), 10*time.Second); err != nil {
		p.stop()
		return nil, fmt.Errorf("%s: metrics: %w; its output:\n%s", filepath.Base(cmd.Path), err, p.out.String())
	}
	return p, nil
}

func measureNodeAgents(b *testing.B) (nodeAgentFigures, error) {
	var r nodeAgentFigures
	collectorBin, err := peersCollectorBinary()
	if err != nil {
		return r, err
	}
	agentBin, err := buildAgent(b.TempDir())
	if err != nil {
		return r, err
	}
	warm, secs := benchSeconds("SPIKEHUNT_BENCH_WARMUP_SECONDS", 5), benchSeconds("SPIKEHUNT_BENCH_SECONDS", 30)
	idle := benchSeconds("SPIKEHUNT_BENCH_IDLE_SECONDS", 10)
	k := testenv.SharedKafka(b)
	brokers := strings.Join(k.Brokers(), ",")
	ctx := context.Background()
	for _, t := range []string{"peers-agent-spans", "peers-agent-metrics", "peers-collector-spans", "peers-collector-metrics"} {
		if err := k.CreateTopic(ctx, t, 1); err != nil {
			return r, fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	cl, err := k.Client()
	if err != nil {
		return r, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	config, err := filepath.Abs("testdata/agent.yaml")
	if err != nil {
		return r, err
	}
	agent, err := startNodeAgent(agentBin, config, brokers, b.TempDir())
	if err != nil {
		return r, err
	}
	r.agent, err = measurePhase(adm, agent, nodeLoad, idle, warm, secs)
	if err == nil {
		r.agent100, err = measurePhase(adm, agent, batch100Load, 0, warm, secs)
	}
	agent.stop()
	r.agent.log = lastLines(agent.out.String(), 20)
	if err != nil {
		return r, fmt.Errorf("spikehunt-agent: %w; its output:\n%s", err, agent.out.String())
	}
	r.agent.name = "spikehunt-agent"
	r.agent100.name = "spikehunt-agent (batches of 100)"

	// The agent of another commit, for a before and after in one run.
	if ref := os.Getenv("SPIKEHUNT_BENCH_BASELINE_REF"); ref != "" {
		baseBin, err := buildAgentAt(ref, b.TempDir())
		if err != nil {
			return r, err
		}
		base, err := startNodeAgent(baseBin, config, brokers, b.TempDir())
		if err != nil {
			return r, fmt.Errorf("the baseline agent (%s): %w", ref, err)
		}
		base.baseline = true
		r.baseline100, err = measurePhase(adm, base, batch100Load, 0, warm, secs)
		base.stop()
		if err != nil {
			return r, fmt.Errorf("the baseline agent (%s): %w; its output:\n%s", ref, err, base.out.String())
		}
		r.baseline100.name = "spikehunt-agent at " + ref + " (batches of 100)"
	}

	config, err = filepath.Abs("testdata/collector-node-agent.yaml")
	if err != nil {
		return r, err
	}
	collector, err := startCollector(collectorBin, config, brokers)
	if err != nil {
		return r, err
	}
	r.collector, err = measurePhase(adm, collector, nodeLoad, idle, warm, secs)
	if err == nil {
		r.collector100, err = measurePhase(adm, collector, batch100Load, 0, warm, secs)
	}
	collector.stop()
	r.collector.log = lastLines(collector.out.String(), 20)
	if err != nil {
		return r, fmt.Errorf("the Collector: %w; its output:\n%s", err, collector.out.String())
	}
	r.collector.name = "Collector (node agent)"
	r.collector100.name = "Collector (node agent, batches of 100)"

	if r.floor, err = measureGRPCFloor(idle, warm, secs); err != nil {
		return r, err
	}

	printNodeAgentNotes(r)
	for _, p := range []phaseFigures{r.agent, r.collector, r.agent100, r.collector100} {
		if err := p.check(); err != nil {
			return r, err
		}
	}
	return r, nil
}

// measurePhase measures p idle for idle seconds (after a second to
// settle from its start; none when idle is 0), then sends load to p for
// warm + secs and measures the secs.
func measurePhase(adm *kadm.Client, p *nodeAgentProc, load spanLoad, idle, warm, secs time.Duration) (phaseFigures, error) {
	var f phaseFigures
	pid := p.cmd.Process.Pid
	if idle > 0 {
		f.idleCPUPct = idleCPUPct(pid, idle)
	}
	var counts loadCounts
	stopLoad := startLoad(load, p.grpc, &counts)
	defer stopLoad()
	time.Sleep(warm)

	size0, err := logSizes(adm, p.topics)
	if err != nil {
		return f, err
	}
	acc0, cpu0, t0 := counts.accepted.Load(), procCPUSeconds(pid), time.Now()
	profiled := make(chan error, 1)
	switch {
	case os.Getenv("SPIKEHUNT_BENCH_CPUPROFILE") != "" && p.spikehunt:
		path := os.Getenv("SPIKEHUNT_BENCH_CPUPROFILE")
		if p.baseline {
			path += ".baseline"
		}
		if load != nodeLoad {
			path += fmt.Sprintf(".batch%d", load.BatchSize)
		}
		go func() {
			profiled <- saveCPUProfile(strings.TrimSuffix(p.metrics, "/metrics"), secs, path)
		}()
	case os.Getenv("SPIKEHUNT_BENCH_PERF") != "" && p.spikehunt:
		go func() { profiled <- perfRecord(pid, secs, os.Getenv("SPIKEHUNT_BENCH_PERF")) }()
	default:
		profiled <- nil
	}
	time.Sleep(secs)
	cpu1, acc1, wall := procCPUSeconds(pid), counts.accepted.Load(), time.Since(t0).Seconds()
	size1, err := logSizes(adm, p.topics)
	if err != nil {
		return f, err
	}
	if err := stopLoad(); err != nil {
		return f, err
	}
	if err := <-profiled; err != nil {
		return f, err
	}
	f.wall, f.cpuPct = wall, 100*(cpu1-cpu0)/wall
	f.accepted = acc1 - acc0
	f.topicBytes = map[string]int64{}
	for _, t := range p.topics {
		f.topicBytes[t] = size1[t] - size0[t]
		f.kafkaBytes += f.topicBytes[t]
	}
	if f.peakMiB, f.endMiB, err = procMemMiB(pid); err != nil {
		return f, err
	}
	f.sentTotal, f.acceptedTotal, f.failedTotal = counts.sent.Load(), counts.accepted.Load(), counts.failed.Load()
	f.missedTotal = counts.missed.Load()
	if s, ok := counts.lastErr.Load().(string); ok {
		fmt.Printf("peers: last export error: %s\n", s)
	}
	// What the node agent itself counted, once its batches went out.
	time.Sleep(2 * time.Second)
	if p.spikehunt {
		f.receivedTotal, err = scrapeSum(p.metrics, "spikehunt_intake_requests_total", `source="otlp_grpc"`)
		if err == nil {
			f.exportedTotal, err = scrapeSum(p.metrics, "spikehunt_export_records_total", `outcome="delivered"`)
			f.exportedWhat = "Kafka records delivered"
		}
		for _, o := range []string{"kept_slow", "kept_sampled"} {
			if err == nil {
				var n float64
				n, err = scrapeSum(p.metrics, "spikehunt_intake_requests_total", `source="otlp_grpc"`, `outcome="`+o+`"`)
				f.keptTotal += n
			}
		}
	} else {
		f.receivedTotal, err = scrapeSum(p.metrics, "otelcol_receiver_accepted_spans", `receiver="otlp"`)
		if err == nil {
			f.exportedTotal, err = scrapeSum(p.metrics, "otelcol_exporter_sent_spans", `exporter="kafka"`)
			f.exportedWhat = "spans sent to Kafka"
		}
	}
	return f, err
}

// idleCPUPct is pid's CPU, % of one core, over idle, after a second to
// settle from its start.
func idleCPUPct(pid int, idle time.Duration) float64 {
	time.Sleep(time.Second)
	cpu0, t0 := procCPUSeconds(pid), time.Now()
	time.Sleep(idle)
	return 100 * (procCPUSeconds(pid) - cpu0) / time.Since(t0).Seconds()
}

// startLoad sends load to addr, counted in c, until stop is called;
// stop returns the load's error (and nil when called again).
func startLoad(load spanLoad, addr string, c *loadCounts) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- load.run(ctx, addr, c) }()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
}

// check fails a run whose comparison would not hold: the load not
// delivered at 90% of its rate, or the receiver counting fewer spans than
// the generator saw accepted.
func (p phaseFigures) check() error {
	if got, want := p.spansPerS(), 0.9*float64(nodeLoad.Rate); got < want {
		return fmt.Errorf("%s accepted %.0f spans/s of the %d sent: below 90%%, the figures do not compare (is the machine saturated?)", p.name, got, nodeLoad.Rate)
	}
	if p.failedTotal > 0 {
		return fmt.Errorf("%s refused %d of %d spans", p.name, p.failedTotal, p.sentTotal)
	}
	if p.receivedTotal < 0.99*float64(p.acceptedTotal) {
		return fmt.Errorf("%s counted %.0f spans received, the generator %d accepted", p.name, p.receivedTotal, p.acceptedTotal)
	}
	if p.exportedTotal == 0 || p.keptTotal == 0 && p.exportedTotal < 0.99*p.receivedTotal {
		return fmt.Errorf("%s received %.0f spans and %.0f %s: its export to Kafka failed; its last lines of output:\n%s", p.name, p.receivedTotal, p.exportedTotal, p.exportedWhat, p.log)
	}
	return nil
}

// logSizes is the bytes of each topic's log on the broker (its segments,
// as written: compressed record batches with their headers).
func logSizes(adm *kadm.Client, topics []string) (map[string]int64, error) {
	set := kadm.TopicsSet{}
	for _, t := range topics {
		set[t] = map[int32]struct{}{0: {}}
	}
	dirs, err := adm.DescribeAllLogDirs(context.Background(), set)
	if err != nil {
		return nil, fmt.Errorf("describe the log dirs of %s: %w", strings.Join(topics, ", "), err)
	}
	n := map[string]int64{}
	dirs.Each(func(d kadm.DescribedLogDir) {
		for _, t := range topics {
			for _, p := range d.Topics[t] {
				n[t] += p.Size
			}
		}
	})
	return n, nil
}

func printNodeAgentNotes(r nodeAgentFigures) {
	fmt.Printf("peers: one OTLP/gRPC generator, %d apps × %d-span requests, %d spans/s, to each node agent in turn; both export to one Kafka broker (lz4)\n",
		nodeLoad.Apps, nodeLoad.BatchSize, nodeLoad.Rate)
	for _, p := range []phaseFigures{r.agent, r.collector} {
		fmt.Printf("peers: %-24s %5.1f%% of a core, RSS peak %.1f MiB end %.1f MiB, %.0f spans/s accepted over %.0f s, %.1f Kafka bytes per span (%d bytes)\n",
			p.name, p.cpuPct, p.peakMiB, p.endMiB, p.spansPerS(), p.wall, p.kafkaBytesPerSpan(), p.kafkaBytes)
		fmt.Printf("peers: %-24s idle before the load: %.2f%% of a core; the load's own cost: %.2f µs per span\n",
			"", p.idleCPUPct, (p.cpuPct-p.idleCPUPct)/100*1e6/p.spansPerS())
		fmt.Printf("peers: %-24s generator sent %d spans (%d skipped, behind), %d accepted, %d refused; the node agent counted %.0f received, %.0f %s\n",
			"", p.sentTotal, p.missedTotal, p.acceptedTotal, p.failedTotal, p.receivedTotal, p.exportedTotal, p.exportedWhat)
		var parts []string
		for _, t := range slices.Sorted(maps.Keys(p.topicBytes)) {
			parts = append(parts, fmt.Sprintf("%s %.2f", t, float64(p.topicBytes[t])/float64(p.accepted)))
		}
		fmt.Printf("peers: %-24s Kafka bytes per span by topic: %s\n", "", strings.Join(parts, ", "))
		if p.keptTotal > 0 {
			fmt.Printf("peers: %-24s kept %.0f requests for export (%.2f%% of those received)\n", "", p.keptTotal, 100*p.keptTotal/p.receivedTotal)
		}
	}
	fmt.Printf("peers: %-24s %5.1f%% of a core under the same load (idle %.2f%%): what a grpc-go receiver that reads nothing costs, on one P;\n",
		r.floor.name, r.floor.cpuPct, r.floor.idleCPUPct)
	fmt.Printf("peers: %-24s spikehunt-agent above it: %.2f µs per span (%.1f%% of a core), the Collector: %.2f µs per span\n", "",
		(r.agent.cpuPct-r.floor.cpuPct)/100*1e6/r.agent.spansPerS(), r.agent.cpuPct-r.floor.cpuPct,
		(r.collector.cpuPct-r.floor.cpuPct)/100*1e6/r.collector.spansPerS())
	fmt.Printf("peers: the same rate in %d-span requests (%d requests/s):\n", batch100Load.BatchSize, batch100Load.Rate/batch100Load.BatchSize)
	for _, p := range []phaseFigures{r.agent100, r.baseline100, r.collector100} {
		if p.wall == 0 {
			continue
		}
		fmt.Printf("peers: %-24s %5.1f%% of a core, %.0f µs per request, %.0f spans/s accepted over %.0f s (%d skipped, %d refused)\n",
			p.name, p.cpuPct, p.cpuUSPerRequest(batch100Load), p.spansPerS(), p.wall, p.missedTotal, p.failedTotal)
	}
	fmt.Println("peers: spikehunt-agent forwards only the requests it keeps (the slow ones and a rate-bounded sample of the rest, each with its weight) plus its kernel samples;")
	fmt.Println("peers: the Collector forwards every span plus hostmetrics. The bytes per request compare what each puts on Kafka for the same traffic.")
	load, err := os.ReadFile("/proc/loadavg")
	if err == nil {
		fmt.Printf("peers: machine load average after the run: %s", load)
	}
}

// perfRecord records pid's on-CPU stacks with perf for d into path.
func perfRecord(pid int, d time.Duration, path string) error {
	out, err := exec.Command("perf", "record", "-q", "-F", "2999", "-g", "-p", strconv.Itoa(pid), "-o", path,
		"--", "sleep", strconv.Itoa(int(d.Seconds()))).CombinedOutput()
	if err != nil {
		return fmt.Errorf("perf record: %w: %s", err, out)
	}
	return nil
}

// saveCPUProfile saves the CPU profile a Go program serves at
// base/debug/pprof/profile over d to path.
func saveCPUProfile(base string, d time.Duration, path string) error {
	resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, int(d.Seconds())))
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
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
		return fmt.Errorf("save the cpu profile to %s: %w", path, err)
	}
	return f.Close()
}
