package perf

import (
	"strings"
	"testing"
	"time"
)

// mountinfo as this machine's kernel writes it (cgroup v1 controllers,
// each its own mount, and v2 beside them), with a v1 hierarchy that
// comounts cpu and cpuacct as most distributions do, and a space escaped.
const mountinfo = `23 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 /kube\040pods /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 31 0:39 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
`

func TestParseCgroupMountsFindsTheControllers(t *testing.T) {
	v1, v2, v2Root := parseCgroupMounts([]byte(mountinfo))
	if v1["cpu"] != [2]string{"/sys/fs/cgroup/cpu", "/"} || v1["memory"] != [2]string{"/sys/fs/cgroup/memory", "/kube pods"} {
		t.Errorf("v1 %v", v1)
	}
	if _, ok := v1["cpuacct"]; ok {
		t.Errorf("v1 keeps only cpu and memory: %v", v1)
	}
	if v2 != "/sys/fs/cgroup/unified" || v2Root != "/" {
		t.Errorf("v2 %q %q", v2, v2Root)
	}
	v1, v2, _ = parseCgroupMounts([]byte("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"))
	if len(v1) != 0 || v2 != "/sys/fs/cgroup" {
		t.Errorf("a v2-only host: %v %q", v1, v2)
	}
}

func TestParseProcCgroupReadsBothVersions(t *testing.T) {
	got := parseProcCgroup([]byte("9:name=systemd:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/kubepods/pod1/ctr\n0::/system.slice/backup.service\nbroken\n"))
	want := map[string]string{"name=systemd": "/", "memory": "/process_api/abc", "cpu": "/kubepods/pod1/ctr", "cpuacct": "/kubepods/pod1/ctr", "": "/system.slice/backup.service"}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q: %q, want %q", k, got[k], v)
		}
	}
}

func TestParseCPUStatV1AndV2(t *testing.T) {
	v1, err := parseCPUStat([]byte("nr_periods 12\nnr_throttled 5\nthrottled_time 350000000\nnr_bursts 0\nburst_time 0\n"))
	if err != nil || v1.Periods != 12 || v1.Throttled != 5 || v1.ThrottledNS != 350*time.Millisecond {
		t.Errorf("v1 %+v %v", v1, err)
	}
	v2, err := parseCPUStat([]byte("usage_usec 100\nuser_usec 60\nsystem_usec 40\nnr_periods 7\nnr_throttled 3\nthrottled_usec 250000\nnr_bursts 0\nburst_usec 0\n"))
	if err != nil || v2.Periods != 7 || v2.Throttled != 3 || v2.ThrottledNS != 250*time.Millisecond {
		t.Errorf("v2 %+v %v", v2, err)
	}
	// The root's cpu.stat on v2 has no bandwidth lines.
	if _, err := parseCPUStat([]byte("usage_usec 100\nuser_usec 60\n")); err == nil {
		t.Error("a cpu.stat without the bandwidth counters was read")
	}
}

func TestParseQuotaAndLimit(t *testing.T) {
	for _, tc := range []struct {
		v2                 bool
		max, quota, period string
		q, p               int64
		ok                 bool
	}{
		{true, "50000 100000\n", "", "", 50000, 100000, true},
		{true, "max 100000\n", "", "", 0, 0, false},
		{true, "", "", "", 0, 0, false},
		{false, "", "10000\n", "100000\n", 10000, 100000, true},
		{false, "", "-1\n", "100000\n", 0, 0, false},
		{false, "", "10000\n", "", 0, 0, false},
	} {
		q, p, ok := parseQuota(tc.v2, []byte(tc.max), []byte(tc.quota), []byte(tc.period))
		if q != tc.q || p != tc.p || ok != tc.ok {
			t.Errorf("%+v: %d %d %v", tc, q, p, ok)
		}
	}
	for in, want := range map[string]int64{"33554432\n": 32 << 20, "max\n": 0, "9223372036854771712\n": 0, "-1": 0, "": 0} {
		if got := parseLimit([]byte(in)); got != want {
			t.Errorf("parseLimit(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestCgroupDirUnderAMountWithARoot(t *testing.T) {
	if got := cgroupDir("/sys/fs/cgroup/memory", "/kube pods", "/kube pods/pod1"); got != "/sys/fs/cgroup/memory/pod1" {
		t.Errorf("%q", got)
	}
	if got := cgroupDir("/sys/fs/cgroup/cpu", "/", "/../../etc"); got != "/sys/fs/cgroup/cpu/etc" {
		t.Errorf("a path cannot leave its mount: %q", got)
	}
}

// FuzzCgroupFiles: any bytes in the files the recorder reads (mountinfo,
// /proc/<pid>/cgroup, cpu.stat, cpu.max, the limits) give a value or an
// error, never a panic, and a cgroup directory stays under its mount.
func FuzzCgroupFiles(f *testing.F) {
	f.Add([]byte(mountinfo))
	f.Add([]byte("2:cpu,cpuacct:/kubepods/pod1\n0::/a\n"))
	f.Add([]byte("nr_periods 12\nnr_throttled 5\nthrottled_time 350000000\n"))
	f.Add([]byte("50000 100000"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseCgroupMounts(b)
		for _, p := range parseProcCgroup(b) {
			if d := cgroupDir("/sys/fs/cgroup/cpu", "/", p); d != "/sys/fs/cgroup/cpu" && !strings.HasPrefix(d, "/sys/fs/cgroup/cpu/") {
				t.Fatalf("%q left its mount: %q", p, d)
			}
		}
		parseCPUStat(b)
		parseQuota(true, b, nil, nil)
		parseQuota(false, nil, b, b)
		parseLimit(b)
		unescapeMount(string(b))
	})
}
