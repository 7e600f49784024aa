package perf

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/explain"
)

// What the recorder reads of the host's cgroups beside its trace, for the
// verdicts no tracepoint gives: CFS throttling (the kernel has no
// tracepoint for it, so the quotas' cpu.stat is sampled while armed) and
// the cgroup of a task a request waited behind (read from /proc at seal
// time: nothing is added to what perf records, so the armed overhead is
// the sampler's few file reads per interval). cgroup v1 (the cpu and
// memory controllers' own hierarchies) and v2 both.

// cgroupMounts is where the cpu and memory controllers are mounted: the
// mount's directory and its root within the hierarchy (mountinfo's
// fourth field, "/" outside a cgroup namespace's bind mount).
type cgroupMounts struct {
	cpu, memory         string
	cpuRoot, memoryRoot string
	cpuV2, memoryV2     bool
}

// mountedCgroups reads /proc/self/mountinfo and, for a v2 hierarchy, its
// cgroup.controllers.
func mountedCgroups() (cgroupMounts, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return cgroupMounts{}, err
	}
	v1, v2, v2Root := parseCgroupMounts(b)
	var m cgroupMounts
	ctrl, _ := os.ReadFile(filepath.Join(v2, "cgroup.controllers"))
	for _, c := range []struct {
		name      string
		dir, root *string
		onV2      *bool
	}{{"cpu", &m.cpu, &m.cpuRoot, &m.cpuV2}, {"memory", &m.memory, &m.memoryRoot, &m.memoryV2}} {
		if mt, ok := v1[c.name]; ok {
			*c.dir, *c.root = mt[0], mt[1]
		} else if v2 != "" && hasWord(string(ctrl), c.name) {
			*c.dir, *c.root, *c.onV2 = v2, v2Root, true
		}
	}
	if m.cpu == "" {
		return m, errors.New("no cgroup hierarchy has the cpu controller mounted")
	}
	return m, nil
}

// parseCgroupMounts reads mountinfo: each v1 controller's mount (its
// directory and root), and the cgroup2 mount. The first mount of a
// controller wins.
func parseCgroupMounts(b []byte) (v1 map[string][2]string, v2, v2Root string) {
	v1 = map[string][2]string{}
	for line := range strings.Lines(string(b)) {
		pre, post, ok := strings.Cut(strings.TrimSpace(line), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		root, dir := unescapeMount(f[3]), unescapeMount(f[4])
		switch g[0] {
		case "cgroup2":
			if v2 == "" {
				v2, v2Root = dir, root
			}
		case "cgroup":
			for _, opt := range strings.Split(g[2], ",") {
				if _, seen := v1[opt]; !seen && (opt == "cpu" || opt == "memory") {
					v1[opt] = [2]string{dir, root}
				}
			}
		}
	}
	return v1, v2, v2Root
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline
// and backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// parseProcCgroup reads /proc/<pid>/cgroup: "hierarchy:controllers:path"
// lines; each v1 controller's path by name, v2's ("0::/path") by "".
func parseProcCgroup(b []byte) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\n")
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, p, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(p, "/") {
			continue
		}
		if ctrls == "" {
			out[""] = p
			continue
		}
		for _, c := range strings.Split(ctrls, ",") {
			out[c] = p
		}
	}
	return out
}

// dir is a cgroup path's directory under a mount whose root is root.
func cgroupDir(mount, root, p string) string {
	rel := p
	if root != "/" && root != "" {
		rel = strings.TrimPrefix(p, root)
	}
	return filepath.Join(mount, filepath.FromSlash(path.Clean("/"+rel)))
}

// task reads a thread's cgroups and the memory limits on its memory
// cgroup's path; false when the thread is gone.
func (m cgroupMounts) task(tid int32) (explain.TaskCgroups, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", tid))
	if err != nil {
		return explain.TaskCgroups{}, false
	}
	paths := parseProcCgroup(b)
	tc := explain.TaskCgroups{TID: tid}
	if m.cpuV2 {
		tc.CPU = paths[""]
	} else {
		tc.CPU = paths["cpu"]
	}
	if m.memory != "" {
		if m.memoryV2 {
			tc.Memory = paths[""]
		} else {
			tc.Memory = paths["memory"]
		}
	}
	if tc.CPU == "" {
		return tc, false
	}
	if tc.Memory != "" {
		tc.MemoryLimit, tc.MemoryHigh = m.memoryLimits(tc.Memory)
	}
	return tc, true
}

// memoryLimits are the lowest hard and high limits on a memory cgroup's
// path, in bytes (0: none).
func (m cgroupMounts) memoryLimits(p string) (limit, high int64) {
	lowest := func(cur, v int64) int64 {
		if v > 0 && (cur == 0 || v < cur) {
			return v
		}
		return cur
	}
	for {
		dir := cgroupDir(m.memory, m.memoryRoot, p)
		if m.memoryV2 {
			limit = lowest(limit, readLimit(filepath.Join(dir, "memory.max")))
			high = lowest(high, readLimit(filepath.Join(dir, "memory.high")))
		} else {
			limit = lowest(limit, readLimit(filepath.Join(dir, "memory.limit_in_bytes")))
		}
		if p == "/" || p == "" || p == m.memoryRoot {
			return limit, high
		}
		p = path.Dir(p)
	}
}

// readLimit reads a memory limit file: bytes, or 0 for none ("max", v1's
// page-rounded maximum, a missing file).
func readLimit(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	return parseLimit(b)
}

func parseLimit(b []byte) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0
	}
	return n
}

// parseQuota reads a CFS quota: v2's cpu.max ("50000 100000", "max
// 100000"), or v1's cpu.cfs_quota_us and cpu.cfs_period_us (-1: none).
// ok is false without a quota.
func parseQuota(v2 bool, max, quota, period []byte) (q, p int64, ok bool) {
	if v2 {
		f := strings.Fields(string(max))
		if len(f) != 2 || f[0] == "max" {
			return 0, 0, false
		}
		quota, period = []byte(f[0]), []byte(f[1])
	}
	q, err1 := strconv.ParseInt(strings.TrimSpace(string(quota)), 10, 64)
	p, err2 := strconv.ParseInt(strings.TrimSpace(string(period)), 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, 0, false
	}
	return q, p, true
}

// parseCPUStat reads cpu.stat: nr_periods, nr_throttled, and v1's
// throttled_time (ns) or v2's throttled_usec.
func parseCPUStat(b []byte) (explain.CPUStat, error) {
	var s explain.CPUStat
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "nr_periods":
			s.Periods = n
			seen++
		case "nr_throttled":
			s.Throttled = n
			seen++
		case "throttled_time":
			s.ThrottledNS = time.Duration(n)
		case "throttled_usec":
			s.ThrottledNS = time.Duration(n) * time.Microsecond
		}
	}
	if seen < 2 {
		return s, errors.New("cpu.stat has no nr_periods and nr_throttled")
	}
	return s, nil
}

// Bounds of the quota sampler: the cgroups a walk visits, and the
// samples kept per cgroup.
const (
	maxCgroupsWalked = 8192
	maxQuotaSamples  = 512
	// maxOpenStats bounds the cpu.stat files kept open between samples
	// (a read at offset 0 of an open one is a single system call, a
	// fifth of an open, read and close); past it they are opened each
	// time.
	maxOpenStats = 1024
	// rewalkEvery finds the quotas of cgroups made after arming (new
	// pods) this often.
	rewalkEvery = 30 * time.Second
)

// quotaSampler samples the cpu.stat of every cgroup with a CFS quota
// while a capture is armed, every interval; before the fire it keeps the
// samples of the last keep (the pre-window and one interval each side),
// after it all of them, up to maxQuotaSamples. Start runs its goroutine;
// Stop ends it and takes a last sample.
type quotaSampler struct {
	m        cgroupMounts
	interval time.Duration
	keep     time.Duration

	mu     sync.Mutex
	quotas map[string]*explain.CPUQuota // by cgroup path
	open   map[string]*os.File          // their cpu.stat, by cgroup path
	// listen are the listen queue counters read at the same instants
	// (netstat_linux.go); netstat is their file, kept open.
	listen   []explain.ListenStat
	netstat  *os.File
	nbuf     []byte
	buf      []byte
	fired    bool
	walked   time.Time
	walkCost time.Duration // the last walk's time, for the notes
	stop     chan struct{}
	done     chan struct{}
}

func newQuotaSampler(m cgroupMounts, pre time.Duration) *quotaSampler {
	iv := min(max(pre/4, 250*time.Millisecond), time.Second)
	return &quotaSampler{m: m, interval: iv, keep: pre + 2*iv, quotas: map[string]*explain.CPUQuota{},
		open: map[string]*os.File{}, buf: make([]byte, 4096)}
}

func (s *quotaSampler) Start() {
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	s.sample(time.Now())
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case now := <-t.C:
				s.sample(now)
			}
		}
	}()
}

// Fire takes a sample at the fire and keeps every sample from then on.
func (s *quotaSampler) Fire() {
	s.sample(time.Now())
	s.mu.Lock()
	s.fired = true
	s.mu.Unlock()
}

// Stop ends the sampling with a last sample; it may be called twice.
func (s *quotaSampler) Stop() {
	if s.stop == nil {
		return
	}
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	<-s.done
	s.sample(time.Now())
	s.mu.Lock()
	for p, f := range s.open {
		f.Close()
		delete(s.open, p)
	}
	if s.netstat != nil {
		s.netstat.Close()
		s.netstat = nil
	}
	s.mu.Unlock()
}

// Listen are the listen queue counters' samples, in time order.
func (s *quotaSampler) Listen() []explain.ListenStat {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]explain.ListenStat(nil), s.listen...)
}

// sampleListen reads the listen queue counters; a host without them (no
// /proc/net/netstat) has no samples, and no verdict names them.
func (s *quotaSampler) sampleListen(now time.Time) {
	if s.netstat == nil {
		f, err := os.Open(netstatFile)
		if err != nil {
			return
		}
		s.netstat = f
	}
	if len(s.nbuf) == 0 {
		s.nbuf = make([]byte, 64<<10)
	}
	n, err := s.netstat.ReadAt(s.nbuf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return
	}
	st, err := parseListenStat(s.nbuf[:n])
	if err != nil {
		return
	}
	st.At = now
	s.listen = append(s.listen, st)
	if !s.fired {
		k := 0
		for k < len(s.listen)-1 && now.Sub(s.listen[k].At) > s.keep {
			k++
		}
		s.listen = s.listen[k:]
	}
	if len(s.listen) > maxQuotaSamples {
		s.listen = s.listen[len(s.listen)-maxQuotaSamples:]
	}
}

// Quotas are the cgroups with a quota and their samples, by path.
func (s *quotaSampler) Quotas() []explain.CPUQuota {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]explain.CPUQuota, 0, len(s.quotas))
	for _, q := range s.quotas {
		c := *q
		c.Samples = append([]explain.CPUStat(nil), q.Samples...)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cgroup < out[j].Cgroup })
	return out
}

func (s *quotaSampler) sample(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.walked) >= rewalkEvery {
		s.walk()
		s.walked = now
	}
	s.sampleListen(now)
	for p, q := range s.quotas {
		b, err := s.readStat(p)
		if err != nil {
			continue // the cgroup is gone: its samples stay
		}
		st, err := parseCPUStat(b)
		if err != nil {
			continue
		}
		st.At = now
		q.Samples = append(q.Samples, st)
		if !s.fired {
			k := 0
			for k < len(q.Samples)-1 && now.Sub(q.Samples[k].At) > s.keep {
				k++
			}
			q.Samples = q.Samples[k:]
		}
		if len(q.Samples) > maxQuotaSamples {
			q.Samples = q.Samples[len(q.Samples)-maxQuotaSamples:]
		}
	}
}

// readStat reads a cgroup's cpu.stat, from the file kept open when it
// can. The bytes are valid until the next call.
func (s *quotaSampler) readStat(p string) ([]byte, error) {
	f := s.open[p]
	if f == nil {
		var err error
		if f, err = os.Open(filepath.Join(cgroupDir(s.m.cpu, s.m.cpuRoot, p), "cpu.stat")); err != nil {
			return nil, err
		}
		if len(s.open) < maxOpenStats {
			s.open[p] = f
		} else {
			defer f.Close()
		}
	}
	n, err := f.ReadAt(s.buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		delete(s.open, p)
		return nil, err
	}
	return s.buf[:n], nil
}

// walk finds the cgroups with a quota under the cpu controller's mount.
func (s *quotaSampler) walk() {
	t0 := time.Now()
	n := 0
	root := s.m.cpu
	filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if n++; n > maxCgroupsWalked {
			return filepath.SkipAll
		}
		var q, p int64
		var ok bool
		if s.m.cpuV2 {
			max, _ := os.ReadFile(filepath.Join(dir, "cpu.max"))
			q, p, ok = parseQuota(true, max, nil, nil)
		} else {
			quota, _ := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
			period, _ := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
			q, p, ok = parseQuota(false, nil, quota, period)
		}
		if !ok {
			return nil
		}
		rel, _ := filepath.Rel(root, dir)
		cg := path.Join(s.m.cpuRoot, "/", filepath.ToSlash(rel))
		if s.m.cpuRoot == "" {
			cg = path.Join("/", filepath.ToSlash(rel))
		}
		if c := s.quotas[cg]; c != nil {
			c.QuotaUS, c.PeriodUS = q, p
		} else {
			s.quotas[cg] = &explain.CPUQuota{Cgroup: cg, QuotaUS: q, PeriodUS: p}
		}
		return nil
	})
	s.walkCost = time.Since(t0)
}

// note says what the sampler did, for the artifact's notes.
func (s *quotaSampler) note() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("cgroups: %d cgroups with a CPU quota, cpu.stat sampled every %v (a walk of the cpu hierarchy took %v); listen queue counters sampled %d times",
		len(s.quotas), s.interval, s.walkCost.Round(time.Microsecond), len(s.listen))
}
