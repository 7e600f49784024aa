package peers

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/agents/collect"
	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// nodeExporterCollectors are node_exporter's collectors that read what
// spikehunt-agent's samplers read (agents/collect/doc.go), and no other:
//
//	spikehunt   node_exporter
//	stat        cpu, stat            /proc/stat
//	softirqs    softirqs             /proc/softirqs
//	interrupts  interrupts           /proc/interrupts
//	netdev      netdev, netclass     /proc/net/dev, /sys/class/net/*/ (operstate)
//	ethtool     ethtool              SIOCETHTOOL driver statistics
//	diskstats   diskstats            /proc/diskstats
//	schedstat   schedstat            /proc/schedstat
//	pressure    pressure             /proc/pressure/*
//	meminfo     meminfo              /proc/meminfo
var nodeExporterCollectors = []string{"cpu", "stat", "softirqs", "interrupts", "netdev", "netclass", "ethtool", "diskstats", "schedstat", "pressure", "meminfo"}

// BenchmarkSamplingPass compares the CPU one spikehunt sampling pass costs
// (every sampler of agents/collect, the slow /proc/interrupts one
// included, and the points encoded as the OTLP the agent exports) with
// one node_exporter scrape of the same kernel sources (its text
// exposition, uncompressed) on this machine. Both run back to back
// SPIKEHUNT_BENCH_PASSES times (default 300) after a few unmeasured ones;
// spikehunt's is this process's CPU time, node_exporter's its process's.
// It measures once, whatever b.N is. It needs node_exporter from
// `deps/install.sh node-exporter` (make bench-peers-agent installs it).
func BenchmarkSamplingPass(b *testing.B) {
	samplingBench.Do(func() { samplingBench.r, samplingBench.err = measureSampling(b) })
	if samplingBench.err != nil {
		b.Fatal(samplingBench.err)
	}
	r := samplingBench.r
	b.ReportMetric(r.spikehuntUS, "peers.sample_cpu_us_per_pass_spikehunt:us")
	b.ReportMetric(r.nodeExporterUS, "peers.sample_cpu_us_per_pass_node_exporter:us")
	b.ReportMetric(r.spikehuntUS/r.nodeExporterUS, "peers.sample_cpu_ratio:x")
}

var samplingBench struct {
	sync.Once
	r   samplingFigures
	err error
}

type samplingFigures struct {
	spikehuntUS, nodeExporterUS float64 // CPU µs per pass
}

func benchPasses() int {
	if v, err := strconv.Atoi(os.Getenv("SPIKEHUNT_BENCH_PASSES")); err == nil && v > 0 {
		return v
	}
	return 300
}

// nodeExporterBinary is the node_exporter `deps/install.sh node-exporter`
// builds, or an error that says how to build it.
func nodeExporterBinary() (string, error) {
	bin := os.Getenv("SPIKEHUNT_NODE_EXPORTER")
	if bin == "" {
		return "", errors.New("SPIKEHUNT_NODE_EXPORTER is not set: run `deps/install.sh node-exporter` and export what `deps/install.sh env` prints (make bench-peers does both)")
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("node_exporter is not built (SPIKEHUNT_NODE_EXPORTER=%s): run `deps/install.sh node-exporter`: %w", bin, err)
	}
	return bin, nil
}

func measureSampling(b *testing.B) (samplingFigures, error) {
	var r samplingFigures
	bin, err := nodeExporterBinary()
	if err != nil {
		return r, err
	}
	passes := benchPasses()

	var points int
	r.spikehuntUS, points, err = spikehuntPassCPU(passes)
	if err != nil {
		return r, err
	}
	var series int
	r.nodeExporterUS, series, err = nodeExporterScrapeCPU(b, bin, passes)
	if err != nil {
		return r, err
	}
	fmt.Printf("peers: one sampling pass over the same kernel sources, %d passes back to back each\n", passes)
	fmt.Printf("peers: spikehunt     %8.0f µs CPU per pass (%s, read, parsed, deltas, OTLP-encoded): %d points\n",
		r.spikehuntUS, strings.Join(collect.Samplers(), " "), points)
	fmt.Printf("peers: node_exporter %8.0f µs CPU per scrape (collectors %s, text exposition, no gzip): %d samples\n",
		r.nodeExporterUS, strings.Join(nodeExporterCollectors, " "), series)
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("peers: machine load average after the run: %s", load)
	}
	return r, nil
}

// processCPU is this process's user + system CPU time.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// spikehuntPassCPU is the CPU µs of one full pass (Sample, SampleSlow and
// the OTLP encoding of their points), averaged over passes, and the
// points of the last pass.
func spikehuntPassCPU(passes int) (float64, int, error) {
	c, err := collect.New(collect.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return 0, 0, fmt.Errorf("the spikehunt samplers: %w", err)
	}
	defer c.Close()
	res := telemetry.Resource{HostName: "bench-node", NodeName: "bench-node", HWClass: "bench"}
	var points []telemetry.Point
	pass := func() error {
		points = append(c.Sample(), c.SampleSlow()...)
		_, err := otlpwire.EncodeMetrics(res, points)
		return err
	}
	for range 5 { // the baselines, and the files opened
		if err := pass(); err != nil {
			return 0, 0, fmt.Errorf("encode the points: %w", err)
		}
	}
	cpu0, err := processCPU()
	if err != nil {
		return 0, 0, err
	}
	for range passes {
		if err := pass(); err != nil {
			return 0, 0, fmt.Errorf("encode the points: %w", err)
		}
	}
	cpu1, err := processCPU()
	if err != nil {
		return 0, 0, err
	}
	return float64((cpu1 - cpu0).Microseconds()) / float64(passes), len(points), nil
}

// nodeExporterScrapeCPU runs node_exporter with only
// nodeExporterCollectors (and without its own Go and process metrics)
// and scrapes it passes times: its CPU µs per scrape, and the samples in
// the last one.
func nodeExporterScrapeCPU(b *testing.B, bin string, passes int) (float64, int, error) {
	addr, err := freeAddr()
	if err != nil {
		return 0, 0, err
	}
	args := []string{"--web.listen-address=" + addr, "--collector.disable-defaults", "--web.disable-exporter-metrics", "--log.level=warn"}
	for _, c := range nodeExporterCollectors {
		args = append(args, "--collector."+c)
	}
	cmd := exec.Command(bin, args...)
	out := &tailBuffer{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, 0, fmt.Errorf("start node_exporter: %w", err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	if err := waitListening(addr, 20*time.Second); err != nil {
		return 0, 0, fmt.Errorf("node_exporter: %w; its output:\n%s", err, out.String())
	}
	url := "http://" + addr + "/metrics"
	// Identity: Go's client would ask for gzip, which would add
	// node_exporter's compression to its figure.
	scrape := func() (int, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Accept-Encoding", "identity")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, fmt.Errorf("scrape node_exporter: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("scrape node_exporter: %s; its output:\n%s", resp.Status, out.String())
		}
		n := 0
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if l := sc.Text(); l != "" && l[0] != '#' {
				n++
			}
		}
		return n, sc.Err()
	}
	for range 5 {
		if _, err := scrape(); err != nil {
			return 0, 0, err
		}
	}
	pid := cmd.Process.Pid
	cpu0 := procCPUSeconds(pid)
	var series int
	for range passes {
		if series, err = scrape(); err != nil {
			return 0, 0, err
		}
	}
	cpu1 := procCPUSeconds(pid)
	if strings.Contains(out.String(), "level=ERROR") {
		b.Logf("node_exporter reported errors (a collector this machine lacks):\n%s", lastLines(out.String(), 10))
	}
	return (cpu1 - cpu0) * 1e6 / float64(passes), series, nil
}
