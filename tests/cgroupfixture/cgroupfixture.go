// Package cgroupfixture writes the cgroup tree of a busy Kubernetes node,
// for the agent's benchmarks: the cgroup sampler's pass
// (agents/collect) and the whole agent under load
// (agents/cmd/spikehunt-agent) read the same tree. Only tests import it.
package cgroupfixture

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Workloads is how many workload cgroups Tree writes: 50 pods of three
// containers each.
const Workloads = 200

// Tree writes the tree into a temporary folder of tb and returns its
// root, what the agent's --path.cgroupfs takes: 50 pods with three
// containers each in the three QoS classes, v1 with the cgroupfs driver
// (cpu/ and cpuacct/ hierarchies, each cgroup with a quota) or v2 with the
// systemd driver (cpu.stat with throttling, cpu.max, cpu.pressure,
// memory.events). The files live on tmpfs and do not change: a pass over
// them measures the agent's reading and bookkeeping; the kernel's
// formatting of cgroupfs files, rstat flushes on v2 included, comes on
// top.
func Tree(tb testing.TB, v2 bool) string {
	tb.Helper()
	root := tb.TempDir()
	w := func(rel, content string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	qos := []string{"", "burstable", "besteffort"}
	for i := range Workloads / 4 {
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
