package testenv_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestCrashedTestBinaryLeavesNoProcesses(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "crash" {
		testenv.SharedKafka(t)
		testenv.SharedAPIServer(t)
		fmt.Printf("CHILD_PIDS %s\n", strings.Trim(fmt.Sprint(childPIDs(t)), "[]"))
		// A panic ends the binary before TestMain can call StopShared.
		panic("testenv: simulated crash of a test binary")
	}
	// The crashed child cannot remove its temporary folders; they go with ours.
	out, err := runChild(t, "TestCrashedTestBinaryLeavesNoProcesses", "crash", "TMPDIR="+t.TempDir())
	if err == nil {
		t.Fatalf("child passed; want it to crash. Output:\n%s", out)
	}
	pids := parseChildPIDs(out)
	// java, etcd, kube-apiserver and the reaper's shell.
	if len(pids) < 4 {
		t.Fatalf("child reported %d processes (%v), want at least 4. Output:\n%s", len(pids), pids, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
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
			t.Fatalf("processes of the crashed test binary still running after 20s: %v", alive)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// childPIDs lists this process's children from /proc/self/task/*/children.
func childPIDs(t *testing.T) []int {
	t.Helper()
	files, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil || len(files) == 0 {
		t.Fatalf("list children: %v (no /proc/self/task/*/children)", err)
	}
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread has exited
		}
		for _, field := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(field); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func parseChildPIDs(out string) []int {
	var pids []int
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "CHILD_PIDS ")
		if !ok {
			continue
		}
		for _, field := range strings.Fields(rest) {
			if pid, err := strconv.Atoi(field); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// running reports whether pid exists and is not a zombie, with its name.
func running(pid int) (string, bool) {
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return "", false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	open, closing := strings.IndexByte(string(stat), '('), strings.LastIndexByte(string(stat), ')')
	if open < 0 || closing < open || closing+2 >= len(stat) {
		return "", true
	}
	return string(stat[open+1 : closing]), stat[closing+2] != 'Z'
}
