package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Proc is one run of a binary a test started as a process of its own (the
// chain's agent, ingest or store, as tests/kafkacluster and tests/soak run
// them): its output kept in a bounded buffer, killed when the test ends,
// and with the test binary if that dies first (Pdeathsig). A process that
// exits is not started again unless the test does it (Again): a test that
// sees one gone has seen the chain need a restart.
type Proc struct {
	Name string
	Args []string // the binary, then its arguments
	Cmd  *exec.Cmd
	Out  *TailBuffer
	done chan struct{} // closed when it has exited
}

// procOutputBytes bounds each process's kept output: a soak's half hour
// of a chatty ingest must not grow the test without bound.
const procOutputBytes = 16 << 20

// StartProc runs bin with args until the test ends (then SIGKILL). If the
// test failed, the last lines of the process's output go to its log.
func StartProc(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Args: append([]string{bin}, args...), Cmd: exec.Command(bin, args...), Out: NewTailBuffer(procOutputBytes), done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.Cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s output (tail):\n%s", name, Tail(p.Out.String(), 40))
		}
	})
	return p
}

// Again starts the same command anew, as a supervisor restarts a process
// (systemd's Restart=always, a pod's restart policy).
func (p *Proc) Again(t testing.TB) *Proc {
	return StartProc(t, p.Name, p.Args[0], p.Args[1:]...)
}

// Alive says whether the process still runs.
func (p *Proc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// PID is the running process's id, 0 once it has exited.
func (p *Proc) PID() int {
	if !p.Alive() {
		return 0
	}
	return p.Cmd.Process.Pid
}

// Kill9 ends the process with SIGKILL and waits for it.
func (p *Proc) Kill9() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop ends the process with SIGTERM, then SIGKILL after grace.
func (p *Proc) Stop(grace time.Duration) {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill9()
	}
}

// WaitFor waits until the output matches re and returns the match; it
// fails the test, with the output's tail, when timeout passes or the
// process exits first.
func (p *Proc) WaitFor(t testing.TB, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m := re.FindStringSubmatch(p.Out.String()); m != nil {
			return m
		}
		if !p.Alive() {
			break
		}
	}
	t.Fatalf("%s (running: %v) did not print %q within %v:\n%s", p.Name, p.Alive(), re, timeout, Tail(p.Out.String(), 30))
	return nil
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// BuildChainBinaries builds spikehunt-agent and spikehunt into a new
// temporary folder named after prefix, for a TestMain whose tests run the
// chain as processes; cleanup removes the folder.
func BuildChainBinaries(prefix string) (agent, spikehunt string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	agent, spikehunt = filepath.Join(dir, "spikehunt-agent"), filepath.Join(dir, "spikehunt")
	for bin, pkg := range map[string]string{
		agent:     "github.com/spikehunt/spikehunt/agents/cmd/spikehunt-agent",
		spikehunt: "github.com/spikehunt/spikehunt/pipelines/cmd/spikehunt",
	} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			cleanup()
			return "", "", nil, fmt.Errorf("build %s: %v\n%s", pkg, err, out)
		}
	}
	return agent, spikehunt, cleanup, nil
}
