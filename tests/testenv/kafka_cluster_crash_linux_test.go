package testenv_test

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// A test binary killed with SIGKILL while it runs a cluster (no cleanup,
// no deferred Stop) leaves none of the three JVMs behind.
func TestKilledTestBinaryLeavesNoClusterNode(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "cluster-kill" {
		if _, err := testenv.StartKafkaCluster(testenv.KafkaClusterOptions{}); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("CHILD_PIDS %s\n", strings.Trim(fmt.Sprint(childPIDs(t)), "[]"))
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	out, err := runChild(t, "TestKilledTestBinaryLeavesNoClusterNode", "cluster-kill", "TMPDIR="+t.TempDir())
	if err == nil {
		t.Fatalf("child passed; want it killed. Output:\n%s", out)
	}
	pids := parseChildPIDs(out)
	// Three JVMs and the reaper's shell.
	if len(pids) < testenv.KafkaClusterNodes+1 {
		t.Fatalf("child reported %d processes (%v), want at least %d. Output:\n%s", len(pids), pids, testenv.KafkaClusterNodes+1, out)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var alive []string
		for _, pid := range pids {
			if name, ok := running(pid); ok {
				alive = append(alive, fmt.Sprintf("%d (%s)", pid, name))
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes of the killed test binary still running after 20s: %v", alive)
		}
	}
}
