package memlimit

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// childEnv makes the test binary, started again, wait for a line on its
// stdin (its parent moves it into a cgroup meanwhile), call Set and print
// the runtime's memory limit.
const childEnv = "SPIKEHUNT_MEMLIMIT_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		bufio.NewReader(os.Stdin).ReadString('\n')
		n, from, err := Set(DefaultRatio)
		fmt.Println(n, debug.SetMemoryLimit(-1), from, err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSetFollowsTheLimitOfTheCgroupTheProcessRunsIn: a process moved into
// a memory cgroup of 300 MiB on this kernel (v1 or v2, whichever it
// mounts) gives its runtime 90% of it.
func TestSetFollowsTheLimitOfTheCgroupTheProcessRunsIn(t *testing.T) {
	dir, limitFile, procsFile := "", "", ""
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir, limitFile, procsFile = "/sys/fs/cgroup", "memory.max", "cgroup.procs"
	} else {
		dir, limitFile, procsFile = "/sys/fs/cgroup/memory", "memory.limit_in_bytes", "cgroup.procs"
	}
	cg := filepath.Join(dir, fmt.Sprintf("spikehunt-memlimit-test-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		requirePrivileged(t, err)
	}
	defer os.Remove(cg)
	const limit = 300 << 20
	if err := os.WriteFile(filepath.Join(cg, limitFile), []byte(strconv.Itoa(limit)), 0o644); err != nil {
		requirePrivileged(t, err)
	}

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = slices.DeleteFunc(append(os.Environ(), childEnv+"=1"), func(e string) bool { return strings.HasPrefix(e, "GOMEMLIMIT=") })
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cg, procsFile), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("move the child into %s: %v", cg, err)
	}
	stdin.Write([]byte("go\n"))
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	want := int64(float64(limit) * DefaultRatio)
	f := strings.Fields(out.String())
	if len(f) < 3 || f[0] != strconv.FormatInt(want, 10) || f[1] != f[0] || f[2] != filepath.Join(cg, limitFile) {
		t.Fatalf("child printed %q; want the limit %d set from %s", out.String(), want, filepath.Join(cg, limitFile))
	}
}

func requirePrivileged(t *testing.T, err error) {
	t.Helper()
	if os.Getenv("SPIKEHUNT_REQUIRE_PRIVILEGED") == "1" {
		t.Fatalf("a memory cgroup of our own: %v (SPIKEHUNT_REQUIRE_PRIVILEGED=1)", err)
	}
	t.Skipf("a memory cgroup of our own needs root: %v", err)
}
