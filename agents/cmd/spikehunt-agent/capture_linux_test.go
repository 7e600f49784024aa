package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/agents/capture/perf"
	"github.com/spikehunt/spikehunt/agents/client"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// captureCLI runs `spikehunt-agent capture ARGS…` against p's socket.
func captureCLI(t testing.TB, p *agentProc, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(agentBin, append(append([]string{"capture"}, args...), "--socket", p.capSock)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

// The whole path by hand, as a person without Kubernetes would: arm perf
// on the running agent with the CLI, an app reports its requests through
// agents/client, one request blocks its thread for a second, the local
// trigger fires, and the CLI waits for the artifact, which holds the
// slow request beside the trace.
func TestCaptureByHandFiresOnTheAppsSlowRequest(t *testing.T) {
	if err := perf.New(perf.Config{}).Check(); err != nil || os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "perf as root", err)
	}
	p := startAgent(t, []string{"127.0.0.1:1"}, t.TempDir(), "--capture.backends", "perf")
	waitFor(t, func() bool { _, err := os.Stat(p.capSock); return err == nil })

	out, err := captureCLI(t, p, "backends")
	if err != nil || !strings.Contains(out, "perf") || !strings.Contains(out, "ok") {
		t.Fatalf("capture backends: %v\n%s", err, out)
	}
	// Bad input gets a clear error and arms nothing.
	for _, bad := range [][]string{
		{"arm", "--backend", "dtrace"},
		{"arm", "--backend", "perf", "--id", "../../etc/x"},
		{"arm", "--backend", "perf", "--ring-kb", "99999999999"},
		{"arm", "--backend", "perf", "--profile", "nope"},
		{"arm", "--backend", "bpftrace", "--script", "../x"},
	} {
		if out, err := captureCLI(t, p, bad...); err == nil {
			t.Errorf("capture %v succeeded:\n%s", bad, out)
		}
	}
	if out, _ := captureCLI(t, p, "list", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("bad requests left captures behind: %s", out)
	}

	out, err = captureCLI(t, p, "arm", "--id", "by-hand", "--backend", "perf", "--service", "shop",
		"--latency", "500ms", "--pre", "2s", "--post", "1s")
	if err != nil {
		t.Fatalf("arm: %v\n%s", err, out)
	}
	cl, err := client.New(client.Config{Addr: "unixgram://" + p.sock, Service: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	url, slowTID := serveApp(t, cl)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				if r, err := http.Get(url + "/fast"); err == nil {
					r.Body.Close()
				}
			}
		}
	}()
	time.Sleep(time.Second)
	if r, err := http.Get(url + "/slow"); err != nil {
		t.Fatal(err)
	} else {
		r.Body.Close()
	}
	outDir := filepath.Join(t.TempDir(), "by-hand")
	out, err = captureCLI(t, p, "collect", "by-hand", "--timeout", "30s", "--json", "--out", outDir)
	if err != nil {
		t.Fatalf("wait: %v\n%s", err, out)
	}
	var st control.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if st.State != control.Collected || st.Metadata == nil {
		t.Fatalf("capture ended %s (%s)", st.State, st.Error)
	}
	md := st.Metadata
	t.Logf("fire→dump %v through client → agent; %d files, %d bytes, lost %d", st.FireToDump, len(md.Files), md.Bytes, md.Lost)
	if md.Host != "test-node" || md.HWClass != "gen5" || md.Trigger.Kind != "latency" || md.Trigger.Service != "shop" {
		t.Errorf("metadata %+v", md)
	}
	if !strings.HasPrefix(st.Location, "file://") || len(st.Files) != len(md.Files) {
		t.Errorf("stored at %s with files %v", st.Location, st.Files)
	}
	for _, f := range md.Files {
		fi, err := os.Stat(filepath.Join(outDir, f.Name))
		if err != nil || fi.Size() != f.Bytes {
			t.Errorf("downloaded %s: %v", f.Name, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(outDir, md.Requests))
	if err != nil {
		t.Fatal(err)
	}
	var slow bool
	for line := range strings.Lines(string(b)) {
		var r struct {
			Endpoint  string  `json:"endpoint"`
			ThreadID  uint32  `json:"thread_id"`
			LatencyMS float64 `json:"latency_ms"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if r.Endpoint == "/slow" && r.ThreadID == *slowTID && r.LatencyMS >= 1000 {
			slow = true
		}
	}
	if !slow {
		t.Errorf("requests.jsonl lacks the slow request of thread %d", *slowTID)
	}
	if out, _ := captureCLI(t, p, "fire", "by-hand"); !strings.Contains(out, "not Armed") {
		t.Errorf("firing a collected capture: %s", out)
	}
}

// serveApp is an HTTP app that reports each request through cl with its
// thread id; /slow blocks its thread for 1 s.
func serveApp(t *testing.T, cl *client.Client) (string, *uint32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	slowTID := new(uint32)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		runtime.LockOSThread()
		tid := uint32(unix.Gettid())
		if r.URL.Path == "/slow" {
			*slowTID = tid
			ts := unix.NsecToTimespec(int64(time.Second))
			for unix.Nanosleep(&ts, &ts) == unix.EINTR {
			}
		}
		runtime.UnlockOSThread()
		w.Write([]byte("ok\n"))
		cl.Record(r.URL.Path, time.Since(start), "200", [16]byte{}, tid)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), slowTID
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal("condition not met in 10s")
}
