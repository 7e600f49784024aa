package collect

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// The v1 fixtures in testdata/real/cgroup were captured on this machine
// from cgroups made for the purpose (a pod and its container with a quota
// of 0.2 CPU, a busy loop in the container; a service with a busy loop),
// the v2 ones from the same layout in its unified hierarchy, which has no
// cpu or memory controller: their cpu.stat has usage only. The v2 files
// with throttling (cpu.stat, cpu.max, memory.events) below are written
// by hand in the format of the kernel's
// Documentation/admin-guide/cgroup-v2.rst.

const (
	fixturePodUID = "5f0c3a52-8a4e-4a8e-9b8f-0c6d2f1e7a10"
	fixtureCtrID  = "3f2b9c0d1e4a5b6c7d8e9f00112233445566778899aabbccddeeff0011223344"
	fixturePodV1  = "kubepods/burstable/pod" + fixturePodUID
	fixtureCtrV1  = fixturePodV1 + "/" + fixtureCtrID
	fixturePodV2  = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5f0c3a52_8a4e_4a8e_9b8f_0c6d2f1e7a10.slice"
	fixtureCtrV2  = fixturePodV2 + "/cri-containerd-" + fixtureCtrID + ".scope"

	// A v2 cpu.stat with the cpu controller enabled (kernel 6.x order).
	v2CPUStatThrottled = "usage_usec 2493814\nuser_usec 1848273\nsystem_usec 645541\ncore_sched.force_idle_usec 0\n" +
		"nr_periods 120\nnr_throttled 96\nthrottled_usec 4113405\nnr_bursts 0\nburst_usec 0\n"
	v2MemoryEvents = "low 0\nhigh 12\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n"
)

func counters(fields ...any) cgroupCounters {
	var c cgroupCounters
	for i := 0; i < len(fields); i += 2 {
		f := fields[i].(int)
		c.v[f], c.has[f] = uint64(fields[i+1].(int)), true
	}
	return c
}

func TestParseCgroupCPUStat(t *testing.T) {
	tests := []struct {
		name, file, in string
		want           cgroupCounters
	}{
		{name: "v1 of a throttled container, captured", file: "testdata/real/cgroup/cpu/" + fixtureCtrV1 + "/cpu.stat",
			want: counters(cgPeriods, 15, cgThrottled, 11, cgThrottledNs, 489574296)},
		{name: "v2 without the cpu controller: usage only, µs to ns", file: "testdata/real/cgroup/unified/" + fixtureCtrV2 + "/cpu.stat",
			want: counters(cgUsageNs, 152385000)},
		{name: "v2 with the cpu controller: throttled_usec to ns", in: v2CPUStatThrottled,
			want: counters(cgUsageNs, 2493814000, cgPeriods, 120, cgThrottled, 96, cgThrottledNs, 4113405000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := []byte(tt.in)
			if tt.file != "" {
				var err error
				if b, err = os.ReadFile(tt.file); err != nil {
					t.Fatal(err)
				}
			}
			got, err := parseCgroupCPUStat(b)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(cgroupCounters{})); diff != "" {
				t.Errorf("parseCgroupCPUStat (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseCgroupFilesRejectMalformedInput(t *testing.T) {
	for _, tt := range []struct {
		name  string
		parse func([]byte) error
		in    string
	}{
		{"cpu.stat without usage or periods", cpuStatErr, "nr_bursts 0\n"},
		{"cpu.stat with a negative count", cpuStatErr, "nr_periods -1\n"},
		{"cpu.stat microseconds beyond 64 bits of ns", cpuStatErr, "usage_usec 18446744073709552\n"},
		{"cpuacct.usage that is not a number", usageErr, "12 34\n"},
		{"cpuacct.usage empty", usageErr, ""},
		{"cpu.max with one field", cpuMaxErr, "50000\n"},
		{"cpu.max with a zero period", cpuMaxErr, "50000 0\n"},
		{"cpu.max with three fields", cpuMaxErr, "1 2 3\n"},
		{"cpu.max with a word for quota", cpuMaxErr, "unlimited 100000\n"},
		{"memory.events without max", eventsErr, "low 0\nhigh 0\noom 0\noom_kill 0\n"},
		{"memory.events with a bad count", eventsErr, "high x\nmax 0\noom 0\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.parse([]byte(tt.in)); !errors.Is(err, errMalformed) {
				t.Errorf("error = %v, want errMalformed", err)
			}
		})
	}
}

func cpuStatErr(b []byte) error { _, err := parseCgroupCPUStat(b); return err }
func usageErr(b []byte) error   { _, err := parseCgroupUsage(b); return err }
func cpuMaxErr(b []byte) error  { _, _, _, err := parseCgroupCPUMax(b); return err }
func eventsErr(b []byte) error  { _, err := parseCgroupMemoryEvents(b); return err }

func TestParseCgroupQuotas(t *testing.T) {
	read := func(rel string) []byte {
		b, err := os.ReadFile("testdata/real/cgroup/cpu/" + rel)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	type quota struct {
		Q, P    uint64
		Limited bool
	}
	q, p, l, err := parseCgroupV1Quota(read(fixtureCtrV1+"/cpu.cfs_quota_us"), read(fixtureCtrV1+"/cpu.cfs_period_us"))
	if diff := cmp.Diff(quota{20000, 100000, true}, quota{q, p, l}); err != nil || diff != "" {
		t.Errorf("v1 container quota (-want +got) %v:\n%s", err, diff)
	}
	q, p, l, err = parseCgroupV1Quota(read("kubepods/cpu.cfs_quota_us"), read("kubepods/cpu.cfs_period_us"))
	if diff := cmp.Diff(quota{0, 100000, false}, quota{q, p, l}); err != nil || diff != "" {
		t.Errorf("v1 unlimited (-want +got) %v:\n%s", err, diff)
	}
	q, p, l, err = parseCgroupCPUMax([]byte("50000 100000\n"))
	if diff := cmp.Diff(quota{50000, 100000, true}, quota{q, p, l}); err != nil || diff != "" {
		t.Errorf("cpu.max half a CPU (-want +got) %v:\n%s", err, diff)
	}
	q, p, l, err = parseCgroupCPUMax([]byte("max 100000\n"))
	if diff := cmp.Diff(quota{0, 100000, false}, quota{q, p, l}); err != nil || diff != "" {
		t.Errorf("cpu.max unlimited (-want +got) %v:\n%s", err, diff)
	}
	u, err := parseCgroupUsage(read("../cpuacct/" + fixtureCtrV1 + "/cpuacct.usage"))
	if err != nil || u != 246596454 {
		t.Errorf("cpuacct.usage = %d, %v; want 246596454", u, err)
	}
	ev, err := parseCgroupMemoryEvents([]byte(v2MemoryEvents))
	if err != nil || ev != [4]uint64{12, 3, 1, 1} {
		t.Errorf("memory.events = %v, %v; want high 12, max 3, oom 1, oom_kill 1", ev, err)
	}
}

// mkdirs makes each directory below root.
func mkdirs(t testing.TB, root string, rels ...string) {
	t.Helper()
	for _, r := range rels {
		if err := os.MkdirAll(filepath.Join(root, r), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWalkCgroupsFindsEveryQoSClassUnderBothDrivers(t *testing.T) {
	const u1, u2, u3 = "11111111-2222-3333-4444-555555555555", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "01234567-89ab-cdef-0123-456789abcdef"
	us := func(u string) string { return strings.ReplaceAll(u, "-", "_") }
	const c1, c2, c3 = "c1c1c1c1", "c2c2c2c2", "c3c3c3c3"
	type found struct{ Rel, Name string }
	tests := []struct {
		name string
		dirs []string
		want []found
	}{
		{
			name: "cgroupfs driver: guaranteed pods directly under kubepods, the others under their class",
			dirs: []string{"kubepods/pod" + u1 + "/" + c1, "kubepods/burstable/pod" + u2 + "/" + c2, "kubepods/besteffort/pod" + u3,
				"kubepods/burstable/not-a-pod", "docker/abc"},
			want: []found{
				{"kubepods/besteffort/pod" + u3, "pod " + u3},
				{"kubepods/burstable/pod" + u2, "pod " + u2},
				{"kubepods/burstable/pod" + u2 + "/" + c2, "pod " + u2 + "/" + c2},
				{"kubepods/pod" + u1, "pod " + u1},
				{"kubepods/pod" + u1 + "/" + c1, "pod " + u1 + "/" + c1},
			},
		},
		{
			name: "systemd driver: slices with the UID's dashes as underscores, each runtime's scope, CRI-O's monitor left out",
			dirs: []string{
				"kubepods.slice/kubepods-pod" + us(u1) + ".slice/cri-containerd-" + c1 + ".scope",
				"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us(u2) + ".slice/crio-" + c2 + ".scope",
				"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us(u2) + ".slice/crio-conmon-" + c2 + ".scope",
				"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us(u3) + ".slice/docker-" + c3 + ".scope",
			},
			want: []found{
				{"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us(u3) + ".slice", "pod " + u3},
				{"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us(u3) + ".slice/docker-" + c3 + ".scope", "pod " + u3 + "/" + c3},
				{"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us(u2) + ".slice", "pod " + u2},
				{"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us(u2) + ".slice/crio-" + c2 + ".scope", "pod " + u2 + "/" + c2},
				{"kubepods.slice/kubepods-pod" + us(u1) + ".slice", "pod " + u1},
				{"kubepods.slice/kubepods-pod" + us(u1) + ".slice/cri-containerd-" + c1 + ".scope", "pod " + u1 + "/" + c1},
			},
		},
		{
			name: "no Kubernetes: systemd's slices, and the units directly in them",
			dirs: []string{"system.slice/backup.service", "system.slice/not-a-unit", "user.slice/user-1000.slice/session-1.scope", "init.scope", "machine"},
			want: []found{
				{"init.scope", "init.scope"}, {"system.slice", "system.slice"}, {"system.slice/backup.service", "system.slice/backup.service"},
				{"user.slice", "user.slice"}, {"user.slice/user-1000.slice", "user.slice/user-1000.slice"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			mkdirs(t, root, tt.dirs...)
			ws, skipped, err := walkCgroups(root, 100)
			if err != nil || skipped != 0 {
				t.Fatalf("walkCgroups: %d skipped, %v", skipped, err)
			}
			var got []found
			for _, w := range ws {
				got = append(got, found{w.rel, w.name(uidPodNamer{})})
				// Containers and the units in a slice are nested; with the
				// default namer, exactly the names with a slash.
				if w.nested != strings.Contains(w.name(uidPodNamer{}), "/") {
					t.Errorf("%s: nested = %v", w.rel, w.nested)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("workloads (-want +got):\n%s", diff)
			}
		})
	}
}

// A hostile or runaway tree: 5,000 pods and a limit of 100. The walk keeps
// 100 and counts what it left, reading each directory in batches.
func TestWalkCgroupsStopsAtItsLimitAndCountsTheRest(t *testing.T) {
	root := t.TempDir()
	for i := range 5000 {
		mkdirs(t, root, fmt.Sprintf("kubepods/besteffort/pod%08x-0000-0000-0000-000000000000", i))
	}
	ws, notScanned, err := walkCgroups(root, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 100 || notScanned != 4900 {
		t.Errorf("walk kept %d and counted %d not scanned, want 100 and 4900", len(ws), notScanned)
	}
}

// fakePodNamer knows one pod and its container.
type fakePodNamer struct{}

func (fakePodNamer) PodName(uid string) (string, bool) {
	return "shop/checkout-7d9", uid == fixturePodUID
}

func (fakePodNamer) ContainerName(id string) (string, bool) { return "app", id == fixtureCtrID }

func TestPodNamerNamesPodsAndContainers(t *testing.T) {
	pod := cgroupWorkload{rel: fixturePodV1, podUID: fixturePodUID}
	ctr := cgroupWorkload{rel: fixtureCtrV1, podUID: fixturePodUID, containerID: fixtureCtrID, nested: true}
	got := []string{pod.name(fakePodNamer{}), ctr.name(fakePodNamer{}), pod.name(uidPodNamer{}), ctr.name(uidPodNamer{})}
	want := []string{"shop/checkout-7d9", "shop/checkout-7d9/app", "pod " + fixturePodUID, "pod " + fixturePodUID + "/3f2b9c0d1e4a"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
}

// newCgroupCollector is a Collector of the cgroup sampler alone over
// root/cgroup.
func newCgroupCollector(t *testing.T, root string, clock Clock, top int) *Collector {
	t.Helper()
	c, err := New(Options{
		ProcFS: filepath.Join(root, "proc"), SysFS: filepath.Join(root, "sys"), CgroupFS: filepath.Join(root, "cgroup"),
		Disabled: only("cgroup"), Clock: clock, Logger: discardLogger(), CgroupTop: top, PodNamer: fakePodNamer{},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// cgroupRates returns, per metric{cgroup,…}, the rate of every delta and
// the value of every gauge of a pass.
func cgroupRates(t *testing.T, pts []telemetry.Point) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, p := range pts {
		k := seriesKey(p)
		if _, dup := out[k]; dup {
			t.Fatalf("%s emitted twice in one pass", k)
		}
		if p.IsGauge() {
			out[k] = p.Value
			continue
		}
		out[k] = p.Value / p.End.Sub(p.Start).Seconds()
	}
	return out
}

// The captured v1 tree (this machine is hybrid: cpu and cpuacct on v1,
// unified/ without controllers), then two seconds in which the container
// is throttled in 18 of 20 periods for 0.9 s and uses 0.4 s of CPU, and
// the backup service, which has no quota, uses 3.8 s.
func TestThrottledContainerOnV1IsReportedWithItsLimit(t *testing.T) {
	root := t.TempDir()
	stage(t, root, "real", -1)
	clock := newFakeClock()
	c := newCgroupCollector(t, root, clock, 50)
	if pts := c.Sample(); len(pts) != 0 {
		t.Fatalf("baseline pass emitted %d points, want none", len(pts))
	}
	clock.Advance(2 * time.Second)
	cg := filepath.Join(root, "cgroup")
	writeFile(t, cg, "cpu/"+fixtureCtrV1+"/cpu.stat", "nr_periods 35\nnr_throttled 29\nthrottled_time 2289574296\nnr_bursts 0\nburst_time 0\n")
	writeFile(t, cg, "cpu/"+fixturePodV1+"/cpu.stat", "nr_periods 35\nnr_throttled 6\nthrottled_time 268060900\nnr_bursts 0\nburst_time 0\n")
	writeFile(t, cg, "cpuacct/"+fixtureCtrV1+"/cpuacct.usage", "1046596454\n")
	writeFile(t, cg, "cpuacct/"+fixturePodV1+"/cpuacct.usage", "1046596454\n")
	writeFile(t, cg, "cpuacct/system.slice/backup.service/cpuacct.usage", "7789250442\n")
	writeFile(t, cg, "cpuacct/system.slice/cpuacct.usage", "7789250442\n")
	got := cgroupRates(t, c.Sample())
	const ctr, pod, svc = "{spikehunt.cgroup=shop/checkout-7d9/app}", "{spikehunt.cgroup=shop/checkout-7d9}", "{spikehunt.cgroup=system.slice/backup.service}"
	want := map[string]float64{
		"spikehunt.cgroup.cpu.usage" + ctr: 0.4, "spikehunt.cgroup.cpu.periods" + ctr: 10, "spikehunt.cgroup.cpu.throttled_periods" + ctr: 9,
		"spikehunt.cgroup.cpu.throttled_time" + ctr: 0.9, "spikehunt.cgroup.cpu.limit" + ctr: 0.2,
		"spikehunt.cgroup.cpu.usage" + pod: 0.4, "spikehunt.cgroup.cpu.periods" + pod: 10, "spikehunt.cgroup.cpu.throttled_periods" + pod: 0,
		"spikehunt.cgroup.cpu.throttled_time" + pod: 0, "spikehunt.cgroup.cpu.limit" + pod: 0.2,
		// Without a quota, cpu.stat is not read (all zero): usage alone.
		"spikehunt.cgroup.cpu.usage" + svc: 3.8, "spikehunt.cgroup.cpu.usage{spikehunt.cgroup=system.slice}": 3.8,
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
		t.Errorf("cgroup points (-want +got):\n%s", diff)
	}
}

// A v2 node (systemd driver): the pod's container is throttled at half a
// CPU, stalls on CPU and is OOM-killed once. The real unified captures
// give the tree; cgroup.controllers, cpu.max, memory.events and the
// throttled cpu.stat are hand-made (see the top of this file).
func TestThrottledAndOOMKilledContainerOnV2(t *testing.T) {
	root := t.TempDir()
	v2 := filepath.Join(root, "cgroup")
	stage(t, v2, "real/cgroup/unified", -1)
	writeFile(t, v2, "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
	writeFile(t, v2, fixtureCtrV2+"/cpu.stat", v2CPUStatThrottled)
	writeFile(t, v2, fixtureCtrV2+"/cpu.max", "50000 100000\n")
	writeFile(t, v2, fixtureCtrV2+"/memory.events", v2MemoryEvents)
	clock := newFakeClock()
	c := newCgroupCollector(t, root, clock, 50)
	c.Sample()
	clock.Advance(time.Second)
	writeFile(t, v2, fixtureCtrV2+"/cpu.stat", strings.NewReplacer("usage_usec 2493814", "usage_usec 2993814",
		"nr_periods 120", "nr_periods 130", "nr_throttled 96", "nr_throttled 105", "throttled_usec 4113405", "throttled_usec 4613405").Replace(v2CPUStatThrottled))
	writeFile(t, v2, fixtureCtrV2+"/memory.events", "low 0\nhigh 12\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n")
	writeFile(t, v2, fixtureCtrV2+"/cpu.pressure", "some avg10=40.00 avg60=0.00 avg300=0.00 total=557869\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=457869\n")
	got := cgroupRates(t, c.Sample())
	const ctr = "spikehunt.cgroup=shop/checkout-7d9/app"
	want := map[string]float64{
		"spikehunt.cgroup.cpu.usage{" + ctr + "}": 0.5, "spikehunt.cgroup.cpu.periods{" + ctr + "}": 10,
		"spikehunt.cgroup.cpu.throttled_periods{" + ctr + "}": 9, "spikehunt.cgroup.cpu.throttled_time{" + ctr + "}": 0.5,
		"spikehunt.cgroup.cpu.limit{" + ctr + "}": 0.5,
		"spikehunt.cgroup.pressure.stall_time{" + ctr + ",spikehunt.pressure.resource=cpu,spikehunt.pressure.kind=some}": 0.3,
		"spikehunt.cgroup.pressure.stall_time{" + ctr + ",spikehunt.pressure.resource=cpu,spikehunt.pressure.kind=full}": 0.2,
		"spikehunt.cgroup.memory.events{" + ctr + ",spikehunt.cgroup.memory.event=high}":                                 0,
		"spikehunt.cgroup.memory.events{" + ctr + ",spikehunt.cgroup.memory.event=max}":                                  4,
		"spikehunt.cgroup.memory.events{" + ctr + ",spikehunt.cgroup.memory.event=oom}":                                  1,
		"spikehunt.cgroup.memory.events{" + ctr + ",spikehunt.cgroup.memory.event=oom_kill}":                             1,
	}
	for k := range got {
		if !strings.Contains(k, ctr) {
			delete(got, k) // the pod, the slices: unchanged, zero
		}
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
		t.Errorf("container points (-want +got):\n%s", diff)
	}
}

// writeV1Group writes a v1 cgroup's cpu.stat, cpuacct.usage and quota.
func writeV1Group(t *testing.T, cg, rel string, usageNs, periods, throttled uint64, quotaUs int) {
	t.Helper()
	writeFile(t, cg, "cpu/"+rel+"/cpu.stat", fmt.Sprintf("nr_periods %d\nnr_throttled %d\nthrottled_time %d\n", periods, throttled, throttled*1e6))
	writeFile(t, cg, "cpu/"+rel+"/cpu.cfs_quota_us", fmt.Sprintf("%d\n", quotaUs))
	writeFile(t, cg, "cpu/"+rel+"/cpu.cfs_period_us", "100000\n")
	writeFile(t, cg, "cpuacct/"+rel+"/cpuacct.usage", fmt.Sprintf("%d\n", usageNs))
}

// 60 pods, pod i using i ms of CPU a second, the quietest one throttled;
// the top 5 by CPU and the throttled pod are reported, the other 54 add
// up to "other".
func TestCgroupCardinalityIsTheBusiestPlusTheThrottled(t *testing.T) {
	root := t.TempDir()
	cg := filepath.Join(root, "cgroup")
	writeFile(t, cg, "cpu/cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n")
	writeFile(t, cg, "cpuacct/cpuacct.usage", "0\n")
	pod := func(i int) string { return fmt.Sprintf("kubepods/besteffort/pod%08x-0000-0000-0000-000000000000", i) }
	// Only a cgroup with a quota is throttled: pod 1 has 0.1 CPU.
	quota := func(i int) int {
		if i == 1 {
			return 10000
		}
		return -1
	}
	for i := 1; i <= 60; i++ {
		writeV1Group(t, cg, pod(i), 0, 0, 0, quota(i))
	}
	clock := newFakeClock()
	c := newCgroupCollector(t, root, clock, 5)
	c.Sample()
	clock.Advance(time.Second)
	var otherMs uint64
	for i := 1; i <= 60; i++ {
		throttled := uint64(0)
		if i == 1 {
			throttled = 3
		}
		writeV1Group(t, cg, pod(i), uint64(i)*1e6, 10, throttled, quota(i))
		if i > 1 && i <= 55 {
			otherMs += uint64(i)
		}
	}
	usage := map[string]float64{}
	for k, v := range cgroupRates(t, c.Sample()) {
		if name, ok := strings.CutPrefix(k, "spikehunt.cgroup.cpu.usage{spikehunt.cgroup="); ok {
			usage[strings.TrimSuffix(name, "}")] = v
		}
	}
	want := map[string]float64{"other": float64(otherMs) / 1000}
	for _, i := range []int{1, 56, 57, 58, 59, 60} {
		want["pod "+pod(i)[len("kubepods/besteffort/pod"):]] = float64(i) / 1000
	}
	if diff := cmp.Diff(want, usage, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
		t.Errorf("cgroup usage (-want +got):\n%s", diff)
	}
	for state, n := range map[string]float64{"reported": 6, "aggregated": 54, "unreadable": 0, "not_scanned": 0} {
		if got := testutil.ToFloat64(c.metrics.cgroups.WithLabelValues(state)); got != n {
			t.Errorf("spikehunt_collect_cgroups{state=%q} = %v, want %v", state, got, n)
		}
	}
}

// A cgroup created after the walk appears at the next SampleSlow, with a
// baseline; one deleted drops out with that walk (on the real kernel its
// open files fail at once: TestCgroupThrottlingOnThisKernel); a counter
// that goes down emits nothing and is counted.
func TestCgroupsComeAndGoBetweenWalks(t *testing.T) {
	root := t.TempDir()
	cg := filepath.Join(root, "cgroup")
	writeFile(t, cg, "cpu/cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n")
	writeFile(t, cg, "cpuacct/cpuacct.usage", "0\n")
	writeV1Group(t, cg, "system.slice", 0, 0, 0, -1)
	writeV1Group(t, cg, "system.slice/a.service", 1e9, 0, 0, -1)
	writeV1Group(t, cg, "system.slice/b.service", 1e9, 0, 0, -1)
	clock := newFakeClock()
	c := newCgroupCollector(t, root, clock, 50)
	names := func(pts []telemetry.Point) []string {
		var out []string
		for _, p := range pts {
			if p.Metric == "spikehunt.cgroup.cpu.usage" {
				out = append(out, fmt.Sprint(p.Attrs[0].Value, "=", p.Value))
			}
		}
		slices.Sort(out)
		return out
	}
	c.Sample()
	writeV1Group(t, cg, "system.slice/c.service", 5e9, 0, 0, -1)
	for _, h := range []string{"cpu", "cpuacct"} {
		if err := os.RemoveAll(filepath.Join(cg, h, "system.slice/b.service")); err != nil {
			t.Fatal(err)
		}
	}
	writeV1Group(t, cg, "system.slice/a.service", 2e9, 0, 0, -1)
	clock.Advance(time.Second)
	pass1 := names(c.Sample())
	c.SampleSlow()                                               // the walk finds c.service and no longer b.service
	writeV1Group(t, cg, "system.slice/a.service", 1e9, 0, 0, -1) // a reset
	writeV1Group(t, cg, "system.slice/c.service", 6e9, 0, 0, -1)
	clock.Advance(time.Second)
	pass2 := names(c.Sample())
	clock.Advance(time.Second)
	writeV1Group(t, cg, "system.slice/c.service", 7e9, 0, 0, -1)
	pass3 := names(c.Sample())
	want := [][]string{
		{"system.slice/a.service=1", "system.slice/b.service=0", "system.slice=0"},
		{"system.slice=0"},
		{"system.slice/a.service=0", "system.slice/c.service=1", "system.slice=0"},
	}
	if diff := cmp.Diff(want, [][]string{pass1, pass2, pass3}); diff != "" {
		t.Errorf("usage by pass (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(c.metrics.resets.WithLabelValues("cgroup")); got != 1 {
		t.Errorf("resets = %v, want 1", got)
	}
}

func TestCgroupWithoutHierarchyIsNotSupported(t *testing.T) {
	root := t.TempDir()
	mkdirs(t, root, "cgroup")
	c := newCgroupCollector(t, root, newFakeClock(), 50)
	c.Sample()
	if got := testutil.ToFloat64(c.metrics.notSupported.WithLabelValues("cgroup")); got != 1 {
		t.Errorf("not supported = %v, want 1", got)
	}
}

// On this machine's kernel: a cgroup of our own with a quota of 0.2 CPU
// and a busy loop in it, sampled over a second. It must show throttled
// periods and time, CPU near the quota and the limit; once removed, its
// open files fail and it drops out, counted. It needs root and a cgroup
// hierarchy with the cpu controller (v1, or v2 with cpu in
// system.slice's subtree); it fails instead of skipping under
// SPIKEHUNT_REQUIRE_PRIVILEGED=1.
func TestCgroupThrottlingOnThisKernel(t *testing.T) {
	const root = "/sys/fs/cgroup"
	unit := fmt.Sprintf("system.slice/spikehunt-test-%d.service", os.Getpid())
	h, err := detectCgroups(root)
	if err != nil {
		requirePrivileged(t, "a cgroup hierarchy with the cpu controller", err)
	}
	dirs := []string{filepath.Join(h.cpu, unit)}
	if !h.v2 && h.acct != "" && h.acct != h.cpu {
		dirs = append(dirs, filepath.Join(h.acct, unit))
	}
	made := makeCgroups(t, dirs)
	quota := filepath.Join(dirs[0], "cpu.cfs_quota_us")
	value := "20000"
	if h.v2 {
		quota, value = filepath.Join(dirs[0], "cpu.max"), "20000 100000"
	}
	if err := os.WriteFile(quota, []byte(value), 0o644); err != nil {
		requirePrivileged(t, "a CFS quota on our cgroup (the cpu controller)", err)
	}
	// The highest weight, so that the loop gets its 0.2 CPU (and is
	// throttled) even on a machine busy with other work.
	weight, w := filepath.Join(dirs[0], "cpu.shares"), "262144"
	if h.v2 {
		weight, w = filepath.Join(dirs[0], "cpu.weight"), "10000"
	}
	if err := os.WriteFile(weight, []byte(w), 0o644); err != nil {
		t.Fatalf("weight of our cgroup: %v", err)
	}
	c, err := New(Options{CgroupFS: root, Disabled: only("cgroup"), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Sample()
	var procs strings.Builder
	for _, d := range dirs {
		fmt.Fprintf(&procs, "echo $$ > %s/cgroup.procs && ", d)
	}
	burner := exec.Command("sh", "-c", procs.String()+"while :; do :; done")
	if err := burner.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			burner.Process.Kill()
			burner.Wait()
			stopped = true
		}
	}
	defer stop()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(filepath.Join(dirs[0], "cgroup.procs")); len(b) > 0 {
			break // the loop has moved itself in
		}
		if time.Now().After(deadline) {
			t.Fatal("the busy loop did not enter our cgroup")
		}
	}
	c.Sample()
	time.Sleep(time.Second)
	pts := c.Sample()
	stop()
	got := map[string]float64{}
	var secs float64
	for _, p := range pts {
		if p.Attrs[0].Value == unit {
			got[p.Metric] = p.Value
			if !p.IsGauge() {
				secs = p.End.Sub(p.Start).Seconds()
			}
		}
	}
	t.Logf("%s over %.2f s: %v", unit, secs, got)
	if got["spikehunt.cgroup.cpu.throttled_periods"] < 3 || got["spikehunt.cgroup.cpu.throttled_time"] <= 0 {
		t.Errorf("throttled periods %v, time %v s: want several periods and some time", got["spikehunt.cgroup.cpu.throttled_periods"], got["spikehunt.cgroup.cpu.throttled_time"])
	}
	if u := got["spikehunt.cgroup.cpu.usage"]; u < 0.05*secs || u > 0.3*secs {
		t.Errorf("usage %v s over %.2f s, want about 0.2 CPU", u, secs)
	}
	if got["spikehunt.cgroup.cpu.limit"] != 0.2 {
		t.Errorf("limit = %v CPUs, want 0.2", got["spikehunt.cgroup.cpu.limit"])
	}
	for i := len(made) - 1; i >= 0; i-- {
		if filepath.Base(made[i]) == filepath.Base(unit) {
			if err := os.Remove(made[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.Sample()
	if got := testutil.ToFloat64(c.metrics.cgroups.WithLabelValues("unreadable")); got != 1 {
		t.Errorf("unreadable = %v after our cgroup was removed, want 1", got)
	}
}

// makeCgroups creates each of dirs and its parent where missing, and
// removes what it made, in reverse, when the test ends. It returns what it
// made, for a test that removes a cgroup sooner.
func makeCgroups(t *testing.T, dirs []string) []string {
	var made []string
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			if err := os.Remove(made[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("remove %s: %v", made[i], err)
			}
		}
	})
	for _, d := range dirs {
		for _, p := range []string{filepath.Dir(d), d} {
			if err := os.Mkdir(p, 0o755); err == nil {
				made = append(made, p)
			} else if !errors.Is(err, os.ErrExist) {
				requirePrivileged(t, "creating a cgroup (root)", err)
			}
		}
	}
	return made
}

// requirePrivileged skips a test that lacks root or a kernel feature, or
// fails it under SPIKEHUNT_REQUIRE_PRIVILEGED=1, as tests/testenv does;
// that package would bring client-go and minio into this package's test
// build (and every fuzz build's instrumentation).
func requirePrivileged(t *testing.T, feature string, reason error) {
	t.Helper()
	if os.Getenv("SPIKEHUNT_REQUIRE_PRIVILEGED") == "1" {
		t.Fatalf("%s is required (SPIKEHUNT_REQUIRE_PRIVILEGED=1) but unavailable: %v", feature, reason)
	}
	t.Skipf("%s unavailable, skipping (set SPIKEHUNT_REQUIRE_PRIVILEGED=1 to fail instead): %v", feature, reason)
}

// On this machine's kernel: a cgroup of our own with a 32 MiB memory
// limit, and 96 MiB written to a file from inside it, so its page cache
// hits the limit and its writer reclaims. /proc/vmstat's direct reclaim
// counters do not count cgroup reclaim; the cgroup's own count does (v1
// memory.failcnt, v2 memory.events "max"), and the sampler must report it
// as the event "max".
func TestCgroupMemoryLimitHitsOnThisKernel(t *testing.T) {
	const root = "/sys/fs/cgroup"
	h, err := detectCgroups(root)
	if err != nil {
		requirePrivileged(t, "a cgroup hierarchy with the cpu controller", err)
	}
	unit := fmt.Sprintf("system.slice/spikehunt-memtest-%d.service", os.Getpid())
	dirs := []string{filepath.Join(h.cpu, unit)}
	limit, value := filepath.Join(dirs[0], "memory.max"), "33554432"
	if !h.v2 {
		if h.memory == "" {
			requirePrivileged(t, "the v1 memory controller", errors.New("no memory/memory.failcnt under "+root))
		}
		dirs = append(dirs, filepath.Join(h.memory, unit))
		limit, value = filepath.Join(dirs[1], "memory.limit_in_bytes"), "32M"
	}
	makeCgroups(t, dirs)
	if err := os.WriteFile(limit, []byte(value), 0o644); err != nil {
		requirePrivileged(t, "a memory limit on our cgroup (the memory controller)", err)
	}
	c, err := New(Options{CgroupFS: root, Disabled: only("cgroup"), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Sample()
	file := filepath.Join(t.TempDir(), "fill")
	var procs strings.Builder
	for _, d := range dirs {
		fmt.Fprintf(&procs, "echo $$ > %s/cgroup.procs && ", d)
	}
	writer := exec.Command("sh", "-c", procs.String()+"dd if=/dev/zero of="+file+" bs=1M count=96 2>/dev/null")
	if out, err := writer.CombinedOutput(); err != nil {
		t.Fatalf("writer: %v: %s", err, out)
	}
	pts := c.Sample()
	var hits float64
	found := false
	for _, p := range pts {
		if p.Metric == "spikehunt.cgroup.memory.events" && p.Attrs[0].Value == unit && p.Attrs[1].Value == "max" {
			hits, found = p.Value, true
		}
	}
	t.Logf("%s: limit hits %v", unit, hits)
	if !found || hits < 10 {
		t.Errorf("limit hits %v (reported %v), want the writer's dozens", hits, found)
	}
}

// On v2, cpu.pressure and memory.events are read only for the cgroups
// kept (CgroupTop 1 here: the busiest pod); a pod that enters the kept set
// reports them from its second pass in it, never the change it gathered
// while it was out as one pass's.
func TestCgroupV2ReadsPressureAndMemoryEventsOnlyForTheKeptCgroups(t *testing.T) {
	root := t.TempDir()
	v2 := filepath.Join(root, "cgroup")
	writeFile(t, v2, "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
	pod := func(name string) string {
		return "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + name + "_0000_0000_0000_000000000000.slice"
	}
	a, b := pod("0000000a"), pod("0000000b")
	write := func(rel string, usageUs, someUs, maxEvents int) {
		writeFile(t, v2, rel+"/cpu.stat", fmt.Sprintf("usage_usec %d\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n", usageUs))
		writeFile(t, v2, rel+"/cpu.pressure", fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", someUs))
		writeFile(t, v2, rel+"/memory.events", fmt.Sprintf("low 0\nhigh 0\nmax %d\noom 0\noom_kill 0\n", maxEvents))
	}
	write(a, 0, 0, 0)
	write(b, 0, 0, 0)
	clock := newFakeClock()
	c := newCgroupCollector(t, root, clock, 1)
	s := c.fast[0].s.(*cgroupSampler)
	open := func(rel string) bool { _, ok := s.files[filepath.Join(v2, rel, "cpu.pressure")]; return ok }
	const pressure, maxEv = "spikehunt.cgroup.pressure.stall_time{spikehunt.cgroup=pod 0000000%s-0000-0000-0000-000000000000,spikehunt.pressure.resource=cpu,spikehunt.pressure.kind=some}",
		"spikehunt.cgroup.memory.events{spikehunt.cgroup=pod 0000000%s-0000-0000-0000-000000000000,spikehunt.cgroup.memory.event=max}"
	c.Sample() // every pod's baseline, its v2 files included
	if !open(a) || !open(b) {
		t.Fatal("the baseline pass did not read every pod's cpu.pressure")
	}
	for i, pass := range []struct {
		aUsage, aSome, aMax, bUsage, bSome, bMax int
		want                                     map[string]float64
		bRead                                    bool
	}{
		// a is the busiest; b stalls 0.2 s and hits its limit twice, unread.
		{500000, 100000, 1, 100000, 200000, 2, map[string]float64{
			fmt.Sprintf(pressure, "a"): 0.1, fmt.Sprintf(maxEv, "a"): 1}, false},
		// b is now the busiest, a is out: b's files read last at the
		// baseline, two passes ago, it reports none yet (against them it
		// would read 0.4 s of stall and 4 hits in one second).
		{600000, 150000, 1, 1100000, 400000, 4, map[string]float64{}, true},
		// b's second pass in the set: its second's stall and hits.
		{700000, 200000, 1, 2100000, 700000, 7, map[string]float64{
			fmt.Sprintf(pressure, "b"): 0.3, fmt.Sprintf(maxEv, "b"): 3}, true},
	} {
		clock.Advance(time.Second)
		write(a, pass.aUsage, pass.aSome, pass.aMax)
		write(b, pass.bUsage, pass.bSome, pass.bMax)
		got := map[string]float64{}
		for k, v := range cgroupRates(t, c.Sample()) {
			if strings.Contains(k, "kind=some") || strings.Contains(k, "event=max") {
				got[k] = v
			}
		}
		if diff := cmp.Diff(pass.want, got, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
			t.Errorf("pass %d: pressure and limit hits (-want +got):\n%s", i+2, diff)
		}
		if open(b) != pass.bRead || open(a) == pass.bRead {
			t.Errorf("pass %d: cpu.pressure open for a %v, b %v; want only the kept pod's", i+2, open(a), open(b))
		}
	}
}
