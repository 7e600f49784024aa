package ownhosts

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The units in deploy/systemd under a real systemd, as the README has a
// person install them: the settings in /etc/spikehunt/spikehunt.env, the
// units in /etc/systemd/system, `systemctl enable --now` the store host's
// four and the agent. systemd (this machine's /lib/systemd/systemd) runs
// as PID 1 of its own PID, mount and network namespaces, with the
// machine's unit directories hidden, so it starts ours and nothing else,
// and whatever service manager the machine has never sees it. The stack
// must then find an app's stall on the host, and bring the ingest back
// after it is killed with SIGKILL (Restart=on-failure).
func TestTheSystemdUnitsKeepTheStackRunningUnderSystemd(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "systemd as PID 1 of its own namespaces", errors.New("not root"))
	}
	const systemd = "/lib/systemd/systemd"
	if _, err := os.Stat(systemd); err != nil {
		testenv.RequirePrivileged(t, "systemd", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	prefix := filepath.Join(tmp, "prefix")
	kafkaLibs := installPrefix(t, root, prefix)
	data := filepath.Join(tmp, "data")
	libUnits, etcUnits, etcSpikehunt := filepath.Join(tmp, "lib-units"), filepath.Join(tmp, "etc-units"), filepath.Join(tmp, "etc-spikehunt")
	for _, d := range []string{data, libUnits, etcUnits, etcSpikehunt, filepath.Join(etcUnits, "service.d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The machine's units are hidden behind one target, and its
	// generators behind an empty folder (the SysV one makes units of
	// /etc/init.d, the fstab one of /etc/fstab); the services
	// write their output where the test can read it (there is no journal).
	// A service's default dependencies need sysinit.target, basic.target
	// and shutdown.target; the units name network-online.target.
	for _, target := range []string{"multi-user", "sysinit", "basic", "shutdown", "network-online"} {
		writeFile(t, filepath.Join(libUnits, target+".target"), "[Unit]\nDescription=the test's "+target+".target\n")
	}
	writeFile(t, filepath.Join(etcUnits, "service.d", "zz-test-output.conf"), "[Service]\nStandardOutput=append:"+data+"/%N.out\nStandardError=inherit\n")

	// The settings: deploy/systemd/spikehunt.env with this machine's
	// values (the network namespace is the test's own: the ports are
	// free), and the pinned Kafka's jars, which kafka.sh would fetch.
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", "spikehunt.env"))
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{"KAFKA": "127.0.0.1:9092", "STORE": "127.0.0.1:8123", "DATA": data, "SPIKEHUNT_CHECKOUT": root}
	var env strings.Builder
	for _, l := range strings.Split(string(raw), "\n") {
		if k, _, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			v, known := settings[k]
			if !known {
				t.Fatalf("deploy/systemd/spikehunt.env sets %s, which the test has no value for", k)
			}
			l = k + "=" + v
			delete(settings, k)
		}
		env.WriteString(l + "\n")
	}
	if len(settings) > 0 {
		t.Fatalf("deploy/systemd/spikehunt.env lacks %v", settings)
	}
	env.WriteString("SPIKEHUNT_KAFKA_LIBS=" + kafkaLibs + "\n")
	writeFile(t, filepath.Join(etcSpikehunt, "spikehunt.env"), env.String())
	units, _ := filepath.Glob(filepath.Join(root, "deploy", "systemd", "*.service"))
	installFiles(t, units, etcUnits)

	// /etc/spikehunt is a mount point inside; outside it is made if need
	// be, and removed after.
	if _, err := os.Stat("/etc/spikehunt"); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir("/etc/spikehunt", 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove("/etc/spikehunt") })
	}
	boot := fmt.Sprintf(`set -eu
mount --make-rprivate /
mount --bind %[1]s /lib/systemd/system
mount --bind %[2]s /etc/systemd/system
mount --bind %[3]s /etc/spikehunt
mount --bind %[4]s/bin /usr/local/bin
mount --bind %[4]s/lib /usr/local/lib
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /usr/lib/systemd/system-generators
if [ -d /etc/systemd/system-generators ]; then mount -t tmpfs tmpfs /etc/systemd/system-generators; fi
exec env -i container=spikehunt-test PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin %[5]s --system --unit=multi-user.target --log-target=console --log-level=info
`, libUnits, etcUnits, etcSpikehunt, prefix, systemd)
	log, err := os.Create(filepath.Join(tmp, "systemd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount", "--mount-proc", "--net", "bash", "-c", boot)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid1 := childOf(t, cmd.Process.Pid)
	t.Cleanup(func() {
		// SIGKILL to a PID namespace's init ends every process in it.
		syscall.Kill(pid1, syscall.SIGKILL)
		cmd.Wait()
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range append(globs(filepath.Join(data, "*.out")), filepath.Join(tmp, "systemd.log")) {
				b, _ := os.ReadFile(f)
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("--- %s:\n%s", filepath.Base(f), b)
			}
		}
	})
	inside := func(ctx context.Context, args ...string) (string, error) {
		c := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid1), "-m", "-n", "-p", "--"}, args...)...)
		out, err := c.CombinedOutput()
		return string(out), err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	bootCtx, bootCancel := context.WithTimeout(ctx, time.Minute)
	defer bootCancel()
	waitFor(t, bootCtx, "systemd to answer", func() (bool, string) {
		out, err := inside(bootCtx, "systemctl", "is-system-running")
		s := strings.TrimSpace(out)
		return err == nil || s == "degraded" || s == "running", s
	})

	// The README's commands.
	for _, args := range [][]string{
		{"systemctl", "enable", "--now", "spikehunt-kafka", "spikehunt-store", "spikehunt-ingest", "spikehunt-detect"},
		{"systemctl", "enable", "--now", "spikehunt-agent"},
	} {
		if out, err := inside(ctx, args...); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	services := []string{"spikehunt-kafka", "spikehunt-store", "spikehunt-ingest", "spikehunt-detect", "spikehunt-agent"}
	waitFor(t, ctx, "every unit active and the store answering", func() (bool, string) {
		out, _ := inside(ctx, append([]string{"systemctl", "is-active"}, services...)...)
		if strings.Count(out, "active\n") != len(services) || strings.Contains(out, "inactive") {
			return false, out
		}
		ping, err := inside(ctx, "curl", "-fsS", "http://127.0.0.1:8123/ping")
		return err == nil, out + ping
	})

	// An app on the host: the agent's UDP line intake, from inside the
	// namespace's network.
	conn := dialIn(t, pid1, "udp", "127.0.0.1:7171")
	defer conn.Close()
	stallFrom := sendOn(t, ctx, []net.Conn{conn}, 40*time.Second, 1200*time.Millisecond, 10*time.Second)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	var table string
	waitFor(t, ctx, "the stall in spikehunt spikes", func() (bool, string) {
		table, _ = inside(ctx, "/usr/local/bin/spikehunt", "spikes", "--dsn", "http://127.0.0.1:8123/spikehunt", "--since", "1h")
		return spikeOn(table, host, stallFrom), table
	})
	t.Logf("spikehunt spikes under systemd:\n%s", table)

	// A crash: the ingest killed with SIGKILL comes back on its own.
	mainPID := func() string {
		out, _ := inside(ctx, "systemctl", "show", "--property", "MainPID", "--value", "spikehunt-ingest")
		return strings.TrimSpace(out)
	}
	before := mainPID()
	if out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid1), "-p", "-m", "--", "kill", "-KILL", before).CombinedOutput(); err != nil {
		t.Fatalf("kill -KILL the ingest (%s): %v\n%s", before, err, out)
	}
	waitFor(t, ctx, "systemd to restart the ingest", func() (bool, string) {
		now := mainPID()
		state, _ := inside(ctx, "systemctl", "is-active", "spikehunt-ingest")
		return now != before && now != "0" && strings.TrimSpace(state) == "active", "MainPID " + now + ", " + state
	})
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func globs(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}

// childOf is the one child of pid (unshare --fork's, which becomes the
// namespace's PID 1), waited for up to 10 s.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if f := strings.Fields(string(b)); err == nil && len(f) == 1 {
			child, err := strconv.Atoi(f[0])
			if err == nil {
				return child
			}
		}
	}
	t.Fatalf("unshare (%d) started no namespace init", pid)
	return 0
}

var nsSpaces = regexp.MustCompile(`\s+`)

// waitFor polls cond every second until it holds or ctx ends; it fails
// with what cond said last.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	for {
		ok, last := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; last: %s", what, ctx.Err(), nsSpaces.ReplaceAllString(last, " "))
		case <-time.After(time.Second):
		}
	}
}

// dialIn dials addr from inside the network namespace of pid: the socket
// is made on a thread moved into it, and keeps it after the thread moves
// back.
func dialIn(t *testing.T, pid int, network, addr string) net.Conn {
	t.Helper()
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked: if moving back failed it must not
		// serve other goroutines, and it ends with this one.
		own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			done <- result{err: err}
			return
		}
		defer own.Close()
		target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			done <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: err}
			return
		}
		c, err := net.Dial(network, addr)
		if back := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); back != nil {
			err = errors.Join(err, back)
		} else {
			runtime.UnlockOSThread()
		}
		done <- result{c, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("dial %s %s in the namespace of %d: %v", network, addr, pid, r.err)
	}
	return r.c
}
