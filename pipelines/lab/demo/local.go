package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/spikehunt/spikehunt/agents/client"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/internal/captures"
	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/pipelines/cli/artifacts"
	"github.com/spikehunt/spikehunt/pipelines/cli/query"
	"github.com/spikehunt/spikehunt/pipelines/lab/htmlreport"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
	"github.com/spikehunt/spikehunt/pipelines/services/ingest"
)

// The local capture: where the machine allows it, this host joins the
// simulated fleet as one more node, in a hardware class of its own, so that
// the stratified sample gives it bait like any class. Its arming goes
// through the same decision as the simulated nodes'; the demo then does on
// this host what the operator and the agent do on a node:
//
//   - runs spikehunt-agent with perf captures, its line-protocol intake on a
//     unix socket, and Kafka at an unreachable broker (the agent spools);
//   - arms perf over the agent's control socket (HTTP JSON on a unix socket,
//     the API behind `spikehunt-agent capture`), fired by the agent's own
//     latency stream;
//   - runs a small workload whose one request blocks its thread for a
//     second, reporting every request to the agent over the line protocol
//     and putting the same requests into the store through the ingest, as
//     the simulator does, under this host's name;
//   - waits for the capture, runs the spike detector over those seconds,
//     and indexes the capture (internal/captures, as the operator does),
//     linked to the spike windows it overlaps.
//
// Everything it starts it stops: the agent gets SIGINT (then SIGKILL), its
// sockets go with a temporary directory. The artifact stays in a captures
// folder beside the store, where the row's uri points.

// localHWClass is the hardware class this host joins the fleet with: not
// the simulated hosts' hardware, so a class of its own.
const localHWClass = "local"

// Timings of the local run, kept short: the demo must stay within minutes.
const (
	localPre      = 3 * time.Second // the capture's window before the fire
	localPost     = time.Second     // and after
	localBefore   = 2 * time.Second // workload before the stall
	localAfter    = time.Second     // and after it
	localStall    = time.Second     // how long the slow request blocks its thread
	localInterval = 40 * time.Millisecond
	localWork     = time.Millisecond // a fast request's own time
	localTimeout  = 40 * time.Second // the whole local run, agent start to index
)

// localHost is this machine when it can run a real capture.
type localHost struct {
	name  string // host name, the store's host
	agent string // the spikehunt-agent binary
}

// findLocalHost says whether this machine can run a real perf capture and,
// when it cannot, why not in a few words.
func findLocalHost(agentFlag string) (localHost, string) {
	if runtime.GOOS != "linux" {
		return localHost{}, "perf captures need Linux"
	}
	if os.Geteuid() != 0 {
		return localHost{}, "not root (perf captures need root)"
	}
	if _, err := exec.LookPath("perf"); err != nil {
		return localHost{}, "no perf on PATH (install linux-tools, or perf from your distribution)"
	}
	agent := agentFlag
	if agent == "" {
		exe, err := os.Executable()
		if err != nil {
			return localHost{}, "no spikehunt-agent: cannot locate this binary (" + err.Error() + "); give --agent"
		}
		agent = filepath.Join(filepath.Dir(exe), "spikehunt-agent")
	}
	if fi, err := os.Stat(agent); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return localHost{}, fmt.Sprintf("no spikehunt-agent binary at %s (make build puts it beside spikehunt; or give --agent)", agent)
	}
	name, err := os.Hostname()
	if err != nil || name == "" {
		return localHost{}, fmt.Sprintf("no host name: %v", err)
	}
	return localHost{name: name, agent: agent}, ""
}

// localCapture is what the local run produced: the capture as indexed.
type localCapture struct {
	ID                     string
	Host                   string
	Backend, Profile       string
	WindowStart, WindowEnd time.Time
	Bytes                  uint64
	Lost                   uint64 // lost + overrun events
	URI                    string
	Trigger                string
	FireToDump             time.Duration
	SpikeIDs               []string
	Requests               int
	// Verdict is the analysis's verdict on the slowest request, made by
	// the agent from perf's trace ("" when the recorder made none).
	Verdict string
}

// localCaptureID is the local capture's id: the Capture's name is the
// arming's (name); one run of the demo is one arming, and the demo keeps
// no policy state between runs, so the run's start keeps two runs in the
// same hour apart.
func localCaptureID(name string, start time.Time) string {
	return fmt.Sprintf("%s.%d", name, start.Unix())
}

// runLocalCapture arms perf on this host for arming a, runs the workload,
// and indexes the capture in st. dir keeps the artifacts. step reports
// progress.
func runLocalCapture(ctx context.Context, st store.Store, service string, h localHost, a policy.Arming, trigger time.Duration, dir string,
	step func(string, ...any)) (localCapture, error) {
	ctx, cancel := context.WithTimeout(ctx, localTimeout)
	defer cancel()
	tmp, err := os.MkdirTemp("", "spikehunt-demo-")
	if err != nil {
		return localCapture{}, err
	}
	defer os.RemoveAll(tmp)
	ag, err := startLocalAgent(ctx, h, tmp, dir)
	if err != nil {
		return localCapture{}, err
	}
	defer ag.stop()
	step("local capture: spikehunt-agent %d is up on %s; arming perf", ag.cmd.Process.Pid, h.name)

	id := localCaptureID(a.Name, time.Now())
	arm := control.ArmRequest{ID: id, Backend: "perf", Pre: localPre.String(), Post: localPost.String(),
		Service: service, Latency: trigger.String()}
	var st0 control.Status
	if err := ag.ctl.Do(ctx, http.MethodPost, "/v1/captures", arm, &st0); err != nil {
		return localCapture{}, fmt.Errorf("arm perf: %w", err)
	}

	step("local capture: %s armed; a request of the workload blocks its thread for %s", id, localStall)
	reqs, err := runLocalWorkload(ctx, service, filepath.Join(tmp, "line.sock"))
	if err != nil {
		return localCapture{}, err
	}
	var done control.Status
	wait := "/v1/captures/" + url.PathEscape(id) + "/wait?timeout=" + (localPost + 15*time.Second).String()
	if err := ag.ctl.Do(ctx, http.MethodGet, wait, nil, &done); err != nil {
		return localCapture{}, fmt.Errorf("wait for capture %s: %w", id, err)
	}
	if done.State != control.Collected || done.Metadata == nil {
		return localCapture{}, fmt.Errorf("capture %s ended %s: %s", id, done.State, done.Error)
	}
	md := done.Metadata
	go ag.stop() // nothing is armed now: let it stop while the demo indexes

	res := telemetry.Resource{HostName: h.name, NodeName: h.name, HWClass: localHWClass}
	if err := ingestLocal(ctx, st, res, reqs); err != nil {
		return localCapture{}, err
	}
	step("local capture: collected %d bytes; %d requests ingested; detecting", md.Bytes, len(reqs))
	from := reqs[0].Start.Add(-5 * time.Second)
	pass, err := detect.Pass(ctx, st, detect.Config{Service: service, From: from, To: time.Now().Add(time.Second),
		// A short pad keeps the pass on this host's seconds: the fleet's
		// rows, an hour or more older, are neither read nor rewritten.
		Spikes:   detect.SpikeConfig{Pad: 30 * time.Second},
		Patterns: detect.PatternConfig{Lookback: 10 * time.Minute}})
	if err != nil {
		return localCapture{}, err
	}
	if err := retractPatternsAt(ctx, st, service, pass.To, pass.DetectedAt); err != nil {
		return localCapture{}, err
	}
	step("local capture: detected %d spike windows in %s; indexing", len(pass.Spikes), pass.Timing.Total.Round(time.Millisecond))

	c := localCapture{ID: id, Host: md.Host, Backend: md.Backend, Profile: md.Profile,
		WindowStart: md.WindowStart.UTC().Truncate(time.Millisecond), WindowEnd: md.WindowEnd.UTC().Truncate(time.Millisecond),
		Bytes: uint64(max(md.Bytes, 0)), Lost: md.Lost + md.Overruns, URI: done.Location,
		Trigger: fmt.Sprintf("%s: %s > %s", md.Trigger.Kind, service, trigger), FireToDump: done.FireToDump, Requests: len(reqs)}
	if md.Trigger.Kind != "latency" {
		c.Trigger = md.Trigger.Kind
	}
	if c.URI == "" && len(done.Files) > 0 {
		c.URI = done.Files[0]
	}
	var findings *captures.Findings
	if f := md.Findings; f != nil {
		findings = &captures.Findings{Verdict: f.Verdict, BlockingStack: f.BlockingStack,
			HottestCPU: int16(min(max(f.HottestCPU, -1), 1<<15-1)), SoftirqShare: float32(f.SoftirqShare)}
		c.Verdict = f.Verdict
	}
	c.SpikeIDs, err = captures.Index(ctx, st, captures.Capture{ID: c.ID, Host: c.Host, Node: c.Host, Findings: findings,
		Backend: c.Backend, Profile: c.Profile, WindowStart: c.WindowStart, WindowEnd: c.WindowEnd, Trigger: c.Trigger,
		URI: c.URI, Bytes: c.Bytes, LostEvents: c.Lost, Checksum: md.Checksum})
	if err != nil {
		return c, err
	}
	return c, nil
}

// localAgent is a spikehunt-agent child process.
type localAgent struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	ctl  *control.Client
	done chan struct{} // closed when the process has exited
	once sync.Once
}

// startLocalAgent starts spikehunt-agent with perf captures into dir and
// its sockets in tmp, and waits until both sockets are there.
func startLocalAgent(ctx context.Context, h localHost, tmp, dir string) (*localAgent, error) {
	capSock, lineSock := filepath.Join(tmp, "capture.sock"), filepath.Join(tmp, "line.sock")
	cmd := exec.Command(h.agent,
		"--host-name", h.name, "--hw-class", localHWClass,
		"--capture.backends", "perf", "--capture.dir", dir, "--capture.socket", capSock, "--capture.kube.enabled=false",
		"--intake.line-unix", lineSock, "--intake.line-udp", "", "--intake.otlp-grpc", "", "--intake.otlp-http", "",
		// Nothing listens there: the agent spools what it would export.
		"--sink", "kafka", "--kafka.brokers", "127.0.0.1:1", "--spool.dir", filepath.Join(tmp, "spool"),
		"--listen", "127.0.0.1:0", "--log-level", "warn")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", h.agent, err)
	}
	ag := &localAgent{cmd: cmd, out: out, done: make(chan struct{}), ctl: control.NewClient(capSock)}
	go func() { cmd.Wait(); close(ag.done) }()
	for {
		_, e1 := os.Stat(capSock)
		_, e2 := os.Stat(lineSock)
		if e1 == nil && e2 == nil {
			return ag, nil
		}
		select {
		case <-ag.done:
			return nil, fmt.Errorf("spikehunt-agent exited: %s", ag.tail())
		case <-ctx.Done():
			ag.stop()
			return nil, fmt.Errorf("spikehunt-agent did not open its sockets: %w; %s", ctx.Err(), ag.tail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop ends the agent and returns once it has exited: SIGINT, which
// disarms what is armed, then SIGKILL after 2 s. A graceful stop would go
// on trying the unreachable Kafka for seconds more, for a spool that goes
// with the temporary directory; the recorder (perf) dies with the agent
// (its parent-death signal). Safe to call more than once, concurrently.
func (ag *localAgent) stop() {
	ag.once.Do(func() {
		ag.cmd.Process.Signal(os.Interrupt)
		select {
		case <-ag.done:
		case <-time.After(2 * time.Second):
			ag.cmd.Process.Kill()
		}
	})
	<-ag.done
}

// tail is the agent's last lines of output, for an error.
func (ag *localAgent) tail() string {
	lines := strings.Split(strings.TrimSpace(ag.out.String()), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], " | ")
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runLocalWorkload serves requests arriving every localInterval on one
// thread for localBefore + localStall + localAfter; the request arriving at
// localBefore blocks the thread for localStall, and those arriving behind
// it wait. Each request is reported to the agent at lineSock over the line
// protocol (agents/client, as an app does) and returned, timed from its
// arrival, for the store.
func runLocalWorkload(ctx context.Context, service, lineSock string) ([]telemetry.Request, error) {
	cl, err := client.New(client.Config{Addr: "unixgram://" + lineSock, Service: service})
	if err != nil {
		return nil, err
	}
	arrivals := make(chan time.Time, 1024)
	served := make(chan []telemetry.Request, 1)
	start := time.Now()
	stallAt, end := start.Add(localBefore), start.Add(localBefore+localStall+localAfter)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid := threadID()
		var reqs []telemetry.Request
		stalled := false
		for at := range arrivals {
			endpoint, work := "/v1/cart", localWork
			if !stalled && !at.Before(stallAt) {
				endpoint, work, stalled = "/v1/orders/save", localStall, true
			}
			blockThread(work)
			lat := time.Since(at)
			cl.Record(endpoint, lat, "200", [16]byte{}, tid)
			reqs = append(reqs, telemetry.Request{Service: service, Endpoint: endpoint, Start: at, Duration: lat,
				Status: "200", ThreadID: tid, Weight: 1})
		}
		served <- reqs
	}()
	tick := time.NewTicker(localInterval)
	for now := start; now.Before(end) && ctx.Err() == nil; now = <-tick.C {
		arrivals <- now
	}
	tick.Stop()
	close(arrivals)
	reqs := <-served
	cl.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if n := cl.Dropped(); n > 0 {
		return nil, fmt.Errorf("the line protocol client dropped %d of %d requests (is the agent's intake up?)", n, len(reqs))
	}
	return reqs, nil
}

// ingestLocal puts reqs into st the way sim.Load puts the simulated
// agents' messages: encoded with the agent's encoder, produced keyed by
// host into the in-process source, inserted by the ingester.
func ingestLocal(ctx context.Context, st store.Store, res telemetry.Resource, reqs []telemetry.Request) error {
	msg, err := otlpwire.EncodeSpans(res, reqs)
	if err != nil {
		return err
	}
	src := ingest.NewMemorySource(1)
	in, err := ingest.NewWithMemory(ingest.Config{Group: fmt.Sprintf("demo-local-%d", time.Now().UnixNano()), MaxDelay: 100 * time.Millisecond},
		st, src, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- in.Run(ictx) }()
	if err := (&sim.MemorySink{Source: src}).Send(ctx, sim.Spans, res.HostName, msg); err != nil {
		return err
	}
	for src.Lag() > 0 {
		select {
		case err := <-ran:
			return fmt.Errorf("ingest the local requests: stopped with %d messages left: %v", src.Lag(), err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	if err := <-ran; err != nil {
		return fmt.Errorf("ingest the local requests: %w", err)
	}
	if dl := src.DeadLetters(); len(dl) > 0 {
		return fmt.Errorf("ingest the local requests: dead-lettered: %s: %s", dl[0].Reason, dl[0].Detail)
	}
	return nil
}

// localArming finds the host's arming in d, or says why there is none.
func localArming(d policy.Decision, host string) (policy.Arming, error) {
	for _, a := range d.Create {
		if a.Node == host {
			return a, nil
		}
	}
	for _, r := range d.Refused {
		if r.Node == host {
			return policy.Arming{}, fmt.Errorf("the budgets refused its arming (%s)", r.Reason)
		}
	}
	return policy.Arming{}, errors.New("the policy did not choose it this hour")
}

// localCaptureSection runs the local capture when the machine allows it
// (notLocal empty) and h's arming is in d, and words the outcome. A local
// capture that fails says why and does not fail the demo.
func localCaptureSection(ctx context.Context, st store.Store, service string, h localHost, notLocal string, d policy.Decision,
	trigger time.Duration, dir, dsn string, step func(string, ...any)) section {
	const title = "A real capture on this machine"
	if notLocal != "" {
		return section{title: title, summary: "skipped, " + notLocal + "."}
	}
	a, err := localArming(d, h.name)
	if err != nil {
		return section{title: title, summary: fmt.Sprintf("skipped, %s: %v.", h.name, err)}
	}
	began := time.Now()
	c, err := runLocalCapture(ctx, st, service, h, a, trigger, dir, step)
	if err != nil {
		step("local capture failed after %.1fs: %v", time.Since(began).Seconds(), err)
		return section{title: title, summary: fmt.Sprintf("failed, %v.", err)}
	}
	step("local capture done in %.1fs", time.Since(began).Seconds())
	linked := "linked to no spike (the detector found none in its window)"
	switch len(c.SpikeIDs) {
	case 0:
	case 1:
		linked = "linked to spike " + c.SpikeIDs[0]
	default:
		linked = "linked to spikes " + query.AndList(c.SpikeIDs)
	}
	out := section{title: title, paras: []paragraph{
		para(fmt.Sprintf("%s joined the fleet as the one node of hw class %q, so the sample baited it (Capture %s).", h.name, localHWClass, a.Name)),
		para(fmt.Sprintf("spikehunt-agent ran perf; one of %d requests of a local %s workload blocked its thread for %s,", c.Requests, service, query.SpokenDuration(localStall)),
			fmt.Sprintf("the agent fired on it (%s; the pre-window on disk %s later), and the detector found the spike", c.Trigger, c.FireToDump.Round(time.Millisecond)),
			"in the same requests, ingested as the simulated hosts' are:",
			fmt.Sprintf("captured on %s: %s, %d bytes, lost %d, window %s–%s UTC, %s.", c.Host, c.Backend, c.Bytes, c.Lost,
				c.WindowStart.Format("15:04:05.000"), c.WindowEnd.Format("15:04:05.000"), linked)),
		para(fmt.Sprintf("Artifact: %s", c.URI)),
	}}
	if c.Verdict != "" {
		out.paras = append(out.paras, para("The agent's analysis of the stalled request, made from perf's trace on this host:", c.Verdict))
		out.drawings = captureDrawings(ctx, c.URI, step)
	}
	if len(c.SpikeIDs) > 0 {
		out.paras = append(out.paras, para(fmt.Sprintf("spikehunt captures --dsn '%s' --spike %s", dsn, c.SpikeIDs[0])))
	}
	out.paras = append(out.paras, para(fmt.Sprintf("spikehunt captures get %s --dsn '%s'   # the files, sha256 checked", c.ID, dsn)))
	if c.Verdict != "" {
		out.paras = append(out.paras, para(fmt.Sprintf("spikehunt captures explain %s --dsn '%s' --html capture.html   # the analysis in full, and its page", c.ID, dsn)))
	}
	return out
}

// forgetLocalRows deletes host's requests of service in [from, to), and
// their latency_1s and latency_1m rollups: a local capture of an earlier run, an hour or
// more ago, falls into a later run's simulated hours, where this host would
// count as one more host of the simulated fleet. The detector pass over
// those hours then retracts its spike windows; the captures rows stay.
func forgetLocalRows(ctx context.Context, st store.Store, service, host string, from, to time.Time) error {
	cond := fmt.Sprintf("service = %s AND host = %s AND ts >= toDateTime(%d) AND ts < toDateTime(%d)",
		store.QuoteString(service), store.QuoteString(host), from.Unix(), to.Unix())
	tab, err := store.Select(ctx, st, "SELECT count() FROM latency_1s WHERE "+cond)
	if err != nil || len(tab.Rows) == 0 || tab.Rows[0][0] == "0" {
		return err
	}
	for _, table := range []string{"requests", "latency_1s", "latency_1m"} {
		if err := st.Exec(ctx, "DELETE FROM "+table+" WHERE "+cond); err != nil {
			return fmt.Errorf("demo: remove this host's earlier local requests from the simulated hours: %w", err)
		}
	}
	return nil
}

// retractPatternsAt retracts the pattern rows of service whose look-back
// ends at end, written by the pass stamped at stamp. The local pass runs
// only for this host's spike windows; its patterns, over the ten minutes
// before it, would see the simulated fleet's last minutes, which all end
// at once, as a synchronized burst, and a later run's simulated hours
// would show that pattern beside the fleet's. Like the detector's own
// retraction: the row again, is_deleted = 1, a newer detected_at.
func retractPatternsAt(ctx context.Context, st store.Store, service string, end, stamp time.Time) error {
	ms := func(t time.Time) string {
		return fmt.Sprintf("fromUnixTimestamp64Milli(toInt64(%d), 'UTC')", t.UnixMilli())
	}
	q := fmt.Sprintf(`INSERT INTO patterns (pattern_id, service, class, modifiers, lookback_start, lookback_end, hosts_affected, hosts_total,
		recurrence_interval_s, regularity, synchronicity, hw_class_skew, illusion_share, suspects, detector_version, detected_at, is_deleted)
	SELECT pattern_id, service, class, modifiers, lookback_start, lookback_end, hosts_affected, hosts_total,
		recurrence_interval_s, regularity, synchronicity, hw_class_skew, illusion_share, suspects, detector_version, %s, 1
	FROM patterns FINAL WHERE service = %s AND lookback_end = %s AND is_deleted = 0`,
		ms(stamp.Add(time.Millisecond)), store.QuoteString(service), ms(end))
	if err := st.Exec(ctx, q); err != nil {
		return fmt.Errorf("retract the local pass's patterns: %w", err)
	}
	return nil
}

// captureDrawings are the report's plots of the local capture's analysis:
// the stalled request's thread timeline and the window's flame graph,
// read back from the artifact as spikehunt captures explain reads it.
func captureDrawings(ctx context.Context, uri string, step func(string, ...any)) []htmlreport.Drawing {
	a, folded, err := artifacts.ReadAnalysis(ctx, uri)
	if err != nil {
		step("local capture: the analysis does not read back: %v", err)
		return nil
	}
	var out []htmlreport.Drawing
	if len(a.Requests) > 0 {
		v := a.Requests[0]
		out = append(out, htmlreport.Drawing{ID: "capture-timeline", SVG: template.HTML(artifacts.TimelineSVG(v, reportWidth)),
			Caption: fmt.Sprintf("The stalled request's thread, %s, over the request's %.0f ms: green on CPU, orange runnable (waiting for a CPU), blue blocked, grey no event; the axis is time since the request began.",
				v.Thread, v.Request.LatencyMS)})
	}
	if len(folded) > 0 {
		idle := ""
		if l := artifacts.IdleLine(folded); l != "" {
			idle = " " + strings.ToUpper(l[:1]) + l[1:] + "."
		}
		out = append(out, htmlreport.Drawing{ID: "capture-flame", SVG: template.HTML(artifacts.FlameSVG(folded, reportWidth)),
			Caption: fmt.Sprintf("On CPU on this host during the capture's window: the perf samples that were not idle, the task at the bottom and the innermost frame on top; a frame's width is its share of them, a grey … stands for callees too thin or too deep to draw.%s", idle)})
	}
	return out
}

// reportWidth is the width the report draws at.
const reportWidth = 900
