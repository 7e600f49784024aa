package causelab

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/cli/query"
)

// slice is the lab's systemd-style slice: the agent's cgroup sampler
// reads a top-level slice and the units directly in it (agents/collect's
// cgroup walk), so the app's cgroup is a unit of it and its series carry
// the unit's path as their device.
const slice = "spikehunt-causelab.slice"

// cgroupRoots are the v1 hierarchies the lab uses.
type cgroupRoots struct{ cpu, cpuacct, cpuset, memory string }

func findCgroupRoots() (cgroupRoots, error) {
	const root = "/sys/fs/cgroup"
	r := cgroupRoots{cpu: root + "/cpu", cpuacct: root + "/cpuacct", cpuset: root + "/cpuset", memory: root + "/memory"}
	for _, f := range []string{r.cpu + "/cpu.cfs_quota_us", r.cpuacct + "/cpuacct.usage", r.cpuset + "/cpuset.cpus", r.memory + "/memory.limit_in_bytes"} {
		if _, err := os.Stat(f); err != nil {
			return r, fmt.Errorf("the lab needs cgroup v1's cpu, cpuacct, cpuset and memory hierarchies under %s: %w", root, err)
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
		root := map[string]string{"cpu": c.lab.cgroups.cpu, "cpuacct": c.lab.cgroups.cpuacct, "cpuset": c.lab.cgroups.cpuset, "memory": c.lab.cgroups.memory}[ctl]
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
	// judgeSuspects labels the top-1 family of the case's windows and
	// says whether it names the cause.
	judgeSuspects func(c *caseRun, rows []suspectRow, windows int) (string, bool)
	verdictNames  func(verdict string) bool
}

// topIs judges each window by its rank-1 suspect: ok says whether it
// names the cause. The case's top-1 names it when it does in more than
// half of the case's windows; the label is the family first in most of
// them, as `spikehunt suspects` names it.
func topIs(ok func(c *caseRun, x suspectRow) bool) func(*caseRun, []suspectRow, int) (string, bool) {
	return func(c *caseRun, rows []suspectRow, windows int) (string, bool) {
		named := 0
		for _, x := range rows {
			if x.Rank == 1 && ok(c, x) {
				named++
			}
		}
		x, n := topFamily(rows)
		if n == 0 {
			return fmt.Sprintf("none (no counter moved in %d windows)", windows), false
		}
		cpus := []int(nil)
		if x.CPU >= 0 {
			cpus = []int{x.CPU}
		}
		return fmt.Sprintf("%s, first in %d of %d windows (during %.3g/s, baseline %.3g/s); the cause first in %d of %d",
			query.SuspectLabel(x.Metric, x.Mode, x.Device, cpus), n, windows, x.During, x.Baseline, named, windows), named*2 > windows
	}
}

func mentions(words ...string) func(string) bool {
	return func(v string) bool {
		v = strings.ToLower(v)
		for _, w := range words {
			if strings.Contains(v, w) {
				return true
			}
		}
		return false
	}
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
	burnFor     = 1500 * time.Millisecond
	cfsPeriod   = 1_000_000 // µs: one throttle is up to 750 ms, a stall the load sees
	cfsQuota    = 250_000
	allocMB     = 8 // MiB each request maps and touches during a reclaim burst
	memHeadroom = 96 << 20
	fillMB      = 320
	connBurst   = 400
)

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
				return c.set(c.hogCgroups[0], "cpu.shares", "262144")
			},
			induce: func(c *caseRun) error { return c.lab.burn(c.hogCgroups, 2, burnFor) },
			judgeSuspects: topIs(func(c *caseRun, x suspectRow) bool {
				return x.Metric == "spikehunt.cgroup.cpu.usage" && x.Device == c.hogUnit
			}),
			verdictNames: mentions("cpuhog", "neighbo"),
		},
		{
			name: "reclaim", letter: "c",
			// The app's memory cgroup has 96 MiB over what the app holds;
			// a writer in it fills that with page cache, and meanwhile
			// each request maps and touches 8 MiB: its faults reclaim in
			// the cgroup.
			setup: appIn("", "cpu", "cpuacct", "memory"),
			afterStart: func(c *caseRun) error {
				time.Sleep(2 * time.Second)
				mem := c.appCgroups[2]
				b, err := os.ReadFile(filepath.Join(mem, "memory.usage_in_bytes"))
				if err != nil {
					return err
				}
				used, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				c.scratch = c.t.TempDir()
				return c.set(mem, "memory.limit_in_bytes", strconv.FormatInt(used+memHeadroom, 10))
			},
			induce: func(c *caseRun) error {
				var wg sync.WaitGroup
				var fillErr error
				wg.Add(1)
				go func() {
					defer wg.Done()
					file := filepath.Join(c.scratch, "fill")
					var join strings.Builder
					for _, d := range c.appCgroups {
						fmt.Fprintf(&join, "echo $$ > %s/cgroup.procs && ", d)
					}
					out, err := exec.Command("sh", "-c", join.String()+fmt.Sprintf("dd if=/dev/zero of=%s bs=1M count=%d 2>&1 && rm -f %s", file, fillMB, file)).CombinedOutput()
					if err != nil {
						fillErr = fmt.Errorf("fill: %v: %s", err, out)
					}
				}()
				resp, err := http.Get(fmt.Sprintf("%s/lab/alloc?mb=%d&ms=%d", c.app.url, allocMB, burnFor.Milliseconds()))
				if err == nil {
					resp.Body.Close()
				}
				time.Sleep(burnFor)
				wg.Wait()
				return errors.Join(err, fillErr)
			},
			judgeSuspects: topIs(func(c *caseRun, x suspectRow) bool {
				switch x.Metric {
				case "spikehunt.cgroup.memory.events":
					return x.Device == c.unit
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
			// A window with no suspect says no kernel counter moved.
			judgeSuspects: func(c *caseRun, rows []suspectRow, windows int) (string, bool) {
				with := map[string]bool{}
				for _, x := range rows {
					with[x.SpikeID] = true
				}
				quiet := windows - len(with)
				if x, n := topFamily(rows); n > 0 {
					return fmt.Sprintf("%s, first in %d of %d windows; no counter moved in %d of %d", query.SuspectLabel(x.Metric, x.Mode, x.Device, nil),
						n, windows, quiet, windows), quiet*2 > windows
				}
				return fmt.Sprintf("no suspects: no kernel counter moved in the %d windows", windows), windows > 0
			},
			verdictNames: func(v string) bool {
				v = strings.ToLower(v)
				return strings.Contains(v, "blocked") && strings.Contains(v, "stack") &&
					(strings.Contains(v, "nanosleep") || strings.Contains(v, "futex"))
			},
		},
	}
}
