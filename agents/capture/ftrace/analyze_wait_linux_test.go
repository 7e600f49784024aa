package ftrace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// loopDevice attaches a loop device to a file on the working directory's
// disk, in direct IO mode (so that each of its requests is a request on
// the disk beneath, not a copy into the page cache), and returns its path
// and "major,minor" as the block events print it.
func loopDevice(t *testing.T) (string, string) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	backing := filepath.Join(wd, fmt.Sprintf(".loop-%d", os.Getpid()))
	f, err := os.OpenFile(backing, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); os.Remove(backing) })
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		testenv.RequirePrivileged(t, "loop devices", err)
	}
	defer ctl.Close()
	// Another test may take the free device between the two calls: ask
	// again.
	for try := 0; try < 10; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			testenv.RequirePrivileged(t, "loop devices", err)
		}
		path := fmt.Sprintf("/dev/loop%d", n)
		dev, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_FD, int(f.Fd())); errors.Is(err, unix.EBUSY) {
			dev.Close()
			continue
		} else if err != nil {
			dev.Close()
			t.Fatalf("attach %s: %v", path, err)
		}
		t.Cleanup(func() {
			unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
			dev.Close()
		})
		if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_DIRECT_IO, 1); err != nil {
			t.Fatalf("%s: direct IO: %v", path, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return path, fmt.Sprintf("%d,%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	t.Fatal("no free loop device after 10 tries")
	return "", ""
}

// throttledCgroup makes a blkio cgroup (v1) whose tasks may write to dev
// ("major:minor") iops times a second: blk-throttle holds their requests
// before the block layer issues them.
func throttledCgroup(t *testing.T, dev string, iops int) string {
	t.Helper()
	dir := fmt.Sprintf("/sys/fs/cgroup/blkio/spikehunt-test-%d", os.Getpid())
	if err := os.Mkdir(dir, 0o755); err != nil {
		testenv.RequirePrivileged(t, "the blkio cgroup (v1)", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, "blkio.throttle.write_iops_device"), []byte(fmt.Sprintf("%s %d", dev, iops)), 0); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ddRequest runs dd writing count 4 KiB blocks to dev, direct and synced,
// as a process of its own (in cgroup when not ""), and returns it as the
// request its one thread served.
func ddRequest(t *testing.T, dev string, count int, cgroup string) record.RequestRecord {
	t.Helper()
	dd := fmt.Sprintf("exec dd if=/dev/zero of=%s bs=4k count=%d oflag=direct,dsync status=none", dev, count)
	if cgroup != "" {
		dd = fmt.Sprintf("echo $$ > %s/cgroup.procs && %s", cgroup, dd)
	}
	cmd := exec.Command("sh", "-c", dd)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	end := time.Now()
	if err != nil {
		t.Fatalf("%s: %v: %s", dd, err, stderr.String())
	}
	return record.RequestRecord{Start: start, End: end, LatencyMS: float64(end.Sub(start)) / 1e6, Service: "dd", Endpoint: strconv.Itoa(count),
		ThreadID: uint32(cmd.Process.Pid)}
}

// Two requests on a real loop device, recorded by the default ftrace
// profile: one whose thread waits on its own direct, synced writes, whose
// blocked time the device's requests cover; and one whose writes a blkio
// throttle holds above the block layer, whose blocked time they do not.
func TestFtraceVerdictSaysWhetherTheDeviceOrTheLayerAboveItHeldTheRequest(t *testing.T) {
	b := ftraceForTest(t)
	loop, dev := loopDevice(t)
	cg := throttledCgroup(t, strings.Replace(dev, ",", ":", 1), 4)
	dir := t.TempDir()
	rec, err := b.New(capture.Spec{ID: fmt.Sprintf("wait-%d", os.Getpid()), Backend: capture.Ftrace, Pre: 10 * time.Second, Post: time.Second, RingKB: 16384}, dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := rec.Arm(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Disarm() })

	disk := ddRequest(t, loop, 1000, "")
	throttled := ddRequest(t, loop, 5, cg)

	if err := rec.Fire(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := rec.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md := &record.Metadata{ID: "wait", Backend: capture.Ftrace, Lost: res.Lost, Overruns: res.Overruns, Clock: res.Clock}
	began := time.Now()
	if _, err := rec.(capture.Analyzer).Analyze(ctx, capture.AnalysisInput{Metadata: md, Requests: []record.RequestRecord{disk, throttled}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("analysis of %d lost events' capture in %v", md.Lost+md.Overruns, time.Since(began).Round(time.Millisecond))
	raw, err := os.ReadFile(filepath.Join(dir, ExplainFile))
	if err != nil {
		t.Fatal(err)
	}
	var a explain.Analysis
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	if len(a.Requests) != 2 {
		t.Fatalf("%d verdicts, want 2:\n%s", len(a.Requests), raw)
	}
	byThread := map[uint32]explain.RequestVerdict{}
	for _, v := range a.Requests {
		t.Logf("%s (%.0f ms): %s", v.Request.Service+" "+v.Request.Endpoint, v.Request.LatencyMS, v.Verdict)
		byThread[v.Request.ThreadID] = v
	}
	for _, c := range []struct {
		name  string
		q     record.RequestRecord
		where string
		words string
	}{
		{"direct writes", disk, "device", "device latency explains it"},
		{"throttled writes", throttled, "above", "the wait is above the block layer"},
	} {
		v := byThread[c.q.ThreadID]
		if v.IO == nil {
			t.Errorf("%s: no IO verdict: %+v", c.name, v)
			continue
		}
		if !strings.HasPrefix(v.Thread, "dd[") || v.Blocked < c.q.End.Sub(c.q.Start)/3 {
			t.Errorf("%s: thread %s blocked %v of %v, want dd blocked most of it", c.name, v.Thread, v.Blocked, c.q.End.Sub(c.q.Start))
		}
		// The profile's stacktrace trigger: where dd waited, in the
		// block device's direct IO.
		if !strings.Contains(strings.Join(v.BlockedIn, " "), "blkdev") || v.BlockingCall == "" || !strings.Contains(v.Verdict, " in "+v.BlockingCall) {
			t.Errorf("%s: blocked in %q (%v), want the block device's direct IO", c.name, v.BlockingCall, v.BlockedIn)
		}
		if v.IO.Where != c.where || !v.IO.ByWakeup || len(v.IO.Devices) != 1 || v.IO.Devices[0] != dev || !strings.Contains(v.Verdict, c.words) {
			t.Errorf("%s: %+v, want %q on the loop device %s found by the wakeups, and %q in %q", c.name, *v.IO, c.where, dev, c.words, v.Verdict)
		}
	}
	// report.html holds the device's row and each request's wait.
	page, err := os.ReadFile(filepath.Join(dir, explain.ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	h := string(page)
	t.Logf("%s: %d bytes", explain.ReportFile, len(page))
	if !regexp.MustCompile(`<table class=devices>.*\n(<tr>.*\n)*<tr><td class=l>` + dev + `</td><td>\d+</td>`).MatchString(h) {
		t.Errorf("the devices' table has no row for %s", dev)
	}
	waits := regexp.MustCompile(`<tr><td class=l>dd (\d+), \d+ ms</td>.*<td class="l where-(\w+)">`).FindAllStringSubmatch(h, -1)
	if len(waits) != 2 {
		t.Errorf("the waits' table: %v, want the two requests", waits)
	}
	for _, w := range waits {
		if want := map[string]string{"1000": "device", "5": "above"}[w[1]]; w[2] != want {
			t.Errorf("the waits' table says dd %s's wait is %q, want %q", w[1], w[2], want)
		}
	}
	// Four of the five throttled writes wait about 250 ms each; the
	// device's share of it (the writes and the flushes dsync adds, which
	// took 95 ms in one run under load) is at most a third ("above").
	if v := byThread[throttled.ThreadID]; v.IO != nil && v.IO.Blocked < 500*time.Millisecond {
		t.Errorf("throttled: blocked %v with the device busy %v, want ≥ 500 ms blocked", v.IO.Blocked, v.IO.Device)
	}
}
