package collect

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/tests/cgroupfixture"
)

// BenchmarkSample times one full fast pass over this machine's real /proc
// and /sys, with the cgroup sampler over a generated tree of 200 workload
// cgroups (tests/cgroupfixture), v1 as on this machine and v2.
// agent.sample_tick_ms is the median pass with the v1 tree, the figure to
// compare across commits; the target is 2 ms or less.
func BenchmarkSample(b *testing.B) {
	for _, v := range []struct {
		layout, figure string
	}{{"v1", "agent.sample_tick_ms"}, {"v2", "agent.sample_tick_cgroup_v2_ms"}} {
		b.Run("cgroup="+v.layout, func(b *testing.B) {
			c, err := New(Options{CgroupFS: cgroupfixture.Tree(b, v.layout == "v2"), Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			c.Sample() // baseline
			if got := testutil.ToFloat64(c.metrics.cgroups.WithLabelValues("reported")) +
				testutil.ToFloat64(c.metrics.cgroups.WithLabelValues("aggregated")); got != 0 {
				b.Fatalf("baseline pass counted %v cgroups, want none yet", got)
			}
			c.Sample()
			if got := testutil.ToFloat64(c.metrics.cgroups.WithLabelValues("reported")) +
				testutil.ToFloat64(c.metrics.cgroups.WithLabelValues("aggregated")); got != cgroupfixture.Workloads {
				b.Fatalf("the pass saw %v cgroups, want %d", got, cgroupfixture.Workloads)
			}
			b.ReportAllocs()
			durs := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				began := time.Now()
				c.Sample()
				durs = append(durs, time.Since(began))
			}
			b.StopTimer()
			slices.Sort(durs)
			b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds())/1e6, v.figure+":ms")
		})
	}
}

// BenchmarkSampleSlow times one /proc/interrupts pass.
func BenchmarkSampleSlow(b *testing.B) {
	c, err := New(Options{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.SampleSlow()
	b.ReportAllocs()
	for b.Loop() {
		c.SampleSlow()
	}
}

// largeHostTree writes a fixture tree shaped like a big Kubernetes node:
// 128 CPUs, 200 veth interfaces plus two NICs, 16 disks and 1,000 IRQs
// (vmstat and the net MIB files are this machine's).
// The files live on tmpfs, so the benchmarks below measure the agent's own
// parsing and bookkeeping, not the kernel's formatting of the files.
func largeHostTree(b *testing.B) string {
	b.Helper()
	root := b.TempDir()
	const cpus, veths, disks, irqs = 128, 200, 16, 1000
	w := func(rel string, fill func(*strings.Builder)) {
		var sb strings.Builder
		fill(&sb)
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	header := func(sb *strings.Builder) {
		sb.WriteString("           ")
		for c := range cpus {
			fmt.Fprintf(sb, "CPU%-8d", c)
		}
		sb.WriteString("\n")
	}
	w("proc/stat", func(sb *strings.Builder) {
		sb.WriteString("cpu  1 2 3 4 5 6 7 8 0 0\n")
		for c := range cpus {
			fmt.Fprintf(sb, "cpu%d 812345 120 301234 9123456 4321 0 23456 0 0 0\n", c)
		}
		sb.WriteString("ctxt 51234567\n")
	})
	w("proc/softirqs", func(sb *strings.Builder) {
		header(sb)
		for _, v := range []string{"HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"} {
			fmt.Fprintf(sb, "%12s:", v)
			for c := range cpus {
				fmt.Fprintf(sb, " %10d", 1000000+c)
			}
			sb.WriteString("\n")
		}
	})
	w("proc/interrupts", func(sb *strings.Builder) {
		header(sb)
		for i := range irqs {
			fmt.Fprintf(sb, "%4d:", 24+i)
			for c := range cpus {
				fmt.Fprintf(sb, " %10d", (i*7+c)%3*1000)
			}
			fmt.Fprintf(sb, "  IR-PCI-MSI %d-edge      eth%d-TxRx-%d\n", 524288+i, i/64, i%64)
		}
		sb.WriteString(" ERR:          0\n MIS:          0\n")
	})
	w("proc/net/dev", func(sb *strings.Builder) {
		sb.WriteString(netDevHeader)
		for i := range veths + 2 {
			fmt.Fprintf(sb, "%14s: 123456789 123456 0 0 0 0 0 0 987654321 654321 0 0 0 0 0 0\n", ifaceName(i))
		}
	})
	for i := range veths + 2 {
		w("sys/class/net/"+ifaceName(i)+"/operstate", func(sb *strings.Builder) { sb.WriteString("up\n") })
		if i < 2 {
			w("sys/class/net/"+ifaceName(i)+"/device/uevent", func(sb *strings.Builder) { sb.WriteString("DRIVER=mlx5_core\n") })
			for _, c := range sysfsDropCounters {
				w("sys/class/net/"+ifaceName(i)+"/statistics/"+c, func(sb *strings.Builder) { sb.WriteString("42\n") })
			}
		}
	}
	w("proc/diskstats", func(sb *strings.Builder) {
		for d := range disks {
			fmt.Fprintf(sb, " 259 %7d nvme%dn1 500000 0 90000000 250000 800000 0 160000000 400000 1 300000 650000 0 0 0 0 0 0\n", d, d)
		}
	})
	w("proc/schedstat", func(sb *strings.Builder) {
		sb.WriteString("version 15\ntimestamp 1\n")
		for c := range cpus {
			fmt.Fprintf(sb, "cpu%d 0 0 9 4 7 3 912345678901 81234567890 512345\n", c)
		}
	})
	for _, r := range []string{"cpu", "memory", "io"} {
		w("proc/pressure/"+r, func(sb *strings.Builder) {
			sb.WriteString("some avg10=0.00 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1\n")
		})
	}
	w("proc/meminfo", func(sb *strings.Builder) { sb.WriteString("Slab: 1 kB\nSReclaimable: 1 kB\nSUnreclaim: 0 kB\n") })
	for _, f := range []string{"proc/vmstat", "proc/net/snmp", "proc/net/netstat"} {
		real, err := os.ReadFile(filepath.Join("testdata/real", f))
		if err != nil {
			b.Fatal(err)
		}
		w(f, func(sb *strings.Builder) { sb.Write(real) })
	}
	return root
}

func ifaceName(i int) string {
	if i < 2 {
		return fmt.Sprintf("eth%d", i)
	}
	return fmt.Sprintf("veth%08x", i)
}

// BenchmarkSampleLargeHost is BenchmarkSample on the large-host tree and
// the v1 200-cgroup tree.
func BenchmarkSampleLargeHost(b *testing.B) {
	root := largeHostTree(b)
	c, err := New(Options{ProcFS: filepath.Join(root, "proc"), SysFS: filepath.Join(root, "sys"), CgroupFS: cgroupfixture.Tree(b, false),
		Logger: discardLogger(), ethtool: fixtureEthtool{dir: filepath.Join(root, "ethtool")}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.Sample()
	b.ReportAllocs()
	durs := make([]time.Duration, 0, b.N)
	for b.Loop() {
		began := time.Now()
		c.Sample()
		durs = append(durs, time.Since(began))
	}
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds())/1e6, "agent.sample_tick_large_host_ms:ms")
}

// BenchmarkSampleSlowLargeHost parses a 1,000-IRQ × 128-CPU /proc/interrupts.
func BenchmarkSampleSlowLargeHost(b *testing.B) {
	root := largeHostTree(b)
	c, err := New(Options{ProcFS: filepath.Join(root, "proc"), SysFS: filepath.Join(root, "sys"),
		Disabled: only("interrupts"), Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.SampleSlow()
	b.ReportAllocs()
	for b.Loop() {
		c.SampleSlow()
	}
}

// BenchmarkCgroupWalk times one walk of the 200-cgroup tree
// (tests/cgroupfixture), v1 and v2: the directory listing and each
// cgroup's settings, which SampleSlow's rescan does every 10 s. A walk
// over N ms costs the agent N/10 ms a second.
func BenchmarkCgroupWalk(b *testing.B) {
	for _, layout := range []string{"v1", "v2"} {
		b.Run("cgroup="+layout, func(b *testing.B) {
			c, err := New(Options{CgroupFS: cgroupfixture.Tree(b, layout == "v2"), Logger: discardLogger(), Disabled: only("cgroup")})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			s := c.fast[0].s.(*cgroupSampler)
			b.ReportAllocs()
			durs := make([]time.Duration, 0, b.N)
			for b.Loop() {
				began := time.Now()
				sc, err := s.scan()
				durs = append(durs, time.Since(began))
				if err != nil || len(sc.groups) != cgroupfixture.Workloads {
					b.Fatalf("the walk found %d cgroups (%v), want %d", len(sc.groups), err, cgroupfixture.Workloads)
				}
			}
			slices.Sort(durs)
			b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds())/1e6, "agent.cgroup_walk_"+layout+"_ms:ms")
		})
	}
}
