package memlimit

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
)

// files is a fake /sys: read answers from the map, else ErrNotExist.
type files map[string]string

func (f files) read(name string) ([]byte, error) {
	if s, ok := f[name]; ok {
		return []byte(s), nil
	}
	return nil, fs.ErrNotExist
}

const (
	mountsV2 = `24 1 0:22 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate
25 1 0:23 / /proc rw - proc proc rw
`
	mountsV1 = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
`
	// A container without a cgroup namespace: the memory hierarchy is
	// bind-mounted from the container's own cgroup.
	mountsV1Docker = `35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro,relatime master:17 - cgroup cgroup rw,memory
`
)

func TestCgroupLimitReadsTheTightestOfTheCgroupAndItsAncestors(t *testing.T) {
	for _, c := range []struct {
		name           string
		cgroup, mounts string
		sys            files
		want           int64
		from           string
	}{
		{"a pod's container, v2, in its cgroup namespace", "0::/\n", mountsV2,
			files{"/sys/fs/cgroup/memory.max": "268435456\n"}, 256 << 20, "/sys/fs/cgroup/memory.max"},
		{"a host slice under a tighter parent, v2", "0::/kubepods/pod1/ctr\n", mountsV2,
			files{"/sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "max\n", "/sys/fs/cgroup/kubepods/pod1/memory.max": "536870912\n",
				"/sys/fs/cgroup/kubepods/memory.max": "8589934592\n"}, 512 << 20, "/sys/fs/cgroup/kubepods/pod1/memory.max"},
		{"no limit anywhere, v2", "0::/user.slice\n", mountsV2,
			files{"/sys/fs/cgroup/user.slice/memory.max": "max\n"}, 0, ""},
		{"a v1 memory cgroup", "9:cpu:/\n5:memory:/spikehunt\n0::/\n", mountsV1,
			files{"/sys/fs/cgroup/memory/spikehunt/memory.limit_in_bytes": "314572800\n",
				"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 300 << 20, "/sys/fs/cgroup/memory/spikehunt/memory.limit_in_bytes"},
		{"v1 unlimited", "5:memory:/\n", mountsV1,
			files{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, ""},
		{"v1 in a container without a cgroup namespace", "5:memory:/docker/abc\n", mountsV1Docker,
			files{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n"}, 1 << 30, "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
		{"no memory controller mounted", "5:memory:/x\n", mountsV2, files{}, 0, ""},
		{"no cgroup file lines", "", mountsV2, files{}, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, from, err := CgroupLimit([]byte(c.cgroup), []byte(c.mounts), c.sys.read)
			if err != nil || got != c.want || from != c.from {
				t.Fatalf("CgroupLimit = %d from %q, %v; want %d from %q", got, from, err, c.want, c.from)
			}
		})
	}
}

func TestCgroupLimitSaysWhichFileItCouldNotRead(t *testing.T) {
	_, _, err := CgroupLimit([]byte("0::/a\n"), []byte(mountsV2), files{"/sys/fs/cgroup/a/memory.max": "lots\n"}.read)
	if err == nil || !strings.Contains(err.Error(), "/sys/fs/cgroup/a/memory.max") || !strings.Contains(err.Error(), `"lots"`) {
		t.Fatalf("err = %v, want one naming the file and its text", err)
	}
	denied := func(string) ([]byte, error) { return nil, fs.ErrPermission }
	if _, _, err := CgroupLimit([]byte("0::/a\n"), []byte(mountsV2), denied); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("err = %v, want the permission error", err)
	}
}

func TestSetLeavesAChosenGOMEMLIMITAndRefusesABadRatio(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "100MiB")
	if n, _, err := Set(DefaultRatio); n != 0 || err != nil {
		t.Fatalf("Set with GOMEMLIMIT set = %d, %v; want 0, nil", n, err)
	}
	os.Unsetenv("GOMEMLIMIT")
	for _, r := range []float64{-0.5, 1.5} {
		if _, _, err := Set(r); err == nil {
			t.Errorf("Set(%v) took it", r)
		}
	}
	if n, _, err := Set(0); n != 0 || err != nil {
		t.Fatalf("Set(0) = %d, %v; want off", n, err)
	}
}
