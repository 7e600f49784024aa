package kafkacluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// faultLimit bounds each step of a fault: the chain carrying on, a node
// coming back, the partitions back in sync.
const faultLimit = time.Minute

// The leader of the agent's partition is killed with kill -9 (no
// controlled shutdown) and started again: the chain carries on with two
// of three brokers, and the node catches up.
func TestChainSurvivesTheLeadersKill9(t *testing.T) {
	o := leaderKill(t)
	t.Logf("leader kill -9: pause %.1f s", o.pause.Seconds())
}

// leaderKill is the leader's kill -9 under load, for the test and the
// benchmark.
func leaderKill(t testing.TB) outcome {
	ch := startChain(t, testenv.KafkaClusterOptions{})
	ctx := context.Background()
	time.Sleep(2 * time.Second) // steady flow before the fault
	leader, err := ch.cluster.Leader(ctx, spansTopic, 0)
	if err != nil {
		t.Fatal(err)
	}
	role := ch.role(t, leader)
	t0 := time.Now()
	if err := ch.cluster.Kill(leader); err != nil {
		t.Fatal(err)
	}
	ch.carriesOn(t, t0, fmt.Sprintf("node %d, %s, was killed", leader, role))
	if *skipRecovery {
		t.Logf("control run: node %d stays down", leader)
	} else if err := ch.cluster.Start(ctx, leader); err != nil {
		t.Fatal(err)
	}
	ch.inSync(t, faultLimit)
	o := ch.finish(t, t0)
	if fenced, ok := fencedAt(ch.cluster, leader); ok {
		t.Logf("the controller fenced node %d %.1f s after the kill; the rest of the pause is the clients finding the new leader", leader, fenced.Sub(t0).Seconds())
	}
	return o
}

// fenceLine is the controller's line when a broker's session times out.
var fenceLine = regexp.MustCompile(`\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] INFO .*Fencing broker (\d+) at epoch \d+ because its session has timed out`)

// fencedAt is when the active controller fenced node i, from the nodes'
// logs (local time, as the JVM writes it).
func fencedAt(c *testenv.KafkaCluster, i int) (time.Time, bool) {
	for n := range testenv.KafkaClusterNodes {
		for _, m := range fenceLine.FindAllStringSubmatch(c.Log(n), -1) {
			if m[2] != strconv.Itoa(i+1) {
				continue
			}
			if at, err := time.ParseInLocation("2006-01-02 15:04:05,000", m[1], time.Local); err == nil {
				return at, true
			}
		}
	}
	return time.Time{}, false
}

// All three brokers are restarted one after the other, gracefully, each
// once the partitions are back in sync, as an operator rolls an upgrade.
func TestChainSurvivesARollingRestartOfAllThreeBrokers(t *testing.T) {
	o := rollingRestart(t)
	t.Logf("rolling restart: pause %.1f s", o.pause.Seconds())
}

func rollingRestart(t testing.TB) outcome {
	ch := startChain(t, testenv.KafkaClusterOptions{})
	ctx := context.Background()
	time.Sleep(2 * time.Second)
	t0 := time.Now()
	for i := range testenv.KafkaClusterNodes {
		start := time.Now()
		var err error
		if *skipRecovery {
			err = ch.cluster.Shutdown(i) // control run: stopped, never started again
		} else {
			err = ch.cluster.Restart(ctx, i)
		}
		if err != nil {
			t.Fatal(err)
		}
		ch.inSync(t, faultLimit)
		t.Logf("node %d restarted and back in sync in %.1f s; longest pause so far %.1f s", i, time.Since(start).Seconds(),
			ch.probe.longestGap(t0, time.Now()).Seconds())
	}
	return ch.finish(t, t0)
}

// One broker's disk fills up: its log directory is a small tmpfs, filled
// to ENOSPC by a file beside Kafka's. The broker stops; the other two
// carry the chain; once the file is gone and the broker started, it
// catches up and the partitions are back on three nodes.
func TestChainSurvivesOneBrokersDiskFillingUp(t *testing.T) {
	o := diskFull(t)
	t.Logf("disk full: pause %.1f s", o.pause.Seconds())
}

// diskSize is each broker's tmpfs: room for the test's data many times
// over, small enough to fill in a moment.
const diskSize = "96m"

func diskFull(t testing.TB) outcome {
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "root (to mount a tmpfs as a broker's disk)", fmt.Errorf("euid %d", os.Geteuid()))
	}
	// Every node gets a disk of its own, since which one will lead the
	// agent's partition is known only once the topic exists.
	base := t.TempDir()
	dirs := make([]string, testenv.KafkaClusterNodes)
	for i := range dirs {
		dirs[i] = filepath.Join(base, fmt.Sprintf("disk-%d", i))
		if err := os.Mkdir(dirs[i], 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", dirs[i], "tmpfs", 0, "size="+diskSize+",mode=0755"); err != nil {
			t.Fatalf("mount a tmpfs on %s: %v", dirs[i], err)
		}
		t.Cleanup(func() {
			if err := syscall.Unmount(dirs[i], syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", dirs[i], err)
			}
		})
	}
	ch := startChain(t, testenv.KafkaClusterOptions{LogDirs: dirs})
	ctx := context.Background()
	time.Sleep(2 * time.Second)
	full, err := ch.cluster.Leader(ctx, spansTopic, 0)
	if err != nil {
		t.Fatal(err)
	}
	role := ch.role(t, full)
	fill := filepath.Join(dirs[full], "fill")
	t0 := time.Now()
	n, err := fillDisk(fill)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %d (%s): %d MiB written to its disk before ENOSPC", full, role, n>>20)
	halted := false
	for deadline := time.Now().Add(faultLimit); time.Now().Before(deadline) && !halted; time.Sleep(100 * time.Millisecond) {
		halted = !ch.cluster.Running(full)
	}
	if !halted {
		t.Fatalf("node %d still runs %v after its disk filled up", full, faultLimit)
	}
	stopped := time.Now()
	t.Logf("node %d stopped %.1f s after its disk filled up; its log says:\n%s", full, stopped.Sub(t0).Seconds(), failureLines(ch.cluster.Log(full), 4))
	ch.carriesOn(t, stopped, fmt.Sprintf("node %d stopped on its full disk", full))
	if *skipRecovery {
		t.Logf("control run: node %d's disk stays full, the node down", full)
	} else {
		if err := os.Remove(fill); err != nil {
			t.Fatal(err)
		}
		if err := ch.cluster.Start(ctx, full); err != nil {
			t.Fatal(err)
		}
	}
	ch.inSync(t, faultLimit)
	o := ch.finish(t, t0)
	if fenced, ok := fencedAt(ch.cluster, full); ok {
		t.Logf("the controller fenced node %d %.1f s after its disk filled up", full, fenced.Sub(t0).Seconds())
	}
	return o
}

// fillDisk writes name until the file system is full and returns how
// many bytes it took.
func fillDisk(name string) (int64, error) {
	f, err := os.Create(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("fill %s: %w", name, err)
		}
	}
}

// role says what node i, the leader of the spans topic, leads: when it
// also leads the controller quorum, its loss waits for a new controller
// before the fence.
func (ch *chain) role(t testing.TB, i int) string {
	t.Helper()
	ctl, err := ch.cluster.ActiveController(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ctl == i {
		return "the leader of " + spansTopic + " and the active controller"
	}
	return "the leader of " + spansTopic
}

// carriesOn fails t unless records become readable after t0, the fault
// (what), within faultLimit: the chain runs on the other brokers.
func (ch *chain) carriesOn(t testing.TB, t0 time.Time, what string) {
	t.Helper()
	after, err := ch.probe.waitArrival(t0, faultLimit)
	if err != nil {
		t.Fatalf("%s; the chain stopped: %v", what, err)
	}
	t.Logf("%s; a record became readable %.1f s later (it may have been on its way before)", what, after.Seconds())
}

// failureLines are the first n ERROR or FATAL lines of a node's log: what
// Kafka said when the disk failed.
func failureLines(log string, n int) string {
	var keep []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "] ERROR ") || strings.Contains(l, "] FATAL ") {
			if keep = append(keep, l); len(keep) == n {
				break
			}
		}
	}
	return strings.Join(keep, "\n")
}
