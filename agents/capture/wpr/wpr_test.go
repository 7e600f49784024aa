package wpr

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// Several test files of this package may want an -update flag for their
// golden files; whoever registers it first owns it, the others look it up.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files under testdata/")
	}
}

func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

func wprTestSpec() capture.Spec {
	return capture.Spec{ID: "cap-1", Backend: capture.WPR, Pre: 10 * time.Second, Post: 2 * time.Second}
}

// wprProvidersProfile is an administrator's profile with user providers,
// the second golden file.
var wprProvidersProfile = capture.Profile{
	Name: "power", Backend: capture.WPR,
	Events: []string{
		"ProcessThread", "Loader", "CSwitch", "DiskIO", "CSwitch",
		"provider:Microsoft-Windows-Kernel-Power:0x4:4",
		"provider:9e814aad-3204-11d2-9a82-006008a86939",
	},
	RingKB: 64 * 1024,
}

func TestWPRProfileGolden(t *testing.T) {
	for _, tc := range []struct {
		name, golden string
		profile      string
		extra        []capture.Profile
		providers    int
	}{
		{name: "the built-in profile records the DPC flood view into one system collector", golden: "default.wprp"},
		{name: "user providers get an event collector and a quarter of the ring", golden: "providers.wprp",
			profile: "power", extra: []capture.Profile{wprProvidersProfile}, providers: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			profiles, err := capture.NewProfiles(tc.extra...)
			if err != nil {
				t.Fatal(err)
			}
			spec := wprTestSpec()
			spec.Profile = tc.profile
			rec, err := New(Config{Profiles: profiles, CPUs: 8}).New(spec, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			got := rec.(*wprRecorder).wprp
			path := filepath.Join("testdata", "wpr", tc.golden)
			if updateGolden() {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("generated .wprp differs from %s (-want +got):\n%s", path, diff)
			}
			checkWPRPStructure(t, got, tc.providers)
		})
	}
}

// checkWPRPStructure parses a generated .wprp back and checks what WPR
// checks: the element order, the memory-mode profile, and that every id
// a profile refers to is defined.
func checkWPRPStructure(t *testing.T, data []byte, providers int) {
	t.Helper()
	var doc wprpDocument
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("parse the .wprp back: %v", err)
	}
	if doc.XMLName.Local != "WindowsPerformanceRecorder" || doc.Version != "1.0" {
		t.Errorf("root is <%s Version=%q>", doc.XMLName.Local, doc.Version)
	}

	// Collectors, then system providers, then event providers, then
	// profiles: WPR refuses another order.
	var order []string
	dec := xml.NewDecoder(bytes.NewReader(data))
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch el := tok.(type) {
		case xml.StartElement:
			depth++
			if depth == 3 {
				order = append(order, el.Name.Local)
			}
		case xml.EndElement:
			depth--
		}
	}
	rank := map[string]int{"SystemCollector": 0, "EventCollector": 0, "SystemProvider": 1, "EventProvider": 2, "Profile": 3}
	for i := 1; i < len(order); i++ {
		if rank[order[i]] < rank[order[i-1]] {
			t.Errorf("<%s> after <%s> in %v", order[i], order[i-1], order)
		}
	}

	ps := doc.Profiles
	size, buffers := ps.SystemCollector.BufferSize.Value, ps.SystemCollector.Buffers.Value
	if size == "" || buffers == "" || size == "0" || buffers == "0" {
		t.Errorf("system collector buffers %q × %q KiB", buffers, size)
	}
	if len(ps.SystemProvider.Keywords.Keyword) == 0 {
		t.Error("no system keywords")
	}
	if ps.SystemProvider.Stacks != nil && len(ps.SystemProvider.Stacks.Stack) == 0 {
		t.Error("an empty <Stacks>")
	}
	for _, ep := range ps.EventProviders {
		if ep.Keywords != nil && len(ep.Keywords.Keyword) == 0 {
			t.Errorf("provider %s: an empty <Keywords>", ep.Name)
		}
	}
	if len(ps.EventProviders) != providers || (providers > 0) != (ps.EventCollector != nil) {
		t.Errorf("%d event providers, event collector %v; want %d", len(ps.EventProviders), ps.EventCollector != nil, providers)
	}
	modes := map[string]bool{}
	for _, p := range ps.Profiles {
		if p.Name != wprProfileName || p.ID != p.Name+"."+p.DetailLevel+"."+p.LoggingMode {
			t.Errorf("profile Id %q Name %q: want <Name>.<DetailLevel>.<LoggingMode>", p.ID, p.Name)
		}
		modes[p.LoggingMode] = true
		c := p.Collectors
		if c.System.Value != ps.SystemCollector.ID || c.System.Provider.Value != ps.SystemProvider.ID {
			t.Errorf("profile %s refers to system collector %q / provider %q", p.ID, c.System.Value, c.System.Provider.Value)
		}
		if (c.Events != nil) != (ps.EventCollector != nil) {
			t.Errorf("profile %s: event collector reference %v", p.ID, c.Events)
			continue
		}
		if c.Events != nil {
			if c.Events.Value != ps.EventCollector.ID || len(c.Events.Providers) != len(ps.EventProviders) {
				t.Errorf("profile %s refers to %+v", p.ID, c.Events)
			}
			for i, ref := range c.Events.Providers {
				if ref.Value != ps.EventProviders[i].ID {
					t.Errorf("profile %s refers to provider %q, defined is %q", p.ID, ref.Value, ps.EventProviders[i].ID)
				}
			}
		}
	}
	if !modes["Memory"] || !modes["File"] || len(ps.Profiles) != 2 {
		t.Errorf("profiles %v: want one Memory and one File version", modes)
	}
}

func TestWPRRingLayout(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ringKB, cpus int
		events       bool
		want         wprLayout
	}{
		{name: "a large ring gets 1 MiB buffers", ringKB: 256 * 1024, cpus: 8,
			want: wprLayout{systemBufKB: 1024, systemBufs: 256}},
		{name: "a small ring on many CPUs gets smaller buffers, two per CPU at least", ringKB: 8 * 1024, cpus: 32,
			want: wprLayout{systemBufKB: 128, systemBufs: 64}},
		{name: "user providers take a quarter", ringKB: 64 * 1024, cpus: 8, events: true,
			want: wprLayout{systemBufKB: 1024, systemBufs: 48, eventBufKB: 1024, eventBufs: 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := wprRingLayout(tc.ringKB, tc.cpus, tc.events)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestWPRNewRejectsBadInput(t *testing.T) {
	withEvents := func(events ...string) []capture.Profile {
		return []capture.Profile{{Name: "custom", Backend: capture.WPR, Events: events, RingKB: 64 * 1024}}
	}
	for _, tc := range []struct {
		name    string
		spec    func(*capture.Spec)
		extra   []capture.Profile
		cpus    int
		wantErr error
		wantMsg string
	}{
		{name: "an unknown event name", extra: withEvents("ProcessThread", "CSwtich"),
			spec: func(s *capture.Spec) { s.Profile = "custom" }, wantErr: capture.ErrInvalid, wantMsg: `unknown event "CSwtich"`},
		{name: "event names are case-sensitive, as WPR's keywords are", extra: withEvents("cswitch"),
			spec: func(s *capture.Spec) { s.Profile = "custom" }, wantErr: capture.ErrInvalid, wantMsg: `unknown event "cswitch"`},
		{name: "a perf event in a WPR profile", extra: withEvents("sched:sched_switch"),
			spec: func(s *capture.Spec) { s.Profile = "custom" }, wantErr: capture.ErrInvalid},
		{name: "only user providers, no system event", extra: withEvents("provider:Microsoft-Windows-Kernel-Power"),
			spec: func(s *capture.Spec) { s.Profile = "custom" }, wantErr: capture.ErrInvalid, wantMsg: "no system event"},
		{name: "a provider keyword mask that is not hex", extra: withEvents("Loader", "provider:Foo:0xZZ"),
			spec: func(s *capture.Spec) { s.Profile = "custom" }, wantErr: capture.ErrInvalid, wantMsg: "keyword mask"},
		{name: "a provider level out of range", extra: withEvents("Loader", "provider:Foo:0x1:256"),
			spec: func(s *capture.Spec) { s.Profile = "custom" }, wantErr: capture.ErrInvalid, wantMsg: "level"},
		{name: "a provider with too many fields", extra: withEvents("Loader", "provider:Foo:0x1:4:9"),
			spec: func(s *capture.Spec) { s.Profile = "custom" }, wantErr: capture.ErrInvalid},
		{name: "a provider listed twice", extra: withEvents("Loader", "provider:Foo", "provider:foo:0x1"),
			spec: func(s *capture.Spec) { s.Profile = "custom" }, wantErr: capture.ErrInvalid, wantMsg: "twice"},
		{name: "a profile with no events", extra: withEvents(),
			spec: func(s *capture.Spec) { s.Profile = "custom" }, wantErr: capture.ErrInvalid, wantMsg: "no events"},
		{name: "a perf call-graph mode", extra: []capture.Profile{{Name: "custom", Backend: capture.WPR, Events: []string{"CSwitch"}, CallGraph: "dwarf", RingKB: 65536}},
			spec: func(s *capture.Spec) { s.Profile = "custom" }, wantErr: capture.ErrInvalid, wantMsg: "call graph"},
		{name: "a sampling frequency, which is machine-wide on Windows", extra: []capture.Profile{{Name: "custom", Backend: capture.WPR, Events: []string{"SampledProfile"}, FrequencyHz: 99, RingKB: 65536}},
			spec: func(s *capture.Spec) { s.Profile = "custom" }, wantErr: capture.ErrInvalid, wantMsg: "setprofint"},
		{name: "a ring too small for two buffers per CPU", spec: func(s *capture.Spec) { s.RingKB = capture.MinRingKB },
			wantErr: capture.ErrInvalid, wantMsg: "two buffers per CPU"},
		{name: "an absurd ring", spec: func(s *capture.Spec) { s.RingKB = 4 * capture.MaxRingKB }, wantErr: capture.ErrInvalid, wantMsg: "ring size"},
		{name: "a capture id that climbs out of the dir", spec: func(s *capture.Spec) { s.ID = "../x" }, wantErr: capture.ErrInvalid, wantMsg: "capture id"},
		{name: "an id with a quote that would reach the command line", spec: func(s *capture.Spec) { s.ID = `a" -cancel` }, wantErr: capture.ErrInvalid},
		{name: "an unknown profile", spec: func(s *capture.Spec) { s.Profile = "nope" }, wantErr: capture.ErrInvalid, wantMsg: "no wpr profile"},
		{name: "a spec for another backend", spec: func(s *capture.Spec) { s.Backend = capture.Perf }, wantErr: capture.ErrInvalid, wantMsg: "given to the wpr backend"},
		{name: "a negative CPU count in the config", cpus: -1, wantErr: capture.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			profiles, err := capture.NewProfiles(tc.extra...)
			if err != nil {
				t.Fatal(err)
			}
			spec := wprTestSpec()
			if tc.spec != nil {
				tc.spec(&spec)
			}
			cpus := tc.cpus
			if cpus == 0 {
				cpus = 64
			}
			_, err = New(Config{Profiles: profiles, CPUs: cpus}).New(spec, t.TempDir())
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err = %q, want it to say %q", err, tc.wantMsg)
			}
		})
	}
}

func TestWPRCheckWithoutWPR(t *testing.T) {
	t.Run("a configured path that does not exist", func(t *testing.T) {
		err := New(Config{Path: filepath.Join(t.TempDir(), "wpr.exe")}).Check()
		if !errors.Is(err, capture.ErrNotSupported) {
			t.Fatalf("err = %v, want ErrNotSupported", err)
		}
	})
	t.Run("no wpr.exe on PATH", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		err := New(Config{}).Check()
		if !errors.Is(err, capture.ErrNotSupported) || !strings.Contains(err.Error(), "wpr") {
			t.Fatalf("err = %v, want ErrNotSupported naming wpr", err)
		}
	})
}

// buildFakeWPR compiles testdata/wpr/fakewpr, the stand-in for wpr.exe.
func buildFakeWPR(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	exe := filepath.Join(t.TempDir(), "wpr")
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	out, err := exec.Command(goBin, "build", "-o", exe, "./testdata/wpr/fakewpr").CombinedOutput()
	if err != nil {
		t.Fatalf("build the fake wpr: %v\n%s", err, out)
	}
	return exe
}

// wprCalls reads the argument vectors the fake wpr was run with.
func wprCalls(t *testing.T, state string) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(state, "calls.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var calls [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var args []string
		if err := json.Unmarshal(sc.Bytes(), &args); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, args)
	}
	return calls
}

func TestWPRRecorder(t *testing.T) {
	exe := buildFakeWPR(t)
	ctx := context.Background()

	// setup returns a recorder on the fake wpr, the capture dir and the
	// fake's state dir; env sets the fake's knobs.
	setup := func(t *testing.T, cfg Config, spec capture.Spec, env ...string) (*wprRecorder, string, string) {
		t.Helper()
		state := t.TempDir()
		t.Setenv("FAKEWPR_DIR", state)
		for _, k := range []string{"FAKEWPR_LOST", "FAKEWPR_STOP_LOST", "FAKEWPR_FAIL", "FAKEWPR_NO_SKIPPDBGEN", "FAKEWPR_LOCALIZED"} {
			t.Setenv(k, "")
		}
		for i := 0; i+1 < len(env); i += 2 {
			t.Setenv(env[i], env[i+1])
		}
		cfg.Path, cfg.CPUs = exe, 8
		b := New(cfg)
		if err := b.Check(); err != nil {
			t.Fatalf("Check with the fake wpr: %v", err)
		}
		dir := t.TempDir()
		rec, err := b.New(spec, dir)
		if err != nil {
			t.Fatal(err)
		}
		return rec.(*wprRecorder), dir, state
	}
	const inst = "spikehunt-cap-1"
	start := func(dir string) []string {
		return []string{"-start", filepath.Join(dir, "spikehunt.wprp") + "!SpikeHunt", "-recordtempto", dir, "-instancename", inst}
	}
	marker := []string{"-marker", "spikehunt fire cap-1", "-instancename", inst}
	status := []string{"-status", "collectors", "-instancename", inst}
	stop := func(dir, file, what string, flags ...string) []string {
		args := append([]string{"-stop", filepath.Join(dir, file), "spikehunt cap-1 " + what}, flags...)
		return append(args, "-instancename", inst)
	}
	cancel := []string{"-cancel", "-instancename", inst}

	t.Run("arm, fire and collect save the pre- and post-window from two sessions", func(t *testing.T) {
		rec, dir, state := setup(t, Config{}, wprTestSpec(), "FAKEWPR_LOST", "3")
		if err := rec.Arm(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rec.Fire(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "pre.etl")); err != nil {
			t.Fatalf("the pre-window is not on disk when Fire returns: %v", err)
		}
		res, err := rec.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := rec.Disarm(); err != nil {
			t.Fatalf("Disarm after Collect: %v", err)
		}
		want := [][]string{
			start(dir),
			marker,
			status,
			stop(dir, "pre.etl", "pre-window", "-skipPdbGen"),
			start(dir),
			status,
			stop(dir, "post.etl", "post-window", "-skipPdbGen"),
		}
		if diff := cmp.Diff(want, wprCalls(t, state)); diff != "" {
			t.Errorf("wpr command lines (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"spikehunt.wprp", "pre.etl", "post.etl", "wpr.log"}, res.Files); diff != "" {
			t.Errorf("files (-want +got):\n%s", diff)
		}
		for _, f := range res.Files {
			if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
				t.Errorf("file %s: %v", f, err)
			}
		}
		if res.Lost != 6 {
			t.Errorf("lost = %d, want 3 from each session's collectors (not also the Dropped event total)", res.Lost)
		}
		if res.Clock != (record.Clock{Name: "QPC"}) {
			t.Errorf("clock = %+v, want QPC with no offset", res.Clock)
		}
		notes := strings.Join(res.Notes, "\n")
		for _, want := range []string{"pre.etl is the pre-window", "post.etl is the post-window", "was not recorded", "own wall-clock start"} {
			if !strings.Contains(notes, want) {
				t.Errorf("notes do not say %q:\n%s", want, notes)
			}
		}
		log, _ := os.ReadFile(filepath.Join(dir, "wpr.log"))
		if !strings.Contains(string(log), `$ wpr -marker "spikehunt fire cap-1" -instancename spikehunt-cap-1`) {
			t.Errorf("wpr.log lacks the marker command:\n%s", log)
		}
	})

	t.Run("without a post-window Fire stops the only session and Collect runs nothing", func(t *testing.T) {
		spec := wprTestSpec()
		spec.Post = 0
		rec, dir, state := setup(t, Config{ManagedSymbols: true}, spec)
		if err := rec.Arm(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rec.Fire(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := rec.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := [][]string{start(dir), marker, status, stop(dir, "pre.etl", "pre-window")}
		if diff := cmp.Diff(want, wprCalls(t, state)); diff != "" {
			t.Errorf("wpr command lines (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"spikehunt.wprp", "pre.etl", "wpr.log"}, res.Files); diff != "" {
			t.Errorf("files (-want +got):\n%s", diff)
		}
	})

	t.Run("Disarm cancels a live session once", func(t *testing.T) {
		rec, dir, state := setup(t, Config{}, wprTestSpec())
		if err := rec.Arm(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rec.Disarm(); err != nil {
			t.Fatal(err)
		}
		if err := rec.Disarm(); err != nil {
			t.Fatalf("second Disarm: %v", err)
		}
		if diff := cmp.Diff([][]string{start(dir), cancel}, wprCalls(t, state)); diff != "" {
			t.Errorf("wpr command lines (-want +got):\n%s", diff)
		}
		if _, err := rec.Collect(ctx); err == nil {
			t.Error("Collect after Disarm succeeded")
		}
	})

	t.Run("Disarm after a fire cancels the post-window's session", func(t *testing.T) {
		rec, dir, state := setup(t, Config{}, wprTestSpec())
		if err := rec.Arm(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rec.Fire(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rec.Disarm(); err != nil {
			t.Fatal(err)
		}
		calls := wprCalls(t, state)
		if diff := cmp.Diff([][]string{start(dir), cancel}, [][]string{calls[4], calls[len(calls)-1]}); diff != "" {
			t.Errorf("restart and cancel (-want +got):\n%s", diff)
		}
	})

	t.Run("a start refused for want of elevation is released and says so", func(t *testing.T) {
		rec, dir, state := setup(t, Config{}, wprTestSpec(), "FAKEWPR_FAIL", "-start")
		err := rec.Arm(ctx)
		if !errors.Is(err, capture.ErrNotSupported) || !strings.Contains(err.Error(), "Administrator") {
			t.Fatalf("err = %v, want ErrNotSupported telling to run as Administrator", err)
		}
		if diff := cmp.Diff([][]string{start(dir), cancel}, wprCalls(t, state)); diff != "" {
			t.Errorf("wpr command lines (-want +got):\n%s", diff)
		}
		if err := rec.Disarm(); err != nil {
			t.Errorf("Disarm after a failed Arm: %v", err)
		}
	})

	t.Run("collect before fire is refused and the session stays for Disarm", func(t *testing.T) {
		rec, dir, state := setup(t, Config{}, wprTestSpec())
		if err := rec.Arm(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := rec.Collect(ctx); err == nil || !strings.Contains(err.Error(), "before fire") {
			t.Fatalf("Collect before Fire: err = %v", err)
		}
		if err := rec.Disarm(); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([][]string{start(dir), cancel}, wprCalls(t, state)); diff != "" {
			t.Errorf("wpr command lines (-want +got):\n%s", diff)
		}
	})

	t.Run("an older wpr that refuses -skipPdbGen is stopped without it, then and later", func(t *testing.T) {
		rec, dir, state := setup(t, Config{}, wprTestSpec(), "FAKEWPR_NO_SKIPPDBGEN", "1")
		if err := rec.Arm(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rec.Fire(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := rec.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := [][]string{
			start(dir), marker, status,
			stop(dir, "pre.etl", "pre-window", "-skipPdbGen"),
			stop(dir, "pre.etl", "pre-window"),
			start(dir), status,
			stop(dir, "post.etl", "post-window"),
		}
		if diff := cmp.Diff(want, wprCalls(t, state)); diff != "" {
			t.Errorf("wpr command lines (-want +got):\n%s", diff)
		}
		if !strings.Contains(strings.Join(res.Notes, "\n"), "refused -skipPdbGen") {
			t.Errorf("notes do not mention the fallback: %q", res.Notes)
		}
	})

	t.Run("lost events printed in another language are unknown, not zero", func(t *testing.T) {
		spec := wprTestSpec()
		spec.Post = 0
		rec, _, _ := setup(t, Config{}, spec, "FAKEWPR_LOCALIZED", "1", "FAKEWPR_LOST", "7")
		if err := rec.Arm(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rec.Fire(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := rec.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Lost != 0 || !strings.Contains(strings.Join(res.Notes, "\n"), "lost events unknown for pre") {
			t.Errorf("lost = %d, notes %q: want 0 and a note that pre's count is unknown", res.Lost, res.Notes)
		}
	})

	t.Run("a stop that reports more lost events than the status raises the count", func(t *testing.T) {
		spec := wprTestSpec()
		spec.Post = 0
		rec, _, _ := setup(t, Config{}, spec, "FAKEWPR_LOST", "2", "FAKEWPR_STOP_LOST", "1,234")
		if err := rec.Arm(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rec.Fire(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := rec.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Lost != 1234 {
			t.Errorf("lost = %d, want 1234", res.Lost)
		}
	})

	t.Run("a restart that fails keeps the pre-window and notes the missing post-window", func(t *testing.T) {
		rec, _, _ := setup(t, Config{}, wprTestSpec())
		if err := rec.Arm(ctx); err != nil {
			t.Fatal(err)
		}
		t.Setenv("FAKEWPR_FAIL", "-start")
		if err := rec.Fire(ctx); err != nil {
			t.Fatalf("Fire with the pre-window saved: %v", err)
		}
		res, err := rec.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"spikehunt.wprp", "pre.etl", "wpr.log"}, res.Files); diff != "" {
			t.Errorf("files (-want +got):\n%s", diff)
		}
		if !strings.Contains(strings.Join(res.Notes, "\n"), "no post-window") {
			t.Errorf("notes %q do not say the post-window is missing", res.Notes)
		}
	})
}

func TestParseWPRLost(t *testing.T) {
	utf16 := func(s string) []byte {
		var b []byte
		for _, c := range []byte(s) {
			b = append(b, c, 0)
		}
		return b
	}
	const status = "WPR recording is in progress...\r\n\r\nTime since start        : 00:04:27\r\n\r\nDropped event           : 12\r\n\r\nLogging mode            : Memory\r\n\r\n" +
		"Actively recording collectors:\r\n\r\nCollector Name          : NT Kernel Logger\r\nBuffer Size (KB)        : 1024\r\nEvents Lost             : 5\r\n" +
		"System Keywords\r\n        CSwitch\r\n\r\nCollector Name          : WPR_initiated_WPR Event Collector\r\nBuffer Size (KB)        : 1024\r\nEvents Lost             : 7\r\n"
	for _, tc := range []struct {
		name            string
		out             []byte
		events, buffers uint64
		ok              bool
	}{
		{name: "per-collector counts are summed and the total is not added again", out: []byte(status), events: 12, ok: true},
		{name: "the same output as UTF-16LE", out: utf16(status), events: 12, ok: true},
		{name: "-status without collectors gives the dropped total", out: []byte("Dropped event           : 4\n"), events: 4, ok: true},
		{name: "a trace with no loss", out: []byte("Events Lost : 0\n"), events: 0, ok: true},
		{name: "the lost-events warning with a thousands separator", out: []byte("\t\t336,273 Events were lost in this trace.  Data may be unreliable.\n"), events: 336273, ok: true},
		{name: "lost buffers", out: []byte("Events Lost : 1\nBuffers Lost : 3\n"), events: 1, buffers: 3, ok: true},
		{name: "a count too large saturates", out: []byte("Events Lost : 99999999999999999999999\n"), events: ^uint64(0), ok: true},
		{name: "German labels are unknown", out: []byte("Verlorene Ereignisse    : 7\n")},
		{name: "nothing", out: nil},
		{name: "a label inside another line is not a count", out: []byte("note: Events Lost : 5 (previous run)\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events, buffers, ok := parseWPRLost(tc.out)
			if events != tc.events || buffers != tc.buffers || ok != tc.ok {
				t.Errorf("got (%d, %d, %v), want (%d, %d, %v)", events, buffers, ok, tc.events, tc.buffers, tc.ok)
			}
		})
	}
}

func FuzzParseWPRLost(f *testing.F) {
	f.Add([]byte("Events Lost             : 5\r\nDropped event : 3\n"))
	f.Add([]byte("\t\t6728 Events were lost in this trace.\nBuffers Lost : 2\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		events, buffers, ok := parseWPRLost(out)
		if !ok && events != 0 {
			t.Errorf("unknown count with %d events", events)
		}
		_ = buffers
	})
}

func TestWPRSummary(t *testing.T) {
	out := "Microsoft Windows Performance Recorder Version 10.0\r\nCopyright (c) 2019 Microsoft Corporation. All rights reserved.\r\n\r\n\tThere are no trace profiles running.\r\n\tError code: 0xc5583000\r\n"
	if got, want := wprSummary(out), "There are no trace profiles running. / Error code: 0xc5583000"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := wprError("-cancel", []byte(out), errors.New("exit status 1")); !errors.Is(err, errWPRNotRecording) {
		t.Errorf("wprError = %v, want errWPRNotRecording", err)
	}
}
