package causelab

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/pipelines/cli/query"
)

// slice is the lab's systemd-style slice: the agent's cgroup sampler
// reads a top-level slice and the units directly in it (agents/collect's
// cgroup walk), so the app's cgroup is a unit of it and its series carry
// the unit's path as their device.
const slice = "spikehunt-causelab.slice"

// cgroupRoots are the v1 hierarchies the lab uses.
type cgroupRoots struct{ cpu, cpuacct, cpuset, memory, blkio string }

func findCgroupRoots() (cgroupRoots, error) {
	const root = "/sys/fs/cgroup"
	r := cgroupRoots{cpu: root + "/cpu", cpuacct: root + "/cpuacct", cpuset: root + "/cpuset", memory: root + "/memory", blkio: root + "/blkio"}
	for _, f := range []string{r.cpu + "/cpu.cfs_quota_us", r.cpuacct + "/cpuacct.usage", r.cpuset + "/cpuset.cpus", r.memory + "/memory.limit_in_bytes",
		r.blkio + "/blkio.throttle.write_iops_device"} {
		if _, err := os.Stat(f); err != nil {
			return r, fmt.Errorf("the lab needs cgroup v1's cpu, cpuacct, cpuset, memory and blkio hierarchies under %s: %w", root, err)
		}
	}
	return r, nil
}

// caseRun is one case's state.
type caseRun struct {
	lab        *lab
	t          *testing.T
	name       string
	unit       string   // the app's cgroup, relative to a hierarchy's root
	appCgroups []string // its directories, one per hierarchy
	hogUnit    string
	hogCgroups []string
	backlog    int
	netns      string // the app listens in this network namespace (a path under /run/netns) when set
	listen     string // and on this address
	disk       string // (f): the device the app's requests write to
	app        *app
	load       *load
	scratch    string
}

// cgroup makes rel in each of the hierarchies named (cpu, cpuacct, cpuset,
// memory), and removes it when the case ends (after its processes, whose
// cleanups run first). A cpuset cgroup gets cpus (all of the parent's when
// empty) and the parent's memory nodes.
func (c *caseRun) cgroup(rel, cpus string, controllers ...string) ([]string, error) {
	var dirs []string
	for _, ctl := range controllers {
		root := map[string]string{"cpu": c.lab.cgroups.cpu, "cpuacct": c.lab.cgroups.cpuacct, "cpuset": c.lab.cgroups.cpuset, "memory": c.lab.cgroups.memory,
			"blkio": c.lab.cgroups.blkio}[ctl]
		parent := root
		for _, p := range []string{filepath.Join(root, slice), filepath.Join(root, rel)} {
			if err := os.Mkdir(p, 0o755); err == nil {
				made := p
				c.t.Cleanup(func() { removeCgroup(c.t, made) })
			} else if !errors.Is(err, os.ErrExist) {
				return nil, err
			}
			if ctl == "cpuset" {
				want := cpus
				if want == "" || p != filepath.Join(root, rel) {
					b, _ := os.ReadFile(filepath.Join(parent, "cpuset.cpus"))
					want = strings.TrimSpace(string(b))
				}
				if err := os.WriteFile(filepath.Join(p, "cpuset.cpus"), []byte(want), 0o644); err != nil {
					return nil, fmt.Errorf("%s cpuset.cpus: %w", p, err)
				}
				mems, _ := os.ReadFile(filepath.Join(parent, "cpuset.mems"))
				if err := os.WriteFile(filepath.Join(p, "cpuset.mems"), []byte(strings.TrimSpace(string(mems))), 0o644); err != nil {
					return nil, fmt.Errorf("%s cpuset.mems: %w", p, err)
				}
			}
			parent = p
		}
		dirs = append(dirs, filepath.Join(root, rel))
	}
	return dirs, nil
}

// removeCgroup removes an empty cgroup, waiting a moment for the tasks of
// a process that has just exited to leave it.
func removeCgroup(t *testing.T, dir string) {
	var err error
	for range 50 {
		if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("remove cgroup %s: %v", dir, err)
}

func (c *caseRun) set(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("%s/%s = %s: %w", dir, file, value, err)
	}
	return nil
}

// labCase is one everyday cause: how the lab sets it up and induces it,
// and what naming it means for the suspects and for the capture's verdict.
type labCase struct {
	name, letter string
	setup        func(*caseRun) error
	afterStart   func(*caseRun) error
	induce       func(*caseRun) error
	// judgeSuspects labels the top-1 family of the induced stalls' windows
	// and says whether it names the cause (judged).
	judgeSuspects func(c *caseRun, rows []suspectRow, j judged) (string, bool)
	verdictNames  func(c *caseRun, verdict string) bool
}

// judged are the spike windows a case's suspects are judged on: for each
// induced stall the load saw, the first window of the lab's host that
// overlaps it ("" when none does), and the windows that overlap no
// induced stall (the machine's own stalls: other tenants, builds).
type judged struct {
	stalls []string
	others []string
}

// named counts the stalls whose window's rank-1 suspect satisfies ok.
func (j judged) named(rows []suspectRow, ok func(x suspectRow) bool) int {
	n := 0
	for _, id := range j.stalls {
		if id != "" && slices.ContainsFunc(rows, func(x suspectRow) bool { return x.SpikeID == id && x.Rank == 1 && ok(x) }) {
			n++
		}
	}
	return n
}

// onStalls keeps the rows of the stalls' windows.
func (j judged) onStalls(rows []suspectRow) []suspectRow {
	return slices.DeleteFunc(slices.Clone(rows), func(x suspectRow) bool { return !slices.Contains(j.stalls, x.SpikeID) })
}

// topIs judges each induced stall by the rank-1 suspect of its window:
// ok says whether it names the cause. The case's top-1 names it when it
// does for more than half of the stalls; the label is the family first
// in most of their windows, as `spikehunt suspects` names it. A window
// that overlaps no induced stall is the machine's, not the case's: it is
// counted in the label, not judged.
func topIs(ok func(c *caseRun, x suspectRow) bool) func(*caseRun, []suspectRow, judged) (string, bool) {
	return func(c *caseRun, rows []suspectRow, j judged) (string, bool) {
		named := j.named(rows, func(x suspectRow) bool { return ok(c, x) })
		stalls := len(j.stalls)
		x, n := topFamily(j.onStalls(rows))
		if n == 0 {
			return fmt.Sprintf("none (no counter moved in the windows of %d stalls; %d other windows)", stalls, len(j.others)), false
		}
		cpus := []int(nil)
		if x.CPU >= 0 {
			cpus = []int{x.CPU}
		}
		return fmt.Sprintf("%s, first in %d of %d stalls (during %.3g/s, baseline %.3g/s); the cause first in %d of %d; %d other windows",
			query.SuspectLabel(x.Metric, x.Mode, x.Device, cpus), n, stalls, x.During, x.Baseline, named, stalls, len(j.others)), named*2 > stalls
	}
}

func mentions(words ...string) func(*caseRun, string) bool {
	return func(_ *caseRun, v string) bool {
		v = strings.ToLower(v)
		for _, w := range words {
			if strings.Contains(v, w) {
				return true
			}
		}
		return false
	}
}

// resident keeps an idle process (sleep) in cgroups until the case ends.
func (c *caseRun) resident(cgroups []string) error {
	var join strings.Builder
	for _, d := range cgroups {
		fmt.Fprintf(&join, "echo $$ > %s/cgroup.procs && ", d)
	}
	cmd := exec.Command("sh", "-c", join.String()+"exec sleep infinity")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	c.t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return nil
}

// appIn puts the app in its own unit of the lab's slice in controllers.
func appIn(cpus string, controllers ...string) func(*caseRun) error {
	return func(c *caseRun) error {
		c.unit = slice + "/shop-" + c.name + ".service"
		var err error
		c.appCgroups, err = c.cgroup(c.unit, cpus, controllers...)
		return err
	}
}

// The stalls' sizes.
const (
	burnFor      = 1500 * time.Millisecond
	cfsPeriod    = 1_000_000 // µs: one throttle is up to 750 ms, a stall the load sees
	cfsQuota     = 250_000
	allocMB      = 8 // MiB each request maps and touches during a reclaim burst
	memHeadroom  = 96 << 20
	fillMB       = 88       // (c): the dirty page cache the writer leaves, under the headroom
	writebackBPS = 32 << 20 // (c): the bytes a second the flusher may write back to the writer's file system
	connBurst    = 400
	floodFrom    = 0     // the CPU the flood's sender runs on; the app runs on CPU 1
	rxRules      = 10000 // (e): the firewall rules each packet into the namespace walks
	diskIOPS     = 50    // (f): the writes per second the app's cgroup may issue to the device under its disk
)

// The network namespace and veth pair of (e): the app listens at nsAddr
// in the namespace, reached from the lab's namespace over the pair.
const (
	rxNetns  = "spikehunt-causelab-rx"
	rxVethLo = "shcl-rx0" // the lab's end
	rxVethNs = "shcl-rx1" // the namespace's end
	rxHost   = "10.213.77.1"
	nsAddr   = "10.213.77.2"
)

// run runs a command, its output in the error when it fails.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// rxNamespace makes (e)'s namespace and veth pair, and steers the receive
// processing of the namespace's end to cpus (an RPS mask): every packet
// into the namespace — the flood's and the load's — is processed in the
// NET_RX softirq of those CPUs, from their backlog queues. Removed when
// the case ends.
func (c *caseRun) rxNamespace(rpsMask string) error {
	if err := run("ip", "netns", "add", rxNetns); err != nil {
		return err
	}
	c.t.Cleanup(func() {
		if err := run("ip", "netns", "del", rxNetns); err != nil {
			c.t.Error(err)
		}
	})
	if err := run("ip", "link", "add", rxVethLo, "type", "veth", "peer", "name", rxVethNs, "netns", rxNetns); err != nil {
		return err
	}
	c.t.Cleanup(func() {
		// Deleting the namespace deletes its end, and with it the pair;
		// this is for a namespace that could not be deleted.
		if _, err := os.Stat("/sys/class/net/" + rxVethLo); err == nil {
			if err := run("ip", "link", "del", rxVethLo); err != nil {
				c.t.Error(err)
			}
		}
	})
	in := func(args ...string) error { return run("ip", append([]string{"netns", "exec", rxNetns}, args...)...) }
	for _, err := range []error{
		run("ip", "addr", "add", rxHost+"/30", "dev", rxVethLo),
		run("ip", "link", "set", rxVethLo, "up"),
		in("ip", "addr", "add", nsAddr+"/30", "dev", rxVethNs),
		in("ip", "link", "set", rxVethNs, "up"),
		in("ip", "link", "set", "lo", "up"),
		// ip netns exec mounts the namespace's own /sys.
		in("sh", "-c", fmt.Sprintf("echo %s > /sys/class/net/%s/queues/rx-0/rps_cpus", rpsMask, rxVethNs)),
	} {
		if err != nil {
			return err
		}
	}
	// The namespace's firewall: rxRules rules that match none of the
	// lab's packets, walked by every packet in the receiving softirq, as
	// a node with thousands of service rules walks them. They are what
	// makes each of the flood's packets cost the receiving CPU more than
	// it costs the sender; they go with the namespace.
	var rules strings.Builder
	rules.WriteString("*raw\n")
	for i := range rxRules {
		fmt.Fprintf(&rules, "-A PREROUTING -s 192.0.2.%d -p tcp --dport %d -j DROP\n", i%250+1, i+1)
	}
	rules.WriteString("COMMIT\n")
	restore := exec.Command("ip", "netns", "exec", rxNetns, "iptables-restore")
	restore.Stdin = strings.NewReader(rules.String())
	if out, err := restore.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore in %s: %v: %s", rxNetns, err, out)
	}
	c.netns = "/run/netns/" + rxNetns
	c.listen = nsAddr + ":0"
	return nil
}

// stackedLoop makes (f)'s disk: a loop device over a second loop device
// over a file on the lab's tmpfs, the upper one in direct IO mode, so
// each write to it is a write to the lower one, issued by the loop's
// worker on behalf of the writer's blkio cgroup; blkcg, when not "", may
// then write to the lower device iops times a second. To the app the
// upper device is a disk whose writes take 1/iops s: its requests are in
// flight on it (its diskstats' time and busy time) for as long. It
// returns the upper device's path.
func (c *caseRun) stackedLoop(blkcg string, iops int) (string, error) {
	backing, err := c.backingFile("disk-"+c.name, 64<<20)
	if err != nil {
		return "", err
	}
	lower, err := c.attachLoop(backing)
	if err != nil {
		return "", err
	}
	upper, err := c.attachLoop("--direct-io=on", lower)
	if err != nil {
		return "", err
	}
	if blkcg != "" {
		id, err := deviceID(lower)
		if err != nil {
			return "", err
		}
		if err := c.set(blkcg, "blkio.throttle.write_iops_device", fmt.Sprintf("%s %d", id, iops)); err != nil {
			return "", err
		}
	}
	return upper, nil
}

// backingFile makes a sparse file of size bytes on the lab's tmpfs,
// removed when the case ends.
func (c *caseRun) backingFile(name string, size int64) (string, error) {
	f := filepath.Join(c.lab.out, name)
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		return "", err
	}
	c.t.Cleanup(func() { os.Remove(f) })
	return f, os.Truncate(f, size)
}

// attachLoop attaches a loop device (losetup -f --show args...), detached
// when the case ends, and returns its path.
func (c *caseRun) attachLoop(args ...string) (string, error) {
	out, err := exec.Command("losetup", append([]string{"-f", "--show"}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("losetup %v: %v: %s", args, err, out)
	}
	dev := strings.TrimSpace(string(out))
	c.t.Cleanup(func() {
		if err := run("losetup", "-d", dev); err != nil {
			c.t.Error(err)
		}
	})
	return dev, nil
}

// deviceID is a block device's "major:minor", as blkio's files take it.
func deviceID(dev string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)), nil
}

// slowFS makes an ext4 file system on a loop device whose writes the
// root blkio cgroup lets through at bps bytes a second, and mounts it: a
// writer's page cache there is written back slowly, by the flusher, whose
// IO cgroup v1 charges to the root. blk-throttle holds the writes before
// the device counts them, so the device's own latency per IO stays that
// of its backing file. Unmounted, unthrottled and detached when the case
// ends.
func (c *caseRun) slowFS(bps int64) (string, error) {
	backing, err := c.backingFile("fs-"+c.name, 512<<20)
	if err != nil {
		return "", err
	}
	dev, err := c.attachLoop(backing)
	if err != nil {
		return "", err
	}
	if err := run("mkfs.ext4", "-q", "-F", dev); err != nil {
		return "", fmt.Errorf("%w (install e2fsprogs)", err)
	}
	dir := filepath.Join(c.lab.tmp, "fs-"+c.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := run("mount", dev, dir); err != nil {
		return "", err
	}
	c.t.Cleanup(func() {
		if err := run("umount", dir); err != nil {
			c.t.Error(err)
		}
	})
	id, err := deviceID(dev)
	if err != nil {
		return "", err
	}
	const rootRule = "/sys/fs/cgroup/blkio"
	if err := c.set(rootRule, "blkio.throttle.write_bps_device", fmt.Sprintf("%s %d", id, bps)); err != nil {
		return "", err
	}
	c.t.Cleanup(func() {
		if err := c.set(rootRule, "blkio.throttle.write_bps_device", id+" 0"); err != nil {
			c.t.Error(err)
		}
	})
	return dir, nil
}

func cases() []labCase {
	return []labCase{
		{
			name: "throttle", letter: "a",
			// The app's cgroup may use a quarter CPU per second; a burst
			// of two spinning threads in it spends that in 125 ms, and the
			// whole cgroup, the app with it, waits out the period.
			setup: func(c *caseRun) error {
				if err := appIn("", "cpu", "cpuacct")(c); err != nil {
					return err
				}
				if err := c.set(c.appCgroups[0], "cpu.cfs_period_us", strconv.Itoa(cfsPeriod)); err != nil {
					return err
				}
				return c.set(c.appCgroups[0], "cpu.cfs_quota_us", strconv.Itoa(cfsQuota))
			},
			induce: func(c *caseRun) error { return c.lab.burn(c.appCgroups, 2, burnFor) },
			judgeSuspects: topIs(func(c *caseRun, x suspectRow) bool {
				return x.Metric == "spikehunt.cgroup.cpu.throttled_time" && x.Device == c.unit
			}),
			verdictNames: mentions("throttl"),
		},
		{
			name: "neighbour", letter: "b",
			// The app on CPU 1 at the default weight; the hog in another
			// unit pinned to the same CPU at the largest weight v1 allows.
			setup: func(c *caseRun) error {
				if err := appIn("1", "cpu", "cpuacct", "cpuset")(c); err != nil {
					return err
				}
				c.hogUnit = slice + "/hog-" + c.name + ".service"
				var err error
				if c.hogCgroups, err = c.cgroup(c.hogUnit, "1", "cpu", "cpuacct", "cpuset"); err != nil {
					return err
				}
				if err := c.set(c.hogCgroups[0], "cpu.shares", "262144"); err != nil {
					return err
				}
				// The slice competes with the host's other tasks at its
				// own weight: at the default, on a busy machine, it gets
				// a fraction of CPU 1, and the hog a third of a CPU. The
				// neighbour is the heaviest thing on the CPU, as a
				// neighbour with the node's largest request is.
				sliceDir := filepath.Join(c.lab.cgroups.cpu, slice)
				c.t.Cleanup(func() { os.WriteFile(filepath.Join(sliceDir, "cpu.shares"), []byte("1024"), 0o644) })
				if err := c.set(sliceDir, "cpu.shares", "262144"); err != nil {
					return err
				}
				// The neighbour lives in its unit from the start, idle
				// between its bursts, as a neighbour's pod does: the
				// agent's cgroup walk (every irq_interval) finds the unit
				// and its quiet CPU before the first burst. A unit made
				// and used only by the burst would be first seen during
				// it, with no baseline.
				return c.resident(c.hogCgroups)
			},
			induce: func(c *caseRun) error { return c.lab.burn(c.hogCgroups, 2, burnFor) },
			judgeSuspects: topIs(func(c *caseRun, x suspectRow) bool {
				return x.Metric == "spikehunt.cgroup.cpu.usage" && x.Device == c.hogUnit
			}),
			verdictNames: mentions("cpuhog", "neighbo"),
		},
		{
			name: "reclaim", letter: "c",
			// The app's memory cgroup has 96 MiB over what the app holds.
			// A writer in it fills 88 MiB of that with dirty page cache
			// on a file system written back at 32 MiB/s, and exits; then
			// each request maps and touches 8 MiB. Their faults reach the
			// limit and reclaim in the cgroup, where cgroup v1, which has
			// no dirty throttling, waits for the writeback of the pages it
			// would take. With the writer running alongside, it is the
			// writer that waits and the requests find the pages it
			// cleaned: measured on this kernel, no request then stalled.
			setup: func(c *caseRun) error {
				if err := appIn("", "cpu", "cpuacct", "memory")(c); err != nil {
					return err
				}
				var err error
				c.scratch, err = c.slowFS(writebackBPS)
				return err
			},
			afterStart: func(c *caseRun) error {
				time.Sleep(2 * time.Second)
				mem := c.appCgroups[2]
				b, err := os.ReadFile(filepath.Join(mem, "memory.usage_in_bytes"))
				if err != nil {
					return err
				}
				used, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				return c.set(mem, "memory.limit_in_bytes", strconv.FormatInt(used+memHeadroom, 10))
			},
			induce: func(c *caseRun) error {
				file := filepath.Join(c.scratch, "fill")
				var join strings.Builder
				for _, d := range c.appCgroups {
					fmt.Fprintf(&join, "echo $$ > %s/cgroup.procs && ", d)
				}
				if out, err := exec.Command("sh", "-c", join.String()+fmt.Sprintf("exec dd if=/dev/zero of=%s bs=1M count=%d 2>&1", file, fillMB)).CombinedOutput(); err != nil {
					return fmt.Errorf("fill: %v: %s", err, out)
				}
				resp, err := http.Get(fmt.Sprintf("%s/lab/alloc?mb=%d&ms=%d", c.app.url, allocMB, burnFor.Milliseconds()))
				if err == nil {
					resp.Body.Close()
				}
				time.Sleep(burnFor)
				// Removing the file drops its dirty pages: the next burst
				// starts from a cgroup with its headroom free.
				return errors.Join(err, os.Remove(file))
			},
			judgeSuspects: topIs(func(c *caseRun, x suspectRow) bool {
				switch x.Metric {
				case "spikehunt.cgroup.memory.events":
					return x.Device == c.unit
				case "spikehunt.pressure.stall_time":
					// Tasks stalled in reclaim (or refaults): the
					// kernel's own account of memory pressure.
					return x.Device == "memory"
				case "spikehunt.memory.reclaim.scanned", "spikehunt.memory.reclaim.stalls", "spikehunt.memory.compaction.stalls":
					return true
				}
				return false
			}),
			verdictNames: mentions("reclaim"),
		},
		{
			name: "listen", letter: "d",
			// The app listens with a backlog of 8; a burst of 400 new
			// connections at once overflows it, and the SYNs it drops are
			// retried by their clients a second later.
			setup: func(c *caseRun) error {
				c.backlog = 8
				return appIn("", "cpu", "cpuacct")(c)
			},
			induce: func(c *caseRun) error {
				client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
				var wg sync.WaitGroup
				start := make(chan struct{})
				for range connBurst {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						c.load.get(c.t.Context(), client, c.app.url+"/fast")
					}()
				}
				close(start)
				wg.Wait()
				return nil
			},
			judgeSuspects: topIs(func(c *caseRun, x suspectRow) bool {
				return x.Metric == "spikehunt.tcp.listen_overflows" || x.Metric == "spikehunt.tcp.listen_drops"
			}),
			verdictNames: mentions("listen", "syn", "backlog", "accept queue"),
		},
		{
			name: "netrx", letter: "e",
			// The app on CPU 1, listening in a network namespace reached
			// over a veth pair whose receive processing RPS steers to CPU
			// 1, behind a long firewall; a sender pinned to CPU 0 floods
			// the namespace with fragmented UDP datagrams. CPU 1's NET_RX
			// softirq takes the CPU from the app, and the load's packets
			// wait in CPU 1's backlog with the flood's.
			setup: func(c *caseRun) error {
				if err := appIn("1", "cpu", "cpuacct", "cpuset")(c); err != nil {
					return err
				}
				return c.rxNamespace("2")
			},
			induce: func(c *caseRun) error { return c.lab.flood(floodFrom, nsAddr+":9", burnFor) },
			judgeSuspects: topIs(func(c *caseRun, x suspectRow) bool {
				return x.CPU == 1 && (x.Metric == "system.cpu.time" && x.Mode == "softirq" ||
					x.Metric == "spikehunt.softirqs" && x.Mode == "NET_RX")
			}),
			verdictNames: mentions("softirq", "net_rx"),
		},
		{
			name: "disk", letter: "f",
			// While a burst lasts, each request appends to the app's
			// journal, direct and synced, on a device that takes 50
			// writes a second (a loop device stacked on one the app's
			// blkio cgroup may write 50 times a second): 100 requests a
			// second queue on it.
			setup: func(c *caseRun) error {
				if err := appIn("", "cpu", "cpuacct", "blkio")(c); err != nil {
					return err
				}
				var err error
				c.disk, err = c.stackedLoop(c.appCgroups[2], diskIOPS)
				return err
			},
			induce: func(c *caseRun) error {
				resp, err := http.Get(fmt.Sprintf("%s/lab/io?path=%s&ms=%d", c.app.url, url.QueryEscape(c.disk), burnFor.Milliseconds()))
				if err != nil {
					return err
				}
				resp.Body.Close()
				time.Sleep(burnFor)
				return nil
			},
			judgeSuspects: topIs(func(c *caseRun, x suspectRow) bool {
				// The detector judges a disk by its IOs' latency
				// (spikehunt.disk.operation_latency); in_flight is the same
				// disk's level.
				return (strings.HasPrefix(x.Metric, "system.disk.") || strings.HasPrefix(x.Metric, "spikehunt.disk.")) && x.Device == filepath.Base(c.disk)
			}),
			verdictNames: func(c *caseRun, v string) bool {
				return strings.Contains(v, filepath.Base(c.disk)) || mentions("device latency", "block device", "blocked in io")(c, v)
			},
		},
		{
			name: "lock", letter: "g",
			// tests/shopapp's /stall: the app's one lock held for a second
			// in nanosleep; every request behind it waits. No kernel
			// counter moves.
			setup: appIn("", "cpu", "cpuacct"),
			induce: func(c *caseRun) error {
				resp, err := http.Get(c.app.url + "/stall")
				if err != nil {
					return err
				}
				resp.Body.Close()
				return nil
			},
			// No kernel counter moves with the stalls: no counter family
			// is the top suspect of more than half of the stalls'
			// windows, the bar (a)–(f) must pass for their cause, read the
			// other way. `spikehunt suspects` then says "No kernel counter
			// moved with most of these stalls" (on one host the fleet
			// pattern's sentence, "no kernel counter moved with the
			// stalls", never forms). A window of its own with a suspect is
			// the VM's noise: another process's burst, a write to disk.
			judgeSuspects: func(c *caseRun, rows []suspectRow, j judged) (string, bool) {
				quiet := 0
				for _, id := range j.stalls {
					if id != "" && !slices.ContainsFunc(rows, func(x suspectRow) bool { return x.SpikeID == id }) {
						quiet++
					}
				}
				stalls := len(j.stalls)
				if x, n := topFamily(j.onStalls(rows)); n > 0 {
					return fmt.Sprintf("%s, first in %d of %d stalls; no counter moved in %d of %d; %d other windows", query.SuspectLabel(x.Metric, x.Mode, x.Device, nil),
						n, stalls, quiet, stalls, len(j.others)), n*2 <= stalls
				}
				return fmt.Sprintf("no suspects: no kernel counter moved in the windows of the %d stalls; %d other windows", stalls, len(j.others)), stalls > 0
			},
			verdictNames: func(_ *caseRun, v string) bool {
				v = strings.ToLower(v)
				return strings.Contains(v, "blocked") && strings.Contains(v, "stack") &&
					(strings.Contains(v, "nanosleep") || strings.Contains(v, "futex"))
			},
		},
	}
}
