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
)

// BenchmarkSample times one full fast pass over this machine's real /proc
// and /sys, with the cgroup sampler over a generated tree of 200 workload
// cgroups (cgroupBenchTree), v1 as on this machine and v2.
// agent.sample_tick_ms is the median pass with the v1 tree, the figure to
// compare across commits; the target is 2 ms or less.
func BenchmarkSample(b *testing.B) {
	for _, v := range []struct {
		layout, figure string
	}{{"v1", "agent.sample_tick_ms"}, {"v2", "agent.sample_tick_cgroup_v2_ms"}} {
		b.Run("cgroup="+v.layout, func(b *testing.B) {
			c, err := New(Options{CgroupFS: cgroupBenchTree(b, v.layout == "v2"), Logger: discardLogger()})
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
				testutil.ToFloat64(c.metrics.cgroups.WithLabelValues("aggregated")); got != cgroupBenchCount {
				b.Fatalf("the pass saw %v cgroups, want %d", got, cgroupBenchCount)
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

// cgroupBenchCount is the workload cgroups of cgroupBenchTree: 50 pods of
// three containers each.
const cgroupBenchCount = 200

// cgroupBenchTree writes a cgroup tree of a busy Kubernetes node, 50
// pods with three containers each in the three QoS classes: v1 with the
// cgroupfs driver (cpu/ and cpuacct/ hierarchies, as on this machine), or
// v2 with the systemd driver (cpu.stat with throttling, cpu.max,
// cpu.pressure, memory.events). The files live on tmpfs, so the pass
// measures the agent's reading and bookkeeping; the kernel's formatting
// of cgroupfs files, rstat flushes on v2 included, comes on top.
func cgroupBenchTree(b *testing.B, v2 bool) string {
	b.Helper()
	root := b.TempDir()
	w := func(rel, content string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	qos := []string{"", "burstable", "besteffort"}
	for i := range cgroupBenchCount / 4 {
		uid := fmt.Sprintf("%08x-8a4e-4a8e-9b8f-0c6d2f1e7a10", i)
		var dirs []string
		if v2 {
			pod := "kubepods.slice/kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
			if q := qos[i%3]; q != "" {
				pod = "kubepods.slice/kubepods-" + q + ".slice/kubepods-" + q + "-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
			}
			dirs = append(dirs, pod)
			for c := range 3 {
				dirs = append(dirs, fmt.Sprintf("%s/cri-containerd-%08x%056x.scope", pod, i, c))
			}
			for _, d := range dirs {
				w(d+"/cpu.stat", fmt.Sprintf("usage_usec %d\nuser_usec 1\nsystem_usec 1\ncore_sched.force_idle_usec 0\nnr_periods %d\nnr_throttled 3\nthrottled_usec 41134\nnr_bursts 0\nburst_usec 0\n", 2493814+i, 120+i))
				w(d+"/cpu.max", "50000 100000\n")
				w(d+"/cpu.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=257869\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=257869\n")
				w(d+"/memory.events", "low 0\nhigh 12\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n")
			}
			continue
		}
		pod := "kubepods/" + qos[i%3] + "/pod" + uid
		dirs = append(dirs, pod)
		for c := range 3 {
			dirs = append(dirs, fmt.Sprintf("%s/%08x%056x", pod, i, c))
		}
		for _, d := range dirs {
			w("cpu/"+d+"/cpu.stat", fmt.Sprintf("nr_periods %d\nnr_throttled 11\nthrottled_time 489574296\nnr_bursts 0\nburst_time 0\n", 15+i))
			w("cpu/"+d+"/cpu.cfs_quota_us", "20000\n")
			w("cpu/"+d+"/cpu.cfs_period_us", "100000\n")
			w("cpuacct/"+d+"/cpuacct.usage", fmt.Sprintf("%d\n", 246596454+i))
		}
	}
	if v2 {
		w("cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
	} else {
		w("cpu/cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n")
		w("cpuacct/cpuacct.usage", "233650778626\n")
	}
	return root
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
	c, err := New(Options{ProcFS: filepath.Join(root, "proc"), SysFS: filepath.Join(root, "sys"), CgroupFS: cgroupBenchTree(b, false),
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
