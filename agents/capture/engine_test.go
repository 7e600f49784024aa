package capture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// fileBackend is a recorder on our own interface that writes a file per
// Fire and Collect, so that the engine's rules can be tested without a
// kernel tracer. It records the specs it was given.
type fileBackend struct {
	mu    sync.Mutex
	specs []Spec
	armed int
	fail  string // "arm", "fire" or "collect" fails
}

func (b *fileBackend) Name() string { return Perf }
func (b *fileBackend) Check() error { return nil }
func (b *fileBackend) New(spec Spec, dir string) (Recorder, error) {
	b.mu.Lock()
	b.specs = append(b.specs, spec)
	b.mu.Unlock()
	return &fileRecorder{b: b, dir: dir}, nil
}

type fileRecorder struct {
	b     *fileBackend
	dir   string
	files []string
	live  bool
}

func (r *fileRecorder) Arm(context.Context) error {
	if r.b.fail == "arm" {
		return errors.New("arm failed")
	}
	r.b.mu.Lock()
	r.b.armed++
	r.b.mu.Unlock()
	r.live = true
	return nil
}

func (r *fileRecorder) write(name string) error {
	r.files = append(r.files, name)
	return os.WriteFile(filepath.Join(r.dir, name), []byte(name+"\n"), 0o640)
}

func (r *fileRecorder) Fire(context.Context) error {
	if r.b.fail == "fire" {
		return errors.New("fire failed")
	}
	return r.write("pre.txt")
}

func (r *fileRecorder) Collect(context.Context) (Result, error) {
	if r.b.fail == "collect" {
		return Result{}, errors.New("collect failed")
	}
	r.Disarm()
	return Result{Files: r.files, Lost: 3}, r.write("post.txt")
}

func (r *fileRecorder) Disarm() error {
	if r.live {
		r.live = false
		r.b.mu.Lock()
		r.b.armed--
		r.b.mu.Unlock()
	}
	return nil
}

func newTestEngine(t *testing.T, b Backend, mod func(*EngineConfig)) *Engine {
	t.Helper()
	cfg := EngineConfig{Dir: t.TempDir(), Backends: []Backend{b}, Resource: HostIdentity{Host: "h1", HWClass: "gen5"}}
	if mod != nil {
		mod(&cfg)
	}
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func req(service, endpoint string, end time.Time, d time.Duration, tid uint32) *telemetry.Request {
	return &telemetry.Request{Service: service, Endpoint: endpoint, Start: end.Add(-d), Duration: d, ThreadID: tid, Weight: 1}
}

func TestEngineFiresOnTheSlowRequestAndWritesTheWindowsRequests(t *testing.T) {
	b := &fileBackend{}
	e := newTestEngine(t, b, nil)
	ctx := context.Background()
	spec := Spec{ID: "c1", Backend: Perf, Pre: time.Second, Post: 50 * time.Millisecond,
		Trigger: Trigger{Service: "shop", Endpoint: "/pay", Latency: 200 * time.Millisecond}}
	if _, err := e.Arm(ctx, spec); err != nil {
		t.Fatal(err)
	}
	// The window is [fire − pre, fire + post], clipped to the arming: a
	// ring holds nothing older.
	now := time.Now().Add(600 * time.Millisecond)
	e.Observe(req("shop", "/pay", now.Add(-2*time.Second), 10*time.Millisecond, 1))        // before the window
	e.Observe(req("shop", "/pay", now.Add(-500*time.Millisecond), 10*time.Millisecond, 2)) // inside
	e.Observe(req("other", "/pay", now, 900*time.Millisecond, 3))                          // another service: no fire
	e.Observe(req("shop", "/cart", now, 900*time.Millisecond, 4))                          // another endpoint: no fire
	if st, _ := e.Get("c1"); st.State != control.Armed {
		t.Fatalf("fired on a request the trigger does not watch: %s", st.State)
	}
	slow := req("shop", "/pay", now, 300*time.Millisecond, 5)
	e.Observe(slow)
	st, err := e.Wait(ctx, "c1")
	if err != nil || st.State != control.Collected {
		t.Fatalf("%v %s %s", err, st.State, st.Error)
	}
	md := st.Metadata
	if !md.FiredAt.Equal(now) || md.Trigger.Kind != "latency" || md.Trigger.Latency != 300*time.Millisecond {
		t.Errorf("trigger %+v fired at %v, want the slow request at %v", md.Trigger, md.FiredAt, now)
	}
	if md.Lost != 3 || md.Host != "h1" || md.HWClass != "gen5" || md.Service != "shop" {
		t.Errorf("metadata %+v", md)
	}
	var names []string
	for _, f := range md.Files {
		names = append(names, f.Name)
		if len(f.SHA256) != 64 || f.Bytes == 0 {
			t.Errorf("file %+v is not sealed", f)
		}
	}
	// A recorder without an analysis still leaves report.html, the page
	// the operator's links open, saying why it has none.
	if strings.Join(names, ",") != "pre.txt,post.txt,requests.jsonl,report.html" {
		t.Errorf("files %v", names)
	}
	if page, err := os.ReadFile(filepath.Join(st.Location, "report.html")); err != nil ||
		!strings.Contains(string(page), "This capture has no analysis: the perf recorder makes no analysis on the node.") ||
		!strings.Contains(string(page), "<li><code>requests.jsonl</code></li>") {
		t.Errorf("report.html: %v\n%s", err, page)
	}
	b2, err := os.ReadFile(filepath.Join(st.Location, md.Requests))
	if err != nil {
		t.Fatal(err)
	}
	got := string(b2)
	for tid, want := range map[string]bool{`"thread_id":1,`: false, `"thread_id":2,`: true, `"thread_id":3,`: true, `"thread_id":5,`: true} {
		if strings.Contains(got, tid) != want {
			t.Errorf("requests.jsonl has %s: %v, want %v\n%s", tid, !want, want, got)
		}
	}
	// A collected capture cannot fire again; a new one may arm.
	if err := e.Fire("c1", ""); err == nil {
		t.Error("fired a collected capture")
	}
}

func TestEngineKeepsToItsBudgetsAndRefusesBadSpecs(t *testing.T) {
	b := &fileBackend{}
	e := newTestEngine(t, b, func(c *EngineConfig) { c.MaxConcurrent = 2; c.MaxRingKB = 1024 })
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, err := e.Arm(ctx, Spec{ID: id, Backend: Perf, Post: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Arm(ctx, Spec{ID: "c", Backend: Perf}); !errors.Is(err, ErrBusy) {
		t.Errorf("third capture on a host allowing two: %v, want ErrBusy", err)
	}
	for _, tc := range []struct {
		name string
		spec Spec
		want error
	}{
		{"an unknown backend", Spec{ID: "x", Backend: "dtrace"}, ErrInvalid},
		{"a backend this agent did not enable", Spec{ID: "x", Backend: Ftrace}, ErrNotSupported},
		{"a ring over the agent's cap", Spec{ID: "x", Backend: Perf, RingKB: 4096}, ErrInvalid},
		{"an absurd ring", Spec{ID: "x", Backend: Perf, RingKB: 1 << 40}, ErrInvalid},
		{"an id with ..", Spec{ID: "a..b", Backend: Perf}, ErrInvalid},
		{"an id with a slash", Spec{ID: "a/b", Backend: Perf}, ErrInvalid},
		{"a negative window", Spec{ID: "x", Backend: Perf, Pre: -time.Second}, ErrInvalid},
		{"a script for perf", Spec{ID: "x", Backend: Perf, Script: "irq_duration"}, ErrInvalid},
		{"a duplicate id", Spec{ID: "a", Backend: Perf}, ErrInvalid},
		{"a trigger without a service", Spec{ID: "x", Backend: Perf, Trigger: Trigger{Latency: time.Second}}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.Arm(ctx, tc.spec); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
	if n := len(e.List()); n != 2 {
		t.Errorf("%d captures listed after refusals, want 2", n)
	}
	// Ending one frees its slot.
	if err := e.Disarm("a"); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.Get("a"); st.State != control.Disarmed {
		t.Errorf("a is %s", st.State)
	}
	if _, err := e.Arm(ctx, Spec{ID: "c", Backend: Perf}); err != nil {
		t.Errorf("arming after a disarm: %v", err)
	}
	if b.armed != 2 {
		t.Errorf("%d recorders live, want 2", b.armed)
	}
}

func TestEngineAbortsUnderMemoryPressure(t *testing.T) {
	b := &fileBackend{}
	avail := 0.5
	e := newTestEngine(t, b, func(c *EngineConfig) {
		c.MemoryStallAbort = 0.2
		c.MemAvailable = func() (float64, error) { return avail, nil }
	})
	if _, err := e.Arm(context.Background(), Spec{ID: "p", Backend: Perf}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	stall := func(frac float64) []telemetry.Point {
		return []telemetry.Point{{Metric: "spikehunt.pressure.stall_time", Start: now.Add(-time.Second), End: now, Value: frac,
			Attrs: []telemetry.Attr{telemetry.Str("spikehunt.pressure.resource", "memory"), telemetry.Str("spikehunt.pressure.kind", "some")}}}
	}
	e.ObservePoints(stall(0.1))
	if st, _ := e.Get("p"); st.State != control.Armed {
		t.Fatalf("aborted at 10%% stall: %s", st.State)
	}
	// A cgroup at its own limit: its tasks stall, the host has half its
	// memory free. The capture is what explains that stall.
	e.ObservePoints(stall(0.5))
	if st, _ := e.Get("p"); st.State != control.Armed {
		t.Fatalf("aborted at 50%% stall with half the memory available: %s (%s)", st.State, st.Error)
	}
	avail = 0.05
	e.ObservePoints(stall(0.5))
	st, _ := e.Wait(context.Background(), "p")
	if st.State != control.Aborted || !strings.Contains(st.Error, "memory pressure") {
		t.Errorf("state %s (%s), want Aborted for memory pressure", st.State, st.Error)
	}
	if b.armed != 0 {
		t.Error("the aborted recorder is still live")
	}
}

func TestEngineReportsARecorderThatFails(t *testing.T) {
	for _, stage := range []string{"arm", "fire", "collect"} {
		t.Run(stage, func(t *testing.T) {
			b := &fileBackend{fail: stage}
			e := newTestEngine(t, b, nil)
			_, err := e.Arm(context.Background(), Spec{ID: "f", Backend: Perf})
			if stage == "arm" {
				if err == nil || len(e.List()) != 0 {
					t.Fatalf("a failed arm: %v, %d listed", err, len(e.List()))
				}
				if _, err := os.Stat(filepath.Join(e.cfg.Dir, "work", "f")); !os.IsNotExist(err) {
					t.Error("a failed arm left its work directory")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			e.Fire("f", "test")
			st, _ := e.Wait(context.Background(), "f")
			if st.State != control.Failed || !strings.Contains(st.Error, stage+" failed") {
				t.Errorf("state %s (%s)", st.State, st.Error)
			}
			if b.armed != 0 {
				t.Error("the failed recorder is still live")
			}
		})
	}
}

func TestEngineGovernsWithTheCoolestCPUs(t *testing.T) {
	b := &fileBackend{}
	e := newTestEngine(t, b, func(c *EngineConfig) { c.Govern = GovernConfig{Nice: 12, IOClass: "idle"} })
	now := time.Now()
	var pts []telemetry.Point
	for cpu, busy := range []float64{0.9, 0.1, 0.95, 0.2} { // CPUs 0 and 2 are hot (a NIC storm)
		for mode, v := range map[string]float64{"softirq": busy, "idle": 1 - busy} {
			pts = append(pts, telemetry.Point{Metric: "system.cpu.time", Start: now.Add(-time.Second), End: now, Value: v,
				Attrs: []telemetry.Attr{telemetry.Int("cpu.logical_number", int64(cpu)), telemetry.Str("cpu.mode", mode)}})
		}
	}
	e.ObservePoints(pts)
	if _, err := e.Arm(context.Background(), Spec{ID: "g", Backend: Perf}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Arm(context.Background(), Spec{ID: "g2", Backend: Perf, CPUs: []int{2}}); err != nil {
		t.Fatal(err)
	}
	g, g2 := b.specs[0].Govern, b.specs[1].Govern
	if len(g.CPUs) != 2 || g.CPUs[0] != 1 || g.CPUs[1] != 3 || g.Nice != 12 || g.IOClass != "idle" {
		t.Errorf("governance %+v, want CPUs [1 3] (the cool ones), nice 12, idle IO", g)
	}
	if len(g2.CPUs) != 1 || g2.CPUs[0] != 2 {
		t.Errorf("a spec's own CPUs %v were not kept", g2.CPUs)
	}
}

func TestARequestMayOnlySoftenTheAgentsGovernance(t *testing.T) {
	b := &fileBackend{}
	e := newTestEngine(t, b, func(c *EngineConfig) { c.Govern = GovernConfig{Nice: 10, IOClass: "best-effort", CPUs: []int{0}} })
	ctx := context.Background()
	for i, req := range []GovernConfig{
		{Nice: 19, IOClass: "idle", CPUs: []int{1}}, // gentler: taken, but not its CPUs
		{Nice: 0, IOClass: ""},                      // harsher: the agent's stays
	} {
		if _, err := e.Arm(ctx, Spec{ID: fmt.Sprint("s", i), Backend: Perf, Govern: req}); err != nil {
			t.Fatal(err)
		}
	}
	want := []GovernConfig{{Nice: 19, IOClass: "idle", CPUs: []int{0}}, {Nice: 10, IOClass: "best-effort", CPUs: []int{0}}}
	for i, w := range want {
		if g := b.specs[i].Govern; g.Nice != w.Nice || g.IOClass != w.IOClass || len(g.CPUs) != 1 || g.CPUs[0] != 0 {
			t.Errorf("request %d governed %+v, want %+v", i, g, w)
		}
	}
	if _, err := e.Arm(ctx, Spec{ID: "bad", Backend: Perf, Govern: GovernConfig{Nice: 20}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("nice 20: %v, want ErrInvalid", err)
	}
}

func TestEngineTellsOfEveryChangeAndWhatFired(t *testing.T) {
	b := &fileBackend{}
	e := newTestEngine(t, b, nil)
	var mu sync.Mutex
	var seen []control.State
	e.OnChange(func(id string) {
		st, _ := e.Get(id) // allowed: the engine's lock is released
		mu.Lock()
		seen = append(seen, st.State)
		mu.Unlock()
	})
	ctx := context.Background()
	if _, err := e.Arm(ctx, Spec{ID: "n1", Backend: Perf, Post: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := e.Fire("n1", "alert 7"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := e.Get("n1")
		if st.State == control.Fired || st.State.Terminal() {
			if st.Cause == nil || st.Cause.Kind != "remote" || st.Cause.Reason != "alert 7" {
				t.Errorf("fired capture's cause %+v, want remote, alert 7", st.Cause)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never fired")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st, _ := e.Wait(ctx, "n1"); st.State != control.Collected {
		t.Fatalf("ended %s: %s", st.State, st.Error)
	}
	if _, err := e.Arm(ctx, Spec{ID: "n2", Backend: Perf}); err != nil {
		t.Fatal(err)
	}
	e.Disarm("n2")
	mu.Lock()
	defer mu.Unlock()
	// Each change is told once; a listener reading Get may see a later
	// state than the change it was told of, never an earlier one.
	if len(seen) != 5 || seen[len(seen)-1] != control.Disarmed {
		t.Errorf("told of %v, want 5 changes (armed, fired, collected, armed, disarmed)", seen)
	}
}

func TestTriggerP99FiresWhenOnePercentIsOverAndCoolsDown(t *testing.T) {
	w := &watch{t: Trigger{Service: "s", P99: 100 * time.Millisecond, Cooldown: 10 * time.Second}}
	base := time.Unix(1_800_000_000, 0)
	fired := 0
	var firedAt time.Time
	// 1,000 requests a second; in second 3, 2% are slow.
	for sec := range 6 {
		for i := range 1000 {
			at := base.Add(time.Duration(sec)*time.Second + time.Duration(i)*time.Millisecond)
			d := 5 * time.Millisecond
			if (sec == 3 || sec == 5) && i%50 == 0 {
				d = 150 * time.Millisecond
			}
			if _, ok := w.observe(req("s", "/", at, d, 0)); ok {
				w.fired(at)
				fired++
				firedAt = at
			}
		}
	}
	if fired != 1 {
		t.Fatalf("fired %d times, want once (second 5 is inside the cooldown)", fired)
	}
	if firedAt.Sub(base) < 3*time.Second || firedAt.Sub(base) > 4*time.Second {
		t.Errorf("fired at +%v, want during second 3", firedAt.Sub(base))
	}
	// One slow request among a thousand (0.1%) is under the p99.
	w2 := &watch{t: Trigger{Service: "s", P99: 100 * time.Millisecond}}
	for i := range 2000 {
		d := 5 * time.Millisecond
		if i == 1500 {
			d = time.Second
		}
		if _, ok := w2.observe(req("s", "/", base.Add(time.Duration(i)*time.Millisecond), d, 0)); ok {
			t.Fatal("p99 fired on 0.1% slow requests")
		}
	}
}

func TestRequestRingSaysWhenItLostTheWindowsStart(t *testing.T) {
	r := newRequestRing(4)
	base := time.Unix(1_800_000_000, 0)
	for i := range 6 {
		r.add(req("s", "/", base.Add(time.Duration(i)*time.Second), time.Millisecond, uint32(i)))
	}
	got, oldest := r.window(base, base.Add(10*time.Second))
	if len(got) != 4 || got[0].ThreadID != 2 || got[3].ThreadID != 5 {
		t.Errorf("window %v", got)
	}
	if !oldest.Equal(base.Add(2 * time.Second)) {
		t.Errorf("oldest %v, want the third request's end", oldest)
	}
}

func FuzzDecodeArmRequest(f *testing.F) {
	f.Add([]byte(`{"id":"c1","backend":"perf","pre":"10s","post":"2s","service":"shop","latency":"500ms"}`))
	f.Add([]byte(`{"id":"../x","backend":"bpftrace","script":"irq_duration"}`))
	f.Add([]byte(`{"id":"c","backend":"perf","ring_kb":-1,"cpus":[1,2,99999]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeArmRequest(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if s.Validate() != nil || ValidName("id", s.ID) != nil || strings.Contains(s.ID, "..") {
			t.Fatalf("accepted an invalid spec %+v", s)
		}
	})
}

func TestMemAvailableShare(t *testing.T) {
	got, err := memAvailableShare([]byte("MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:    6000000 kB\n"))
	if err != nil || got != 0.25 {
		t.Errorf("share %v, %v; want 0.25", got, err)
	}
	for _, bad := range []string{"", "MemTotal: 10 kB\n", "MemTotal: x kB\nMemAvailable: 1 kB\n", "MemTotal: 0 kB\nMemAvailable: 0 kB\n"} {
		if _, err := memAvailableShare([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// This host's own file.
	if share, err := procMemAvailable(); err != nil || share <= 0 || share > 1 {
		t.Errorf("/proc/meminfo: share %v, %v", share, err)
	}
}
