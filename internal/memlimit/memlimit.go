// Package memlimit gives the Go runtime a soft memory limit under the
// memory limit of the process's cgroup, as GOMEMLIMIT would: the garbage
// collector then works harder as the heap nears the pod's limit, instead
// of letting a burst of garbage (a first list of every Node, a large
// batch) reach it and the kernel kill the process.
//
// The limit is read as the kernel enforces it: the process's own cgroup
// (/proc/self/cgroup) under its mount (/proc/self/mountinfo), cgroup v2's
// memory.max or v1's memory.limit_in_bytes, and the tightest of it and
// its ancestors up to the mount's root. A container sees its own cgroup
// at the root of its cgroup namespace; a host process sees its slice.
package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultRatio is the share of the cgroup's limit the runtime may use:
// the rest is for what the runtime does not count (thread stacks outside
// the heap's accounting, cgo, the page cache charged to the cgroup).
const DefaultRatio = 0.9

// noLimit is where a cgroup v1 limit means none: the kernel writes
// PAGE_COUNTER_MAX pages, 2^63 rounded down to a page.
const noLimit = 1 << 60

// Set sets the runtime's soft memory limit to ratio of the cgroup's
// memory limit and returns it with the file it came from. It sets
// nothing, and returns 0, when GOMEMLIMIT is set (the operator of the
// process chose), when ratio is 0, or when the cgroup has no limit.
// Without /proc (another OS), there is no cgroup and no limit.
func Set(ratio float64) (limit int64, from string, err error) {
	if err := CheckRatio(ratio); err != nil {
		return 0, "", err
	}
	if ratio == 0 || os.Getenv("GOMEMLIMIT") != "" {
		return 0, "", nil
	}
	cg, err := readBounded("/proc/self/cgroup")
	if errors.Is(err, os.ErrNotExist) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", err
	}
	mi, err := readBounded("/proc/self/mountinfo")
	if err != nil {
		return 0, "", err
	}
	max, from, err := CgroupLimit(cg, mi, readBounded)
	if err != nil || max == 0 {
		return 0, "", err
	}
	limit = int64(float64(max) * ratio)
	debug.SetMemoryLimit(limit)
	return limit, from, nil
}

// CheckRatio refuses a ratio Set would refuse: below 0, above 1, NaN.
func CheckRatio(ratio float64) error {
	if !(ratio >= 0 && ratio <= 1) {
		return fmt.Errorf("memory limit ratio %v: want 0 (off) to 1", ratio)
	}
	return nil
}

// CgroupLimit is the memory limit in bytes of the cgroup that cgroup
// (the text of /proc/self/cgroup) names, under the mounts of mountinfo
// (/proc/self/mountinfo), read with read: the tightest of the cgroup's
// and its ancestors' up to its mount's root, and the file it came from.
// It is 0 when no cgroup of the process has a memory limit, or its
// memory controller is not mounted.
func CgroupLimit(cgroup, mountinfo []byte, read func(string) ([]byte, error)) (int64, string, error) {
	v2Path, v1Path := "", ""
	v2Found, v1Found := false, false
	for _, line := range strings.Split(string(cgroup), "\n") {
		// hierarchy-ID:controllers:path; cgroup v2 is 0 with no controllers.
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, p, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		switch {
		case id == "0" && ctrls == "":
			v2Path, v2Found = p, true
		case hasField(ctrls, "memory"):
			v1Path, v1Found = p, true
		}
	}
	mounts := parseMountinfo(mountinfo)
	// A v1 memory hierarchy wins over the v2 one when both are there (a
	// hybrid host): the memory controller lives on one of them only.
	if v1Found {
		for _, m := range mounts {
			if m.fstype == "cgroup" && hasField(m.super, "memory") {
				return tightest(m, v1Path, "memory.limit_in_bytes", read)
			}
		}
	}
	if v2Found {
		for _, m := range mounts {
			if m.fstype == "cgroup2" {
				return tightest(m, v2Path, "memory.max", read)
			}
		}
	}
	return 0, "", nil
}

// tightest walks from the cgroup at p up to the mount's root and returns
// the lowest limit in file, 0 for none.
func tightest(m mount, p, file string, read func(string) ([]byte, error)) (int64, string, error) {
	rel := p
	if m.root != "/" {
		if !strings.HasPrefix(p+"/", m.root+"/") {
			return 0, "", nil // the process's cgroup is outside what is mounted here
		}
		rel = strings.TrimPrefix(p, m.root)
	}
	rel = path.Clean("/" + rel)
	var best int64
	var from string
	for {
		f := path.Join(m.point, rel, file)
		b, err := read(f)
		switch {
		case errors.Is(err, os.ErrNotExist):
			// The root cgroup of v2 has no memory.max.
		case err != nil:
			return 0, "", fmt.Errorf("cgroup memory limit: %w", err)
		default:
			v, err := parseLimit(b)
			if err != nil {
				return 0, "", fmt.Errorf("cgroup memory limit in %s: %w", f, err)
			}
			if v > 0 && (best == 0 || v < best) {
				best, from = v, f
			}
		}
		if rel == "/" {
			return best, from, nil
		}
		rel = path.Dir(rel)
	}
}

// parseLimit reads memory.max ("max" or bytes) or memory.limit_in_bytes
// (bytes, ≥ 2^60 for none); 0 means no limit.
func parseLimit(b []byte) (int64, error) {
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a limit: %q", s)
	}
	if v >= noLimit || v == 0 {
		return 0, nil
	}
	return int64(v), nil
}

type mount struct{ root, point, fstype, super string }

// parseMountinfo reads the lines of /proc/self/mountinfo: "ID parent
// major:minor root mount-point options [optional fields] - fstype source
// super-options", octal escapes left as they are (a cgroup mount's paths
// have none to speak of).
func parseMountinfo(b []byte) []mount {
	var out []mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		out = append(out, mount{root: f[3], point: f[4], fstype: g[0], super: g[2]})
	}
	return out
}

func hasField(list, name string) bool {
	for _, f := range strings.Split(list, ",") {
		if f == name {
			return true
		}
	}
	return false
}

// readBounded reads at most 1 MiB of a file of /proc or /sys.
func readBounded(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}
