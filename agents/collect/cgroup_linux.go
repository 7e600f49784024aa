package collect

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// Cgroups, v1 and v2: per workload cgroup (cgroup_tree_linux.go), the CPU
// it used, the CFS bandwidth periods it ran and was throttled in and the
// time it spent throttled; on v2 also its CPU pressure and memory events,
// on v1 the times a cgroup with a memory limit hit it (memory.failcnt, as
// the event "max").
// A throttled container shows its requests' stall as runnable time with no
// CPU to run on, and nothing host-wide moves.
//
//	v1 (2.6.24 cpuacct; 3.2 CFS bandwidth: nr_periods, nr_throttled,
//	throttled_time in ns): cpu/<cg>/cpu.stat, cpuacct/<cg>/cpuacct.usage
//	(ns), cpu.cfs_quota_us and cpu.cfs_period_us;
//	v2 (4.5; cpu controller 4.15; PSI 4.20): <cg>/cpu.stat (usage_usec,
//	and with the cpu controller nr_periods, nr_throttled,
//	throttled_usec), cpu.max, cpu.pressure and memory.events.
//
// Which it is, the sampler finds under Options.CgroupFS: cgroup.controllers
// there means v2; otherwise the v1 cpu and cpuacct hierarchies are read
// (on a hybrid host too, where the unified tree has no cpu controller).
//
// The walk lists the tree's first levels and stats each cgroup's files,
// several times what a pass reads on a node with hundreds of pods, so the
// sampler walks on SampleSlow and keeps the list between walks: a cgroup
// created in between is picked up by the next walk, one deleted drops
// out as soon as its files fail to read. The quota is read by the walk
// too. Each pass reads, kept open, cpu.stat and on v1 cpuacct.usage (v1's
// cpu.stat only where a CPU quota is set, and memory.failcnt where a
// memory limit is set) of every cgroup, which the
// choice below needs; v2's cpu.pressure and memory.events only of the
// cgroups it keeps (below), which halves a pass's reads on a node of 200
// cgroups with the default 50 kept. A cgroup that enters the kept set
// reports its pressure and memory events from its second pass in it.
//
// Cardinality: a pass reports every cgroup throttled in the interval and
// the CgroupTop busiest by CPU; the others' CPU time adds up to one series
// named "other" (only cgroups no other workload contains, so that nothing
// is counted twice), and spikehunt_collect_cgroups counts each state.

func init() { registerSampler("cgroup", fastCadence, newCgroupSampler) }

// The counters of one cgroup, indexes into cgroupCounters.
const (
	cgUsageNs = iota
	cgPeriods
	cgThrottled
	cgThrottledNs
	cgPSISomeUs
	cgPSIFullUs
	cgMemHigh
	cgMemMax
	cgMemOOM
	cgMemOOMKill
	cgFields
)

// The files of one cgroup, indexes into cgroupState.held.
const (
	cgFileStat = iota
	cgFileUsage
	cgFilePressure
	cgFileEvents
	cgFileFailcnt
	cgFiles
)

// cgMemEvents are the memory.events lines read, in field order.
var cgMemEvents = [...]string{cgMemHigh - cgMemHigh: "high", cgMemMax - cgMemHigh: "max", cgMemOOM - cgMemHigh: "oom", cgMemOOMKill - cgMemHigh: "oom_kill"}

var (
	cgMemEventAttrs = strAttrs("spikehunt.cgroup.memory.event", cgMemEvents[:]...)
	cgOtherAttr     = telemetry.Str("spikehunt.cgroup", "other")
	cgPSIResource   = telemetry.Str("spikehunt.pressure.resource", "cpu")
)

// cgroupCounters is one reading of a cgroup; has says which fields its
// kernel and controllers provide.
type cgroupCounters struct {
	v   [cgFields]uint64
	has [cgFields]bool
}

// cgroupHierarchy says where the CPU files are.
type cgroupHierarchy struct {
	v2        bool
	cpu, acct string // v1: the cpu and cpuacct hierarchies; v2: the root, twice
	// memory is v1's memory hierarchy, "" without it (and on v2, where
	// memory.events says the same).
	memory string
}

// detectCgroups finds the hierarchy under root.
func detectCgroups(root string) (cgroupHierarchy, error) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return cgroupHierarchy{v2: true, cpu: root, acct: root}, nil
	}
	h := cgroupHierarchy{cpu: filepath.Join(root, "cpu"), acct: filepath.Join(root, "cpuacct")}
	if _, err := os.Stat(filepath.Join(h.cpu, "cpu.stat")); err != nil {
		return h, fmt.Errorf("%s has neither cgroup v2 (cgroup.controllers) nor the v1 cpu controller (cpu/cpu.stat): mount the host's /sys/fs/cgroup and point --path.cgroupfs at it: %w (%w)", root, ErrNotSupported, err)
	}
	if _, err := os.Stat(filepath.Join(h.acct, "cpuacct.usage")); err != nil {
		h.acct = "" // no cpuacct: throttling without usage
	}
	if _, err := os.Stat(filepath.Join(root, "memory", "memory.failcnt")); err == nil {
		h.memory = filepath.Join(root, "memory")
	}
	return h, nil
}

// cgroupState is a workload as the sampler tracks it across passes.
type cgroupState struct {
	w                cgroupWorkload
	attr             telemetry.Attr       // spikehunt.cgroup = its name
	limitCPUs        float64              // the CFS quota in CPUs; 0 when unlimited
	stat, usage      string               // files read each pass; usage "" when v2 or no cpuacct
	pressure, events string               // v2 only, "" when absent
	failcnt          string               // v1 only, for a cgroup with a memory limit: memory.failcnt
	held             [cgFiles]*cachedFile // the files above as the sampler's cache holds them
	prev, cur        cgroupCounters
	havePrev, readOK bool
	// extrasPrev says prev holds pressure and events read on the previous
	// pass (v2, kept cgroups only).
	extrasPrev        bool
	delta             [cgFields]uint64
	hasDelta          [cgFields]bool
	throttled, chosen bool
}

// cgroupScan is a walk's result, handed from rescan to the next sample.
type cgroupScan struct {
	hier       cgroupHierarchy
	groups     []*cgroupState // fresh: no counters yet
	notScanned int
}

type cgroupSampler struct {
	env       *env
	fileCache // files stay open between passes; Close closes them
	buf       []byte
	readings
	resetTally

	mu      sync.Mutex  // guards pending
	pending *cgroupScan // a rescan's result that sample has not taken yet

	scanned    bool // groups holds a walk's result
	hier       cgroupHierarchy
	groups     []*cgroupState
	notScanned int
	order      []*cgroupState // reused by the selection
}

func newCgroupSampler(e *env) (sampler, error) { return &cgroupSampler{env: e}, nil }

// rescan walks the tree and leaves the result for the next sample.
func (s *cgroupSampler) rescan() {
	sc, err := s.scan()
	if err != nil {
		return // sample reports it when it scans itself
	}
	s.mu.Lock()
	s.pending = sc
	s.mu.Unlock()
}

func (s *cgroupSampler) scan() (*cgroupScan, error) {
	h, err := detectCgroups(s.env.cgroupfs)
	if err != nil {
		return nil, err
	}
	found, notScanned, err := walkCgroups(h.cpu, s.env.cgroupLimit)
	if err != nil {
		return nil, readError(h.cpu, err)
	}
	sc := &cgroupScan{hier: h, notScanned: notScanned, groups: make([]*cgroupState, 0, len(found))}
	// The walk reads each cgroup's settings with readOnce into these
	// (v1's quota and period are parsed together).
	buf, buf2 := make([]byte, 0, 512), make([]byte, 0, 512)
	for _, w := range found {
		g := &cgroupState{w: w, attr: telemetry.Str("spikehunt.cgroup", w.name(s.env.podNamer))}
		dir := filepath.Join(h.cpu, w.rel)
		g.stat = filepath.Join(dir, "cpu.stat")
		if h.v2 {
			g.pressure = existing(filepath.Join(dir, "cpu.pressure"))
			g.events = existing(filepath.Join(dir, "memory.events"))
			if buf, err = readOnce(filepath.Join(dir, "cpu.max"), buf); err == nil {
				if q, p, ok, err := parseCgroupCPUMax(buf); err == nil && ok {
					g.limitCPUs = float64(q) / float64(p)
				}
			}
		} else {
			if h.acct != "" {
				g.usage = existing(filepath.Join(h.acct, w.rel, "cpuacct.usage"))
			}
			// v1 counts a memory cgroup's hits of its limit in failcnt, the
			// reclaim its allocating tasks then do in none of /proc/vmstat's
			// direct reclaim counters (the kernel leaves cgroup reclaim out
			// of them). Read only where a limit is set: a cgroup without one
			// never hits it, and the file would cost every pass a read.
			if h.memory != "" {
				var limited bool
				if limited, buf = memoryLimited(filepath.Join(h.memory, w.rel), buf); limited {
					g.failcnt = existing(filepath.Join(h.memory, w.rel, "memory.failcnt"))
				}
			}
			var errQ, errP error
			buf, errQ = readOnce(filepath.Join(dir, "cpu.cfs_quota_us"), buf)
			buf2, errP = readOnce(filepath.Join(dir, "cpu.cfs_period_us"), buf2)
			if errQ == nil && errP == nil {
				if qu, pu, ok, err := parseCgroupV1Quota(buf, buf2); err == nil && ok {
					g.limitCPUs = float64(qu) / float64(pu)
				}
			}
		}
		sc.groups = append(sc.groups, g)
	}
	return sc, nil
}

// memoryLimited says whether a v1 memory cgroup has a limit: the kernel
// shows "none" as the largest page-aligned value of a signed 64-bit
// count (9223372036854771712 on 4 KiB pages). It reads into buf and
// returns it for reuse.
func memoryLimited(dir string, buf []byte) (bool, []byte) {
	buf, err := readOnce(filepath.Join(dir, "memory.limit_in_bytes"), buf)
	if err != nil {
		return false, buf
	}
	v, err := parseUint(trimBlank(bytes.TrimSuffix(buf, []byte("\n"))))
	return err == nil && v < 1<<62, buf
}

func existing(p string) string {
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// adopt makes a scan the list sampled, carrying over the counters of the
// cgroups already known.
func (s *cgroupSampler) adopt(sc *cgroupScan) {
	old := make(map[string]*cgroupState, len(s.groups))
	for _, g := range s.groups {
		old[g.w.rel] = g
	}
	for _, g := range sc.groups {
		if o, ok := old[g.w.rel]; ok {
			g.prev, g.havePrev, g.extrasPrev, g.held = o.prev, o.havePrev, o.extrasPrev, o.held
		}
	}
	s.hier, s.groups, s.notScanned, s.scanned = sc.hier, sc.groups, sc.notScanned, true
}

func (s *cgroupSampler) sample(dst []telemetry.Point) ([]telemetry.Point, error) {
	s.mu.Lock()
	sc := s.pending
	s.pending = nil
	s.mu.Unlock()
	if sc == nil && !s.scanned {
		var err error
		if sc, err = s.scan(); err != nil {
			return dst, err
		}
	}
	if sc != nil {
		s.adopt(sc)
	}
	unreadable := 0
	for _, g := range s.groups {
		g.readOK = s.readGroup(g) == nil
		if !g.readOK {
			unreadable++
		}
	}
	now := s.env.tl.now()
	out := sink{pts: dst}
	out.start, out.end, out.emit = s.advance(s.env.tl, now)
	at := s.env.tl.wall(now)
	// A cgroup that failed to read has vanished (or its file is
	// malformed): it leaves the list, and a later walk that finds it
	// again starts it with a baseline.
	s.groups = slices.DeleteFunc(s.groups, func(g *cgroupState) bool { return !g.readOK })
	s.order = s.order[:0]
	for _, g := range s.groups {
		g.hasDelta, g.throttled, g.chosen = [cgFields]bool{}, false, false
		if g.havePrev {
			s.deltas(g, cgUsageNs, cgPSISomeUs)
			s.deltas(g, cgMemMax, cgMemMax+1) // v1's memory.failcnt, read each pass
			g.throttled = g.delta[cgThrottled] > 0 && g.hasDelta[cgThrottled] || g.delta[cgThrottledNs] > 0 && g.hasDelta[cgThrottledNs]
			s.order = append(s.order, g)
		}
	}
	// The busiest first; ties in path order, so the choice is stable. The
	// choice is made on every pass, emitted or not, so that the kept
	// cgroups' v2 files are read on consecutive passes.
	slices.SortStableFunc(s.order, func(a, b *cgroupState) int {
		switch da, db := a.delta[cgUsageNs], b.delta[cgUsageNs]; {
		case da > db:
			return -1
		case da < db:
			return 1
		}
		return 0
	})
	for i, g := range s.order {
		g.chosen = g.throttled || i < s.env.cgroupTop
	}
	// v2's cpu.pressure and memory.events are read only for the cgroups
	// kept, and on a cgroup's first pass (its baseline, so that one busy
	// from the start reports them on its second). A delta needs the
	// previous pass's reading: a cgroup that enters the kept set reads a
	// baseline and reports them from its next pass, never a change summed
	// over the passes it was out, over one pass's interval.
	for _, g := range s.groups {
		read := (g.chosen || !g.havePrev) && (g.pressure != "" || g.events != "") && s.readExtras(g) == nil
		if read && g.extrasPrev {
			s.deltas(g, cgPSISomeUs, cgMemMax)
			s.deltas(g, cgMemMax+1, cgFields)
			if g.events != "" {
				s.deltas(g, cgMemMax, cgMemMax+1)
			}
		}
		g.extrasPrev = read
		g.prev, g.havePrev = g.cur, true
	}
	reported, aggregated := 0, 0
	if out.emit {
		var otherNs uint64
		var haveOther bool
		for _, g := range s.order {
			if !g.chosen {
				aggregated++
				if !g.w.nested && g.hasDelta[cgUsageNs] {
					otherNs += g.delta[cgUsageNs]
					haveOther = true
				}
				continue
			}
			reported++
			s.emit(&out, at, g)
		}
		if haveOther {
			out.add("spikehunt.cgroup.cpu.usage", "s", float64(otherNs)/1e9, cgOtherAttr)
		}
	}
	s.env.metrics.cgroups.WithLabelValues("reported").Set(float64(reported))
	s.env.metrics.cgroups.WithLabelValues("aggregated").Set(float64(aggregated))
	s.env.metrics.cgroups.WithLabelValues("unreadable").Set(float64(unreadable))
	s.env.metrics.cgroups.WithLabelValues("not_scanned").Set(float64(s.notScanned))
	s.sweep() // closes the files of cgroups that left
	return out.pts, nil
}

// deltas sets g's deltas of the fields [from, to) that both readings
// have; a counter that went down is counted and has none.
func (s *cgroupSampler) deltas(g *cgroupState, from, to int) {
	for i := from; i < to; i++ {
		switch {
		case !g.cur.has[i] || !g.prev.has[i]:
		case g.cur.v[i] < g.prev.v[i]:
			s.resetTally.n++
		default:
			g.delta[i], g.hasDelta[i] = g.cur.v[i]-g.prev.v[i], true
		}
	}
}

// emit appends the points of one reported cgroup.
func (s *cgroupSampler) emit(out *sink, at time.Time, g *cgroupState) {
	if g.limitCPUs > 0 {
		out.gauge(at, "spikehunt.cgroup.cpu.limit", "{cpu}", g.limitCPUs, g.attr)
	}
	if g.hasDelta[cgUsageNs] {
		out.add("spikehunt.cgroup.cpu.usage", "s", float64(g.delta[cgUsageNs])/1e9, g.attr)
	}
	if g.hasDelta[cgPeriods] {
		out.add("spikehunt.cgroup.cpu.periods", "{period}", float64(g.delta[cgPeriods]), g.attr)
	}
	if g.hasDelta[cgThrottled] {
		out.add("spikehunt.cgroup.cpu.throttled_periods", "{period}", float64(g.delta[cgThrottled]), g.attr)
	}
	if g.hasDelta[cgThrottledNs] {
		out.add("spikehunt.cgroup.cpu.throttled_time", "s", float64(g.delta[cgThrottledNs])/1e9, g.attr)
	}
	if g.hasDelta[cgPSISomeUs] {
		out.add("spikehunt.cgroup.pressure.stall_time", "s", float64(g.delta[cgPSISomeUs])/1e6, g.attr, cgPSIResource, psiSome)
	}
	if g.hasDelta[cgPSIFullUs] {
		out.add("spikehunt.cgroup.pressure.stall_time", "s", float64(g.delta[cgPSIFullUs])/1e6, g.attr, cgPSIResource, psiFull)
	}
	for i := range cgMemEvents {
		if g.hasDelta[cgMemHigh+i] {
			out.add("spikehunt.cgroup.memory.events", "{event}", float64(g.delta[cgMemHigh+i]), g.attr, cgMemEventAttrs[i])
		}
	}
}

// readGroup reads a cgroup's files into g.cur. On v1, cpu.stat holds only
// the CFS quota's periods and throttling, all zero without a quota, so a
// cgroup without one reads cpuacct.usage alone: on a node whose pods
// mostly have no CPU limit that halves the sampler's reads. A quota set
// since the last walk is read from the next one (SampleSlow).
func (s *cgroupSampler) readGroup(g *cgroupState) error {
	var err error
	if !s.hier.v2 && g.limitCPUs == 0 && g.usage != "" {
		g.cur = cgroupCounters{}
	} else {
		if s.buf, err = s.readRecordHeld(&g.held[cgFileStat], g.stat, s.buf); err != nil {
			return err
		}
		if g.cur, err = parseCgroupCPUStat(s.buf); err != nil {
			return err
		}
	}
	if g.usage != "" {
		if s.buf, err = s.readRecordHeld(&g.held[cgFileUsage], g.usage, s.buf); err != nil {
			return err
		}
		if g.cur.v[cgUsageNs], err = parseCgroupUsage(s.buf); err != nil {
			return err
		}
		g.cur.has[cgUsageNs] = true
	}
	if g.failcnt != "" {
		if s.buf, err = s.readRecordHeld(&g.held[cgFileFailcnt], g.failcnt, s.buf); err != nil {
			return err
		}
		if g.cur.v[cgMemMax], err = parseCgroupFailcnt(s.buf); err != nil {
			return err
		}
		g.cur.has[cgMemMax] = true
	}
	return nil
}

// readExtras reads a v2 cgroup's cpu.pressure and memory.events into
// g.cur. After a failure the caller takes neither as a baseline.
func (s *cgroupSampler) readExtras(g *cgroupState) error {
	var err error
	if g.pressure != "" {
		if s.buf, err = s.readRecordHeld(&g.held[cgFilePressure], g.pressure, s.buf); err != nil {
			return err
		}
		p, err := parsePressure(s.buf)
		if err != nil {
			return err
		}
		g.cur.v[cgPSISomeUs], g.cur.has[cgPSISomeUs] = p.someUs, p.hasSome
		g.cur.v[cgPSIFullUs], g.cur.has[cgPSIFullUs] = p.fullUs, p.hasFull
	}
	if g.events != "" {
		if s.buf, err = s.readRecordHeld(&g.held[cgFileEvents], g.events, s.buf); err != nil {
			return err
		}
		ev, err := parseCgroupMemoryEvents(s.buf)
		if err != nil {
			return err
		}
		for i, v := range ev {
			g.cur.v[cgMemHigh+i], g.cur.has[cgMemHigh+i] = v, true
		}
	}
	return nil
}

// errCgroupRange is a microsecond count that does not fit in nanoseconds.
var errCgroupRange = errors.New("out of range")

// parseCgroupCPUStat parses a cpu.stat ("key value" lines), v1 or v2.
// Times are returned in nanoseconds: v1's throttled_time is ns, v2's
// usage_usec and throttled_usec are µs. Other keys (user_usec, nr_bursts,
// and what newer kernels add) are ignored.
func parseCgroupCPUStat(b []byte) (cgroupCounters, error) {
	var c cgroupCounters
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		key, rest := nextField(line)
		if len(key) == 0 {
			continue
		}
		i, scale := -1, uint64(1)
		switch string(key) {
		case "usage_usec":
			i, scale = cgUsageNs, 1000
		case "nr_periods":
			i = cgPeriods
		case "nr_throttled":
			i = cgThrottled
		case "throttled_time":
			i = cgThrottledNs
		case "throttled_usec":
			i, scale = cgThrottledNs, 1000
		default:
			continue
		}
		f, _ := nextField(rest)
		v, err := parseUint(f)
		if err != nil {
			return c, malformed("cpu.stat %s: %v", key, err)
		}
		if v > (1<<64-1)/scale {
			return c, malformed("cpu.stat %s: %v", key, errCgroupRange)
		}
		c.v[i], c.has[i] = v*scale, true
	}
	if !c.has[cgUsageNs] && !c.has[cgPeriods] {
		return c, malformed("cpu.stat: neither usage_usec nor nr_periods")
	}
	return c, nil
}

// parseCgroupUsage parses v1's cpuacct.usage: one number, nanoseconds.
func parseCgroupUsage(b []byte) (uint64, error) {
	v, err := parseUint(trimBlank(bytes.TrimSuffix(b, []byte("\n"))))
	if err != nil {
		return 0, malformed("cpuacct.usage: %v", err)
	}
	return v, nil
}

// parseCgroupFailcnt parses v1's memory.failcnt: how many times the
// cgroup's usage hit its limit, as v2's memory.events "max" counts.
func parseCgroupFailcnt(b []byte) (uint64, error) {
	v, err := parseUint(trimBlank(bytes.TrimSuffix(b, []byte("\n"))))
	if err != nil {
		return 0, malformed("memory.failcnt: %v", err)
	}
	return v, nil
}

// parseCgroupCPUMax parses v2's cpu.max, "$MAX $PERIOD" in µs, where
// $MAX is "max" when the cgroup has no quota (limited is then false).
func parseCgroupCPUMax(b []byte) (quotaUs, periodUs uint64, limited bool, err error) {
	line, _ := nextLine(b)
	q, rest := nextField(line)
	p, rest := nextField(rest)
	if extra, _ := nextField(rest); len(extra) != 0 {
		return 0, 0, false, malformed("cpu.max %q: more than two fields", line)
	}
	if periodUs, err = parseUint(p); err != nil || periodUs == 0 {
		return 0, 0, false, malformed("cpu.max %q: bad period", line)
	}
	if string(q) == "max" {
		return 0, periodUs, false, nil
	}
	if quotaUs, err = parseUint(q); err != nil {
		return 0, 0, false, malformed("cpu.max %q: bad quota", line)
	}
	return quotaUs, periodUs, true, nil
}

// parseCgroupV1Quota parses v1's cpu.cfs_quota_us (-1 when unlimited)
// and cpu.cfs_period_us, both µs.
func parseCgroupV1Quota(quota, period []byte) (quotaUs, periodUs uint64, limited bool, err error) {
	q := trimBlank(bytes.TrimSuffix(quota, []byte("\n")))
	periodUs, err = parseUint(trimBlank(bytes.TrimSuffix(period, []byte("\n"))))
	if err != nil || periodUs == 0 {
		return 0, 0, false, malformed("cpu.cfs_period_us %q: not a positive number", period)
	}
	if string(q) == "-1" {
		return 0, periodUs, false, nil
	}
	if quotaUs, err = parseUint(q); err != nil {
		return 0, 0, false, malformed("cpu.cfs_quota_us %q: %v", quota, err)
	}
	return quotaUs, periodUs, true, nil
}

// parseCgroupMemoryEvents parses v2's memory.events: how many times the
// cgroup went over memory.high (its tasks were throttled into reclaim),
// hit memory.max (reclaim, then OOM if it failed), and how many OOMs and
// OOM kills it had. high, max and oom must be there (since 4.5);
// oom_kill, added in 4.13, reads as 0 before.
func parseCgroupMemoryEvents(b []byte) ([len(cgMemEvents)]uint64, error) {
	var ev [len(cgMemEvents)]uint64
	var seen [len(cgMemEvents)]bool
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		key, rest := nextField(line)
		i := slices.Index(cgMemEvents[:], string(key))
		if i < 0 {
			continue
		}
		f, _ := nextField(rest)
		v, err := parseUint(f)
		if err != nil {
			return ev, malformed("memory.events %s: %v", key, err)
		}
		ev[i], seen[i] = v, true
	}
	for i, ok := range seen[:3] {
		if !ok {
			return ev, malformed("memory.events: no %s line", cgMemEvents[i])
		}
	}
	return ev, nil
}
