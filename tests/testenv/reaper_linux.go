package testenv

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
)

// envtest starts etcd and kube-apiserver in their own process groups but
// without Pdeathsig, and gives no hook to add it. When a test binary dies
// without stopping them (a panic, go test -timeout, SIGKILL) they would run
// on. The reaper is a /bin/sh child that reads "add PGID" and "del PGID"
// lines on its stdin; when the stdin pipe closes, which the kernel does when
// the test binary exits in any way, it kills the groups still registered.
// It ignores the terminal's signals so that Ctrl-C reaches it only as EOF.
// Debian's dash refuses both "kill -s KILL -PGID" and "kill -KILL -- -PGID";
// "kill -KILL -PGID" works in dash and bash.
const reaperScript = `trap '' INT TERM HUP QUIT
groups=''
while read -r op pg; do
	case $op in
	add) groups="$groups $pg" ;;
	del) kept=''; for g in $groups; do [ "$g" = "$pg" ] || kept="$kept $g"; done; groups=$kept ;;
	esac
done
for g in $groups; do kill -KILL "-$g" 2>/dev/null; done
`

type reaper struct {
	mu    sync.Mutex
	stdin io.WriteCloser
	err   error
}

var theReaper reaper

// start runs the reaper on first use; r.mu is held.
func (r *reaper) start() error {
	if r.stdin != nil || r.err != nil {
		return r.err
	}
	cmd := exec.Command("/bin/sh", "-c", reaperScript)
	// Its own group: a Ctrl-C to the test's group must not kill it first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		r.err = fmt.Errorf("testenv: start the process reaper: %w", err)
		return r.err
	}
	go func() { _ = cmd.Wait() }() // reap it if it ever exits early
	r.stdin = stdin
	return nil
}

// guard registers process groups to kill if the test binary dies.
func (r *reaper) guard(pgids []int) error {
	return r.send("add", pgids)
}

// release unregisters process groups that were stopped normally, so a later
// process that reuses a number is not killed.
func (r *reaper) release(pgids []int) error {
	return r.send("del", pgids)
}

func (r *reaper) send(op string, pgids []int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.start(); err != nil {
		return err
	}
	var b bytes.Buffer
	for _, pg := range pgids {
		fmt.Fprintf(&b, "%s %d\n", op, pg)
	}
	if _, err := r.stdin.Write(b.Bytes()); err != nil {
		return fmt.Errorf("testenv: process reaper: %w", err)
	}
	return nil
}

// childrenNamed lists the direct children of this process whose executable
// has one of the given base names.
func childrenNamed(names ...string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list children: %w", err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || parseStatPPID(stat) != self {
			continue // gone meanwhile, or not ours
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || !slices.Contains(names, filepath.Base(exe)) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// parseStatPPID returns the parent pid from /proc/PID/stat, or -1. The
// command name in parentheses may itself hold spaces and parentheses, so the
// fields are counted from the last ')'.
func parseStatPPID(stat []byte) int {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return -1
	}
	fields := bytes.Fields(stat[i+1:])
	if len(fields) < 2 { // state, ppid
		return -1
	}
	ppid, err := strconv.Atoi(string(fields[1]))
	if err != nil {
		return -1
	}
	return ppid
}
