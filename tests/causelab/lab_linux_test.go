package causelab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/cli/query"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
	"github.com/spikehunt/spikehunt/pipelines/services/ingest"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "shop":
		os.Exit(shopMain())
	case "burn":
		os.Exit(burnMain())
	case "flood":
		os.Exit(floodMain())
	}
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// labEnv turns the lab on: it takes a quarter of an hour of this machine's
// CPUs, cgroups and kernel, so `go test ./...` (make test) skips it and
// `make causes` sets it.
const labEnv = "SPIKEHUNT_CAUSELAB"

// The lab's rhythm.
const (
	loadRate    = 100              // requests per second to the app
	warmUp      = 40 * time.Second // quiet seconds before the first stall: the suspects' baseline
	armBefore   = 8 * time.Second  // the capture is armed this long before the first stall (its pre-window fills)
	stallEvery  = 20 * time.Second
	minStalls   = 3
	maxAttempts = 6
	stallBar    = 300 * time.Millisecond // a stall the load saw at least this slow counts
	trigger     = 250 * time.Millisecond // the capture fires on one request slower than this
	settle      = 8 * time.Second        // after the last stall: the agent's export, the ingest's batch
)

// lab is what every case shares: the broker, the store, the ingest, and
// one agent on this host.
type lab struct {
	t       *testing.T
	host    string
	bin     string // this test binary, run again as the app and the hog
	tmp     string
	out     string // a tmpfs the lab mounts: its broker's log, its store, the captures, the backing of (f)'s devices
	st      *store.Embedded
	dsn     string
	otlp    string // the agent's OTLP/gRPC address
	ctl     *control.Client
	cgroups cgroupRoots
}

func TestCauses(t *testing.T) {
	if os.Getenv(labEnv) != "1" {
		// make test checks the lab's cases are whole; make causes (labEnv=1)
		// runs them, which takes a quarter of an hour of this kernel.
		checkCases(t)
		t.Logf("the cause lab's runs are make causes' (%s=1)", labEnv)
		return
	}
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "root (cgroups, perf, network namespaces)", fmt.Errorf("running as uid %d", os.Geteuid()))
	}
	if _, err := exec.LookPath("perf"); err != nil {
		testenv.RequirePrivileged(t, "perf", err)
	}
	roots, err := findCgroupRoots()
	if err != nil {
		testenv.RequirePrivileged(t, "cgroup v1 cpu, cpuacct, cpuset, memory and blkio controllers", err)
	}
	ctx := context.Background()
	l := &lab{t: t, tmp: t.TempDir(), cgroups: roots}
	// The lab's own writes — the broker's log, the store's parts, the
	// captures and the agent's spool — go to a tmpfs, not to this host's
	// disk, whose counters are suspects like any other: the lab must not
	// be the disk that moved with a stall.
	l.out = filepath.Join(l.tmp, "out")
	if err := os.Mkdir(l.out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", l.out, "tmpfs", 0, "size=4g,mode=0755"); err != nil {
		t.Fatalf("mount a tmpfs for the lab's own files: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(l.out, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", l.out, err)
		}
	})
	t.Setenv("TMPDIR", l.out)
	l.host, _ = os.Hostname()
	l.host = "causelab-" + l.host
	if l.bin, err = os.Executable(); err != nil {
		t.Fatal(err)
	}

	kafka := testenv.SharedKafka(t)
	run := time.Now().Unix()
	spans, metrics := fmt.Sprintf("causelab.spans.%d", run), fmt.Sprintf("causelab.metrics.%d", run)
	for _, topic := range []string{spans, metrics} {
		if err := kafka.CreateTopic(ctx, topic, 1); err != nil {
			t.Fatal(err)
		}
	}
	l.st = testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, l.st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	l.dsn = "chdb://" + testenv.ClickHouseDir() + "?database=" + l.st.Database()

	// The ingest, in process, from the real broker.
	in, err := ingest.New(ingest.Config{Brokers: kafka.Brokers(), Group: fmt.Sprintf("causelab-%d", run), SpansTopic: spans,
		MetricsTopic: metrics, DLQTopic: fmt.Sprintf("causelab.dlq.%d", run), MaxDelay: 500 * time.Millisecond},
		l.st, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	ictx, stopIngest := context.WithCancel(ctx)
	ingested := make(chan error, 1)
	go func() { ingested <- in.Run(ictx) }()
	t.Cleanup(func() {
		stopIngest()
		<-ingested
	})

	l.startAgent(kafka.Brokers(), spans, metrics)

	var results []result
	for _, c := range cases() {
		if only := os.Getenv("SPIKEHUNT_CAUSELAB_CASES"); only != "" && !slices.Contains(strings.Split(only, ","), c.name) {
			continue
		}
		var r result
		t.Run(c.name, func(t *testing.T) { r = l.runCase(t, c) })
		results = append(results, r)
	}
	report(t, results)
}

// startAgent builds spikehunt-agent and runs it on this host with its
// kernel samplers (the cgroup sampler on /sys/fs/cgroup), its OTLP/gRPC
// intake on loopback, perf captures, and Kafka export.
func (l *lab) startAgent(brokers []string, spans, metrics string) {
	t := l.t
	agent := filepath.Join(l.tmp, "spikehunt-agent")
	build := exec.Command("go", "build", "-o", agent, "./agents/cmd/spikehunt-agent")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build spikehunt-agent: %v\n%s", err, out)
	}
	port := freePort(t)
	l.otlp = fmt.Sprintf("127.0.0.1:%d", port)
	sock := filepath.Join(l.tmp, "capture.sock")
	cfg := fmt.Sprintf(`resource:
  host_name: %s
  hw_class: lab
collect:
  interval: 1s
  disk_ignore: '^(ram|fd)\d+$'
intake:
  otlp_grpc: %s
  otlp_http: ""
  line_udp: ""
  line_unix: ""
  trigger:
    cidrs: [127.0.0.1/32]
sink: kafka
kafka:
  brokers: [%s]
  traces_topic: %s
  metrics_topic: %s
spool:
  dir: %s
capture:
  enabled: true
  backends: [perf]
  dir: %s
  socket: %s
listen: 127.0.0.1:0
log_level: warn
`, l.host, l.otlp, strings.Join(brokers, ", "), spans, metrics, filepath.Join(l.out, "spool"), filepath.Join(l.out, "captures"), sock)
	cfgPath := filepath.Join(l.tmp, "agent.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(agent, "--config", cfgPath, "--capture.kube.enabled=false")
	out := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("spikehunt-agent's output:\n%s", out.String())
		}
	})
	l.ctl = control.NewClient(sock)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", l.otlp, time.Second)
		if err == nil {
			c.Close()
			if _, err := os.Stat(sock); err == nil {
				return
			}
		}
		select {
		case <-done:
			t.Fatalf("spikehunt-agent exited: %s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("spikehunt-agent did not open its OTLP port and control socket in 30 s: %s", out.String())
		}
	}
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// app is one case's app process.
type app struct {
	cmd  *exec.Cmd
	url  string
	addr string
	out  *testenv.SyncBuffer
	done chan struct{}
}

// startApp runs the case's app in its cgroups, reporting as service,
// listening with the case's backlog, in the case's network namespace when
// it has one.
func (l *lab) startApp(t *testing.T, service string, c *caseRun) *app {
	addrFile := filepath.Join(t.TempDir(), "addr")
	cmd := exec.Command(l.bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=shop", cgroupsEnv+"="+strings.Join(c.appCgroups, ":"), otlpEnv+"="+l.otlp,
		serviceEnv+"="+service, addrFileEnv+"="+addrFile, fmt.Sprintf("%s=%d", backlogEnv, c.backlog),
		netnsEnv+"="+c.netns, listenEnv+"="+c.listen)
	a := &app{cmd: cmd, out: &testenv.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = a.out, a.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-a.done
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			a.addr = string(b)
			a.url = "http://" + a.addr
			return a
		}
		select {
		case <-a.done:
			t.Fatalf("the app exited: %s", a.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app did not listen in 20 s: %s", a.out.String())
		}
	}
}

// burn runs the hog in cgroups: threads spinning for d. It returns when
// the hog has exited.
func (l *lab) burn(cgroups []string, threads int, d time.Duration) error {
	cmd := exec.Command(l.bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=burn", cgroupsEnv+"="+strings.Join(cgroups, ":"), fmt.Sprintf("%s=%d,%s", burnEnv, threads, d))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("burn: %v: %s", err, out)
	}
	return nil
}

// flood sends UDP datagrams to target from a process pinned to cpu for d.
// It returns when the flood has ended.
func (l *lab) flood(cpu int, target string, d time.Duration) error {
	cmd := exec.Command(l.bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=flood", fmt.Sprintf("%s=%d,%s,%s", floodEnv, cpu, target, d))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("flood: %v: %s", err, out)
	}
	return nil
}

// load is the open-loop load: rate requests per second to /fast, each
// stamped with its send time, their latencies as the client saw them kept.
type load struct {
	mu   sync.Mutex
	seen []sample
}

type sample struct {
	sent time.Time
	lat  time.Duration
}

func (ld *load) record(sent time.Time, lat time.Duration) {
	ld.mu.Lock()
	ld.seen = append(ld.seen, sample{sent, lat})
	ld.mu.Unlock()
}

// slow counts the requests sent in [from, to), and of them those at
// least bar slow.
func (ld *load) slow(from, to time.Time, bar time.Duration) (slow, all int) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	for _, s := range ld.seen {
		if !s.sent.Before(from) && s.sent.Before(to) {
			all++
			if s.lat >= bar {
				slow++
			}
		}
	}
	return slow, all
}

// worst is the slowest request sent in [from, to).
func (ld *load) worst(from, to time.Time) time.Duration {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	var w time.Duration
	for _, s := range ld.seen {
		if !s.sent.Before(from) && s.sent.Before(to) {
			w = max(w, s.lat)
		}
	}
	return w
}

func (ld *load) run(ctx context.Context, base string, rate int) {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxIdleConns: 512}}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			wg.Add(1)
			go func() {
				defer wg.Done()
				ld.get(ctx, client, base+"/fast")
			}()
		}
	}
}

// get sends one stamped request and records it.
func (ld *load) get(ctx context.Context, client *http.Client, u string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	sent := time.Now()
	req.Header.Set(requestStartHeader, fmt.Sprint(sent.UnixNano()))
	resp, err := client.Do(req)
	if err != nil {
		return
	}
	resp.Body.Close()
	ld.record(sent, time.Since(sent))
}

// stall is one induced stall: when the lab began and ended inducing it,
// and the slowest request the load saw around it.
type stall struct {
	from, to time.Time
	worst    time.Duration
}

// result is one case's outcome.
type result struct {
	name, letter        string
	stalls              int // stalls the load saw at ≥ stallBar
	windows             int // of those, the ones a spike window of the lab's host overlaps
	patterns            []string
	top1                string // the family top in most of the case's windows, as `spikehunt suspects` labels it
	top1OK              bool
	verdict             string
	verdictOK           bool
	toVerdict           time.Duration // first stall to the capture's verdict; 0 without one
	cgroupSeen          bool          // the agent's cgroup sampler reported the app's cgroup
	note                string
	suspectsOut, patOut string
}

// runCase runs one cause: its app, the load, the armed capture, the
// stalls, then the detector and the CLI over the case's seconds.
func (l *lab) runCase(t *testing.T, c labCase) result {
	r := result{name: c.name, letter: c.letter}
	ctx := context.Background()
	service := "shop-" + c.name
	run := &caseRun{lab: l, t: t, name: c.name}
	if err := c.setup(run); err != nil {
		r.note = "setup: " + err.Error()
		t.Error(r.note)
		return r
	}
	a := l.startApp(t, service, run)
	run.app = a
	if c.afterStart != nil {
		if err := c.afterStart(run); err != nil {
			r.note = "after start: " + err.Error()
			t.Error(r.note)
			return r
		}
	}
	began := time.Now()
	ld := &load{}
	run.load = ld
	lctx, stopLoad := context.WithCancel(ctx)
	loaded := make(chan struct{})
	go func() { defer close(loaded); ld.run(lctx, a.url, loadRate) }()
	defer func() { stopLoad(); <-loaded }()

	time.Sleep(warmUp - armBefore)
	id := fmt.Sprintf("causelab-%s-%d", c.name, time.Now().Unix())
	arm := control.ArmRequest{ID: id, Backend: "perf", Pre: "5s", Post: "1s", Service: service, Latency: trigger.String()}
	var armed control.Status
	if err := l.ctl.Do(ctx, http.MethodPost, "/v1/captures", arm, &armed); err != nil {
		r.note = "arm perf: " + err.Error()
		t.Error(r.note)
	}
	verdictAt := make(chan control.Status, 1)
	go func() {
		var done control.Status
		wait := "/v1/captures/" + url.PathEscape(id) + "/wait?timeout=" + (4 * time.Minute).String()
		if err := l.ctl.Do(ctx, http.MethodGet, wait, nil, &done); err != nil {
			done.Error = err.Error()
		}
		verdictAt <- done
		close(verdictAt)
	}()
	verdictTime := time.Time{}
	var capStatus control.Status
	gotCapture := false
	pollCapture := func() {
		if gotCapture {
			return
		}
		select {
		case s := <-verdictAt:
			capStatus, gotCapture, verdictTime = s, true, time.Now()
		default:
		}
	}
	time.Sleep(armBefore)

	var stalls []stall
	first := time.Time{}
	for attempt := 0; attempt < maxAttempts && r.stalls < minStalls; attempt++ {
		if attempt > 0 {
			next := stalls[len(stalls)-1].from.Add(stallEvery)
			for time.Now().Before(next) {
				pollCapture()
				time.Sleep(100 * time.Millisecond)
			}
		}
		s := stall{from: time.Now()}
		if first.IsZero() {
			first = s.from
		}
		if err := c.induce(run); err != nil {
			// The lab could not induce the cause: a setup error, not a
			// miss of spikehunt's.
			r.note = fmt.Sprintf("induce stall %d: %v", attempt+1, err)
			t.Error(r.note)
			return r
		}
		s.to = time.Now()
		time.Sleep(2 * time.Second) // the requests queued behind it come back
		pollCapture()
		s.worst = ld.worst(s.from.Add(-time.Second), s.to.Add(time.Second))
		stalls = append(stalls, s)
		if s.worst >= stallBar {
			r.stalls++
		}
		select {
		case <-a.done:
			r.note = fmt.Sprintf("the app exited after stall %d (%v): %s", attempt+1, a.cmd.ProcessState, lastLines(a.out.String(), 3))
			t.Log(r.note)
		default:
		}
		if r.note != "" {
			break
		}
		n, all := ld.slow(s.from.Add(-time.Second), s.to.Add(time.Second), stallBar)
		t.Logf("stall %d: induced %s–%s, slowest request %v; %d of the %d requests sent then took %v or more", attempt+1,
			s.from.Format("15:04:05.000"), s.to.Format("15:04:05.000"), s.worst.Round(time.Millisecond), n, all, stallBar)
	}
	time.Sleep(settle)
	stopLoad()
	<-loaded

	// The capture's verdict.
	if !gotCapture {
		select {
		case s := <-verdictAt:
			capStatus, gotCapture, verdictTime = s, true, time.Now()
		case <-time.After(30 * time.Second):
			l.ctl.Do(ctx, http.MethodDelete, "/v1/captures/"+url.PathEscape(id), nil, nil)
			t.Logf("capture %s: no verdict 30 s after the last stall", id)
		}
	}
	if gotCapture {
		switch {
		case capStatus.Metadata != nil && capStatus.Metadata.Findings != nil && capStatus.Metadata.Findings.Verdict != "":
			r.verdict = capStatus.Metadata.Findings.Verdict
			r.toVerdict = verdictTime.Sub(first)
		default:
			r.verdict = fmt.Sprintf("(no verdict: capture %s, %s)", capStatus.State, capStatus.Error)
		}
		if capStatus.State != control.Collected {
			l.ctl.Do(ctx, http.MethodDelete, "/v1/captures/"+url.PathEscape(id), nil, nil)
		}
	}
	r.verdictOK = c.verdictNames(run, r.verdict)

	// The detector over the case's seconds, then the CLI.
	to := time.Now().Add(-time.Second).Truncate(time.Second)
	pass, err := detect.Pass(ctx, l.st, detect.Config{Service: service, From: began.Add(-5 * time.Second).Truncate(time.Second), To: to})
	if err != nil {
		r.note = "detect: " + err.Error()
		t.Error(r.note)
		return r
	}
	var windows []detect.SpikeWindow
	for _, w := range pass.Spikes {
		if w.Host == l.host && w.Service == service {
			windows = append(windows, w)
		}
	}
	// Each induced stall the load saw is judged by the first window that
	// overlaps it; a window that overlaps none is the machine's own.
	slices.SortFunc(windows, func(a, b detect.SpikeWindow) int { return a.Start.Compare(b.Start) })
	var j judged
	used := map[string]bool{}
	for _, s := range stalls {
		if s.worst < stallBar {
			continue
		}
		id := ""
		for _, w := range windows {
			if w.Start.Before(s.to.Add(2*time.Second)) && w.End.After(s.from.Add(-time.Second)) {
				id = w.ID
				break
			}
		}
		for _, w := range windows {
			if w.Start.Before(s.to.Add(2*time.Second)) && w.End.After(s.from.Add(-time.Second)) {
				used[w.ID] = true
			}
		}
		if id != "" {
			r.windows++
		}
		j.stalls = append(j.stalls, id)
	}
	for _, w := range windows {
		if !used[w.ID] {
			j.others = append(j.others, w.ID)
		}
	}
	for _, p := range pass.Patterns {
		if p.Service == service {
			r.patterns = append(r.patterns, fmt.Sprintf("%s (%d of %d hosts, every %v)", p.Class, p.HostsAffected, p.HostsTotal, p.RecurrenceInterval.Round(time.Second)))
		}
	}
	rng := []string{"--dsn", l.dsn, "--service", service, "--from", began.Add(-5 * time.Second).UTC().Format(time.RFC3339), "--to", time.Now().Add(time.Minute).UTC().Format(time.RFC3339)}
	var out, errb bytes.Buffer
	if err := query.Suspects(ctx, append(slices.Clone(rng), "-o", "json", "--limit", "0"), &out, &errb); err != nil {
		t.Errorf("spikehunt suspects: %v: %s", err, errb.String())
	}
	var rows struct {
		Rows []suspectRow `json:"rows"`
	}
	json.Unmarshal(out.Bytes(), &rows)
	r.top1, r.top1OK = c.judgeSuspects(run, rows.Rows, j)
	out.Reset()
	query.Suspects(ctx, rng, &out, &errb)
	r.suspectsOut = out.String()
	out.Reset()
	query.Patterns(ctx, rng, &out, &errb)
	r.patOut = out.String()

	var n int
	tab, err := store.Select(ctx, l.st, fmt.Sprintf("SELECT count() FROM counters WHERE host = %s AND startsWith(metric, 'spikehunt.cgroup.') AND device = %s",
		store.QuoteString(l.host), store.QuoteString(run.unit)))
	if err == nil && len(tab.Rows) > 0 {
		fmt.Sscan(tab.Rows[0][0], &n)
	}
	r.cgroupSeen = n > 0
	t.Logf("%s: %d stalls ≥ %v, %d with a spike window; patterns %v", c.name, r.stalls, stallBar, r.windows, r.patterns)
	t.Logf("%s: top-1 suspect: %s (names the cause: %v)", c.name, r.top1, r.top1OK)
	t.Logf("%s: verdict: %s (names the cause: %v; %.1f s after the first stall)", c.name, r.verdict, r.verdictOK, r.toVerdict.Seconds())
	t.Logf("%s: the agent's cgroup sampler reported %s: %v (%d rows)", c.name, run.unit, r.cgroupSeen, n)
	t.Logf("spikehunt suspects:\n%s", r.suspectsOut)
	t.Logf("spikehunt patterns:\n%s", r.patOut)
	return r
}

// suspectRow is a row of `spikehunt suspects -o json`.
type suspectRow struct {
	SpikeID   string  `json:"spike_id"`
	Rank      int     `json:"rank"`
	Metric    string  `json:"metric"`
	Mode      string  `json:"mode"`
	Device    string  `json:"device"`
	CPU       int     `json:"cpu"`
	Baseline  float64 `json:"baseline"`
	During    float64 `json:"during"`
	Deviation float64 `json:"deviation"`
}

// topFamily is the rank-1 family of most of the windows, and in how many
// windows it was first.
func topFamily(rows []suspectRow) (suspectRow, int) {
	count := map[string]int{}
	first := map[string]suspectRow{}
	for _, x := range rows {
		if x.Rank != 1 {
			continue
		}
		k := x.Metric + "|" + x.Mode + "|" + x.Device
		count[k]++
		if _, ok := first[k]; !ok {
			first[k] = x
		}
	}
	best, n := "", 0
	for k, c := range count {
		if c > n || c == n && k < best {
			best, n = k, c
		}
	}
	return first[best], n
}

// report prints the BENCH lines and the table of the cases.
func report(t *testing.T, results []result) {
	if len(results) == 0 {
		return
	}
	var top1, verdicts int
	var b strings.Builder
	fmt.Fprintf(&b, "| case | stalls ≥ 300 ms | with a spike window | pattern | top-1 suspect | names it | capture verdict | names it | first stall → verdict |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if r.top1OK {
			top1++
		}
		if r.verdictOK {
			verdicts++
		}
		pat := "none"
		if len(r.patterns) > 0 {
			pat = strings.Join(r.patterns, "; ")
		}
		secs := "–"
		if r.toVerdict > 0 {
			secs = fmt.Sprintf("%.1f s", r.toVerdict.Seconds())
		}
		fmt.Fprintf(&b, "| (%s) %s | %d | %d | %s | %s | %v | %s | %v | %s |\n", r.letter, r.name, r.stalls, r.windows, pat,
			strings.ReplaceAll(r.top1, "|", "/"), yes(r.top1OK), strings.ReplaceAll(r.verdict, "|", "/"), yes(r.verdictOK), secs)
	}
	t.Logf("the cases:\n%s", b.String())
	fmt.Printf("BENCH causes.suspect_top1_share %.2f share\n", float64(top1)/float64(len(results)))
	fmt.Printf("BENCH causes.verdict_share %.2f share\n", float64(verdicts)/float64(len(results)))
	// The first stall to the capture's verdict, for every case run; a
	// case without a verdict says so instead of a number.
	for _, r := range results {
		if r.toVerdict > 0 {
			fmt.Printf("BENCH causes.%s_s %.1f s\n", r.name, r.toVerdict.Seconds())
		} else {
			fmt.Printf("BENCH causes.%s_s n/a s (no verdict)\n", r.name)
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// checkCases: the seven cases (a)–(g), each able to induce its cause and
// judge the suspects and the verdict.
func checkCases(t *testing.T) {
	t.Helper()
	var letters []string
	for _, c := range cases() {
		letters = append(letters, c.letter)
		if c.name == "" || c.induce == nil || c.judgeSuspects == nil || c.verdictNames == nil {
			t.Errorf("case %q (%s) lacks its name, induction or judges", c.name, c.letter)
		}
	}
	if got := strings.Join(letters, ","); got != "a,b,c,d,e,f,g" {
		t.Errorf("cases %s, want a–g", got)
	}
}
