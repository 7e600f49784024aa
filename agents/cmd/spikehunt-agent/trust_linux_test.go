package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/agents/capture/perf"
	"github.com/spikehunt/spikehunt/agents/intake"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// A child process of another user: the test binary, re-run with
// childOpEnv set, does one thing and exits 0 on success.
const (
	childOpEnv  = "SPIKEHUNT_TEST_CHILD_OP"
	childArgEnv = "SPIKEHUNT_TEST_CHILD_ARG"
	childMsgEnv = "SPIKEHUNT_TEST_CHILD_MSG"
	nobody      = 65534
)

func childMain(op string) int {
	target, msg := os.Getenv(childArgEnv), os.Getenv(childMsgEnv)
	var err error
	switch op {
	case "unixgram", "udp":
		var c net.Conn
		if c, err = net.Dial(op, target); err == nil {
			_, err = c.Write([]byte(msg))
			c.Close()
		}
	case "control":
		var out []map[string]any
		err = control.NewClient(target).Do(context.Background(), http.MethodGet, "/v1/captures", nil, &out)
		if err == nil {
			fmt.Printf("listed %d captures\n", len(out))
		}
	default:
		err = fmt.Errorf("unknown child op %q", op)
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	return 0
}

var childBin struct {
	sync.Once
	path string
	err  error
}

// runAs runs op as uid (and gid = uid) in a child process and returns
// its output; err is non-nil when op failed.
func runAs(t *testing.T, uid int, op, target, msg string) (string, error) {
	t.Helper()
	childBin.Do(func() {
		// The go tool's build folder is root's alone: copy the test
		// binary where another user may run it.
		dir, err := os.MkdirTemp("", "spikehunt-child-")
		if err != nil {
			childBin.err = err
			return
		}
		exe, err := os.Executable()
		if err != nil {
			childBin.err = err
			return
		}
		b, err := os.ReadFile(exe)
		if err != nil {
			childBin.err = err
			return
		}
		childBin.path = filepath.Join(dir, "child")
		childBin.err = errorsJoin(os.Chmod(dir, 0o755), os.WriteFile(childBin.path, b, 0o755))
	})
	if childBin.err != nil {
		t.Fatal(childBin.err)
	}
	cmd := exec.Command(childBin.path)
	cmd.Env = append(os.Environ(), childOpEnv+"="+op, childArgEnv+"="+target, childMsgEnv+"="+msg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func errorsJoin(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func requireRootAndPerf(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "root (other users' processes)", fmt.Errorf("euid %d", os.Geteuid()))
	}
	if err := perf.New(perf.Config{}).Check(); err != nil {
		testenv.RequirePrivileged(t, "perf", err)
	}
}

// openToAll lets every user into the folders above a test's socket, as
// /run is on a host.
func openToAll(t *testing.T, sock string) {
	t.Helper()
	for d := filepath.Dir(sock); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// metricValue reads one sample of the agent's /metrics; 0 when absent.
func metricValue(t *testing.T, p *agentProc, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`metrics http://(\S+)/metrics`).FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("no metrics address in the agent's output")
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func captureState(t *testing.T, p *agentProc, id string) control.Status {
	t.Helper()
	out, err := captureCLI(t, p, "get", id, "--json")
	if err != nil {
		t.Fatalf("capture get: %v\n%s", err, out)
	}
	var st control.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return st
}

// One UDP datagram `checkout /pay 5000000 200` from an
// unprivileged user fired an armed root perf capture. Now a datagram from
// an address that is not listed (UDP) and one from a uid that is not
// listed (the unix socket, sent by a process running as nobody) are
// counted and leave the capture armed; the same line from a listed uid
// fires it, through the real perf flight recorder.
func TestANonAllowedSenderCannotFireAnArmedCapture(t *testing.T) {
	requireRootAndPerf(t)
	const allowed = 4242
	p := startAgent(t, []string{"127.0.0.1:1"}, t.TempDir(), "--capture.backends", "perf",
		"--intake.trigger.uids", strconv.Itoa(allowed))
	openToAll(t, p.sock)
	out, err := captureCLI(t, p, "arm", "--id", "bait", "--backend", "perf", "--service", "checkout",
		"--latency", "500ms", "--pre", "1s", "--post", "500ms")
	if err != nil {
		t.Fatalf("arm: %v\n%s", err, out)
	}
	const line = "checkout /pay 5000000 200\n"
	udp, err := agentUDP(p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("udp", udp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(line)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if out, err := runAs(t, nobody, "unixgram", p.sock, line); err != nil {
		t.Fatalf("nobody could not send to the line socket: %v\n%s", err, out)
	}
	time.Sleep(2 * time.Second) // a fire would have dumped by now (State moves to Fired once it has)
	if st := captureState(t, p, "bait"); st.State != control.Armed {
		t.Fatalf("the capture is %s after untrusted requests (cause %+v), want Armed", st.State, st.Cause)
	}
	const refusedUntrusted = `spikehunt_capture_trigger_refused_total{reason="untrusted_sender"}`
	waitFor(t, func() bool { return metricValue(t, p, refusedUntrusted) == 2 })
	waitFor(t, func() bool { return strings.Contains(p.out.String(), "did not fire it") })

	if out, err := runAs(t, allowed, "unixgram", p.sock, line); err != nil {
		t.Fatalf("uid %d could not send: %v\n%s", allowed, err, out)
	}
	out, err = captureCLI(t, p, "wait", "bait", "--timeout", "30s", "--json")
	if err != nil {
		t.Fatalf("wait: %v\n%s", err, out)
	}
	var st control.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if st.State != control.Collected || st.Cause == nil || st.Cause.Kind != "latency" || st.Cause.Latency != 5*time.Second {
		t.Fatalf("capture %s cause %+v (%s), want Collected by the allowed sender's 5 s request", st.State, st.Cause, st.Error)
	}
	t.Logf("fire→dump %v from the allowed sender's datagram", st.FireToDump)
	if got := metricValue(t, p, refusedUntrusted); got != 2 {
		t.Errorf("refused{untrusted_sender} = %v after the allowed fire, want still 2", got)
	}
}

// With the default paths the control socket's 0750
// folder was the line socket's, which left the 0666 line socket out of
// reach of every app not running as root. With the default layout (under
// a stand-in for /, whose /run is 0755 as on a host) another user can
// send to the line socket and cannot reach the control socket; and a
// control socket whose mode is loosened by hand still serves root only.
func TestDefaultLayoutLetsAnyUserReachTheLineSocketButNotTheControlSocket(t *testing.T) {
	requireRootAndPerf(t)
	root, err := os.MkdirTemp("", "spikehunt-root-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := errorsJoin(os.Chmod(root, 0o755), os.Mkdir(filepath.Join(root, "run"), 0o755)); err != nil {
		t.Fatal(err)
	}
	lineSock := filepath.Join(root, intake.DefaultLineUnix)
	ctlSock := filepath.Join(root, defaultCaptureConfig().Socket)
	p := startAgent(t, []string{"127.0.0.1:1"}, t.TempDir(), "--capture.backends", "perf",
		"--intake.line-unix", lineSock, "--capture.socket", ctlSock)
	waitFor(t, func() bool { _, err := os.Stat(ctlSock); return err == nil })

	if filepath.Dir(lineSock) == filepath.Dir(ctlSock) {
		t.Fatalf("the default line socket %s and control socket %s share a folder", lineSock, ctlSock)
	}
	for path, want := range map[string]os.FileMode{filepath.Dir(lineSock): 0o755, filepath.Dir(ctlSock): 0o700, ctlSock: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %04o", path, fi.Mode().Perm(), err, want)
		}
	}
	received := func() float64 {
		return metricValue(t, p, `spikehunt_intake_requests_total{outcome="kept_slow",source="unixgram"}`)
	}
	if out, err := runAs(t, nobody, "unixgram", lineSock, "billy /search 900000 200\n"); err != nil {
		t.Fatalf("nobody could not send to the default line socket: %v\n%s", err, out)
	}
	waitFor(t, func() bool { return received() == 1 })
	if out, err := runAs(t, nobody, "control", ctlSock, ""); err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("nobody reached the control socket: %v\n%s", err, out)
	}
	if out, err := captureCLI(t, p, "list"); err != nil {
		t.Fatalf("root could not use the control socket: %v\n%s", err, out)
	}

	// Loosened by hand: the mode lets nobody in, the agent does not.
	if err := errorsJoin(os.Chmod(filepath.Dir(ctlSock), 0o755), os.Chmod(ctlSock, 0o666)); err != nil {
		t.Fatal(err)
	}
	if out, err := runAs(t, nobody, "control", ctlSock, ""); err == nil {
		t.Fatalf("nobody used a loosened control socket:\n%s", out)
	}
	waitFor(t, func() bool { return strings.Contains(p.out.String(), "refused a connection that is not root's") })
}

// A control socket folder that another user owns is refused before the
// agent binds in it: its owner could swap the socket for one of theirs,
// which `spikehunt-agent capture`, run as root, would talk to. A folder of
// the agent's that others may write, as the chart's emptyDir volume is
// (0777), is made 0700 before the bind.
func TestControlSocketFolderMustBeTheAgentsAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "root (chown)", fmt.Errorf("euid %d", os.Geteuid()))
	}
	dir := filepath.Join(t.TempDir(), "ctl")
	sock := filepath.Join(dir, "capture.sock")
	ln, err := listenControl(sock)
	if err != nil {
		t.Fatalf("a fresh folder: %v", err)
	}
	ln.Close()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("made the folder %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	for _, tc := range []struct {
		name string
		bad  func() error
		says string
	}{
		{"owned by another user", func() error { return os.Chown(dir, nobody, nobody) }, "owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.bad(); err != nil {
				t.Fatal(err)
			}
			defer func() { os.Chmod(dir, 0o700); os.Chown(dir, 0, 0) }()
			ln, err := listenControl(sock)
			if err == nil {
				ln.Close()
				t.Fatal("bound the control socket in a folder that is not the agent's alone")
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("err %v, want it to say %q", err, tc.says)
			}
		})
	}
	t.Run("the agent's, writable by others", func(t *testing.T) {
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		ln, err := listenControl(sock)
		if err != nil {
			t.Fatalf("the agent's own folder at 0777 (an emptyDir volume): %v", err)
		}
		ln.Close()
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("the folder is %v (%v) after the bind, want 0700", fi.Mode().Perm(), err)
		}
	})
}
