package artifacts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/internal/capture/reportpage"
	"github.com/spikehunt/spikehunt/internal/captures"
	"github.com/spikehunt/spikehunt/internal/schema"
	spikehunt "github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// analysed seals a capture with an analysis as the perf recorder writes
// one (explain.json and stacks.folded beside the trace), puts it in a
// folder store and indexes it.
func analysed(t *testing.T, lost uint64) (dsn string, a explain.Analysis) {
	t.Helper()
	return analysedAs(t, lost, nil)
}

// analysedAs is analysed with the analysis changed by edit first (nil:
// as the perf recorder writes it).
func analysedAs(t *testing.T, lost uint64, edit func(*explain.Analysis)) (dsn string, a explain.Analysis) {
	t.Helper()
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	req := record.RequestRecord{Start: start.Add(time.Second), End: start.Add(2 * time.Second), LatencyMS: 1000,
		Service: "checkout", Endpoint: "/pay", ThreadID: 4242}
	verdict := "blocked 998 ms in do_nanosleep (stack do_nanosleep ← hrtimer_nanosleep); woken by its timer; 1.00 s of the request on web[4242]: on CPU 1 ms, runnable 1 ms, blocked 998 ms"
	a = explain.Analysis{Version: explain.AnalysisVersion, Events: 1000, Samples: 40, Lost: lost,
		Requests: []explain.RequestVerdict{{Request: req, Thread: "web[4242]", OnCPU: time.Millisecond, Runnable: time.Millisecond,
			Blocked: 998 * time.Millisecond, BlockingCall: "do_nanosleep", WokenBy: "its timer", Verdict: verdict,
			Segments: []explain.SegmentView{
				{State: "on-cpu", Start: req.Start, End: req.Start.Add(time.Millisecond), CPU: 1},
				{State: "blocked", Start: req.Start.Add(time.Millisecond), End: req.Start.Add(999 * time.Millisecond), CPU: 1},
				{State: "runnable", Start: req.Start.Add(999 * time.Millisecond), End: req.End, CPU: 1},
			}}},
		TopStacks: []explain.StackShare{{Stack: "web;main;serve;handle", Samples: 30}, {Stack: "swapper;cpu_idle", Samples: 10}},
		CPUs:      []explain.CPUUse{{CPU: 0, Samples: 20, Idle: 10}, {CPU: 1, Samples: 20, Softirq: 2}},
		Findings:  record.Findings{Verdict: verdict, HottestCPU: 1, HottestCPUBusy: 1, SoftirqShare: 0.05}}
	if lost > 0 {
		a.LostNote = "the trace lost 9 events: a timeline may miss a switch or a wakeup"
	}
	if edit != nil {
		edit(&a)
	}
	dir := t.TempDir()
	b, _ := json.Marshal(a)
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("perf.data.1", "trace")
	write("explain.json", string(b))
	write("stacks.folded", "web;main;serve;handle 30\nswapper;cpu_idle 10\n")
	md := &record.Metadata{ID: "cap-x1", Host: "node-1", Backend: "perf", Profile: "default", ArmedAt: start, FiredAt: req.End,
		WindowStart: start, WindowEnd: start.Add(3 * time.Second), Trigger: record.FireCause{Kind: "latency", Latency: 500 * time.Millisecond},
		Lost: lost, Findings: &a.Findings,
		Files: []record.File{{Name: "perf.data.1"}, {Name: "explain.json"}, {Name: "stacks.folded"}}}
	if err := artifact.Seal(dir, md); err != nil {
		t.Fatal(err)
	}
	s, err := artifact.OpenLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	loc, err := s.Put(ctx, md, dir)
	if err != nil {
		t.Fatal(err)
	}
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := captures.Index(ctx, st, captures.Capture{ID: md.ID, Host: md.Host, Backend: "perf", WindowStart: md.WindowStart,
		WindowEnd: md.WindowEnd, URI: loc.Metadata, Checksum: md.Checksum, LostEvents: lost}); err != nil {
		t.Fatal(err)
	}
	return "chdb://" + st.Dir() + "?database=" + st.Database(), a
}

func explainCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errs strings.Builder
	err := Explain(context.Background(), args, &out, &errs)
	return out.String(), errs.String(), err
}

func TestCapturesExplainPrintsTheVerdictsTheCPUsAndTheHottestStacks(t *testing.T) {
	dsn, a := analysed(t, 9)
	out, _, err := explainCLI(t, "cap-x", "--dsn", dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"capture cap-x1 on node-1: perf/default",
		"note: the trace lost 9 events",
		" 1. checkout /pay 1000 ms",
		"    " + a.Requests[0].Verdict,
		"the busiest was CPU 1 (100% of its 20 samples not idle); softirq work was 5.0% of all samples",
		"   75.0%  web → main → serve → handle",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	js, _, err := explainCLI(t, "cap-x1", "--dsn", dsn, "-o", "json")
	var back explain.Analysis
	if err != nil || json.Unmarshal([]byte(js), &back) != nil || back.Requests[0].Verdict != a.Requests[0].Verdict {
		t.Errorf("-o json: %v\n%s", err, js)
	}
}

// Thirteen requests held by one stall: one entry with their count, the
// endpoints and threads it covers and the slowest's verdict, not the
// same sentence thirteen times; the report folds them alike.
func TestCapturesExplainFoldsVerdictsThatDifferOnlyInTheirTimes(t *testing.T) {
	dsn, a := analysedAs(t, 0, func(a *explain.Analysis) {
		first := a.Requests[0]
		for i := 1; i < 13; i++ {
			v := first
			v.Request.LatencyMS -= float64(39 * i)
			v.Request.Endpoint = "/cart"
			v.Verdict = strings.ReplaceAll(v.Verdict, "998 ms", fmt.Sprintf("%d ms", 998-39*i))
			v.Verdict = strings.ReplaceAll(v.Verdict, "1.00 s", fmt.Sprintf("%d ms", 1000-39*i))
			a.Requests = append(a.Requests, v)
		}
	})
	page := filepath.Join(t.TempDir(), "cap.html")
	out, _, err := explainCLI(t, "cap-x1", "--dsn", dsn, "--html", page)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "in do_nanosleep"); n != 1 {
		t.Errorf("the verdict is printed %d times, want once:\n%s", n, out)
	}
	want := " 1. 13 requests with this verdict, 532–1000 ms (checkout /cart ×12, checkout /pay ×1), on thread web[4242]; the slowest, checkout /pay 1000 ms, started "
	if !strings.Contains(out, want) || !strings.Contains(out, "    "+a.Requests[0].Verdict+"\n") {
		t.Errorf("lacks %q and the slowest's verdict:\n%s", want, out)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "in do_nanosleep"); n != 1 {
		t.Errorf("the report writes the verdict %d times, want once", n)
	}
}

// --html writes a new file; an existing one is left as it was unless
// --force, as captures get leaves a folder that is not empty; -o takes the
// query commands' word for text too.
func TestCapturesExplainOverwritesNothingUnlessForced(t *testing.T) {
	dsn, _ := analysed(t, 0)
	page := filepath.Join(t.TempDir(), "cap.html")
	if err := os.WriteFile(page, []byte("my notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := explainCLI(t, "cap-x1", "--dsn", dsn, "--html", page)
	if !errors.Is(err, spikehunt.ErrUsage) || !strings.Contains(stderr, "exists: give another file, or --force") {
		t.Fatalf("an existing --html file: %v, %q; want a usage error", err, stderr)
	}
	if b, _ := os.ReadFile(page); string(b) != "my notes" {
		t.Fatalf("the existing file was changed: %q", b)
	}
	if _, _, err := explainCLI(t, "cap-x1", "--dsn", dsn, "--html", page, "--force", "-o", "table"); err != nil {
		t.Fatalf("--force -o table: %v", err)
	}
	if b, _ := os.ReadFile(page); !strings.HasPrefix(string(b), "<!doctype html>") {
		t.Fatalf("--force did not replace the file: %.40q", b)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(page), ".cap.html.*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestCapturesExplainWritesAReportWithTheTimelineAndTheFlameGraph(t *testing.T) {
	dsn, a := analysed(t, 0)
	page := filepath.Join(t.TempDir(), "cap.html")
	if _, _, err := explainCLI(t, "cap-x1", "--dsn", dsn, "--html", page); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	h := string(b)
	if strings.Contains(h, "http://") || strings.Contains(h, "https://") || strings.Contains(h, "<script") {
		t.Error("the report reaches for the network or runs scripts")
	}
	// The timeline: one rectangle per segment, in order, with its width
	// in proportion to its time (the blocked one ~99.8% of the bar).
	segs := regexp.MustCompile(`<rect class="seg (\S+)" x="([\d.]+)" y="\d+" width="([\d.]+)"`).FindAllStringSubmatch(h, -1)
	if len(segs) != 3 || segs[0][1] != "on-cpu" || segs[1][1] != "blocked" || segs[2][1] != "runnable" {
		t.Fatalf("timeline segments %v", segs)
	}
	if w := atof(t, segs[1][3]); w < 0.99*(reportpage.ReportWidth-20) || w > reportpage.ReportWidth-20 {
		t.Errorf("the blocked segment is %v px of the %d px bar, want about 99.8%%", w, reportpage.ReportWidth-20)
	}
	if ticks := regexp.MustCompile(`<text class="tick"[^>]*>([^<]+)</text>`).FindAllStringSubmatch(h, -1); len(ticks) < 4 ||
		ticks[0][1] != "0 ms" || ticks[len(ticks)-1][1] != "1000 ms" {
		t.Errorf("the time axis' ticks %v, want 0 ms … 1000 ms", ticks)
	}
	// The flame graph: the root holds every sample that was not idle,
	// each frame its own; the idle task is a line beside it.
	for _, want := range []string{"<title>all: 30 samples, 100.0%</title>", "<title>web: 30 samples, 100.0%</title>",
		"<title>handle: 30 samples, 100.0%</title>", "idle (swapper) 25.0% of samples (10 of 40), not drawn"} {
		if !strings.Contains(h, want) {
			t.Errorf("the flame graph lacks %q", want)
		}
	}
	if strings.Contains(h, "<title>swapper") {
		t.Error("the flame graph draws the idle task")
	}
	if !strings.Contains(h, "<h2>1. The slow requests' threads</h2>") || !strings.Contains(h, htmlEscape(a.Requests[0].Verdict)) {
		t.Error("the report does not show the verdict under its heading")
	}
}

// A bpftrace irq_duration capture: every CPU's softirq and hardirq
// figures, the worst vectors and IRQ lines, with the lost events stated
// under the table they could make low; -o json carries the same.
func TestCapturesExplainPrintsTheInterruptTableWithTheLostEventsBesideIt(t *testing.T) {
	dsn, _ := analysedAs(t, 9, func(a *explain.Analysis) {
		a.Requests, a.CPUs, a.TopStacks, a.Samples = nil, nil, nil, 0
		a.Interrupts = &explain.Interrupts{Intervals: 5, Seconds: 5,
			CPUs: []explain.CPUIrq{
				{CPU: 0, SoftirqRuns: 1000, SoftirqNS: 500_000_000, SoftirqOver100: 40, HardirqRuns: 300, HardirqOver100: 2, CPUShare: 0.1, Over100Share: 0.04},
				{CPU: 1, SoftirqRuns: 10, SoftirqNS: 1_000_000},
			},
			Vectors:         []explain.VectorTime{{CPU: 0, Vec: 3, Name: "NET_RX", NS: 450_000_000, Runs: 900, Over100: 40}},
			HardirqsOver100: []explain.IRQCount{{CPU: 0, IRQ: 27, Count: 2}},
		}
	})
	out, _, err := explainCLI(t, "cap-x1", "--dsn", dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Interrupt work over 5 s (bpftrace irq_duration, 5 interval blocks): NET_RX softirq took 9% of CPU 0",
		"\n  note: the trace lost 9 events: a timeline may miss a switch or a wakeup\n  CPU       softirq   of CPU",
		"  0           500ms   10.00%       1000         40    4.000%        300          2\n",
		"  1             1ms    0.02%         10          0    0.000%          0          0\n",
		"  NET_RX   on CPU 0    9.00% of the CPU, 900 runs, 40 over 100 µs",
		"  IRQ 27    on CPU 0   2 handlers over 100 µs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	js, _, err := explainCLI(t, "cap-x1", "--dsn", dsn, "-o", "json")
	if err != nil || !strings.Contains(js, `"softirq_over_100us_share": 0.04`) || !strings.Contains(js, `"hardirqs_over_100us": [`) {
		t.Errorf("-o json: %v\n%s", err, js)
	}
}

// An ftrace capture: each device's p50/p99/max, each slow request's wait
// against the devices, the lost events under the table.
func TestCapturesExplainPrintsTheBlockIOTableAndEachRequestsWait(t *testing.T) {
	dsn, a := analysedAs(t, 9, func(a *explain.Analysis) {
		a.CPUs, a.TopStacks, a.Samples = nil, nil, 0
		io := &explain.BlockIO{UnmatchedCompletions: 3, InFlightAtEnd: 1}
		if err := io.ReadBlockIO(strings.NewReader(
			"x-1 [000] ..... 1.000000: block_rq_issue: 7,0 WS 4096 () 8 + 8 be,0,4 [x]\n" +
				"x-1 [000] ..... 1.000300: block_rq_complete: 7,0 WS () 8 + 8 be,0,4 [0]\n")); err != nil {
			t.Fatal(err)
		}
		a.BlockIO = io
		v := &a.Requests[0]
		v.IO = &explain.WaitIO{Blocked: 998 * time.Millisecond, Device: 12 * time.Millisecond, Devices: []string{"7,0"}, ByWakeup: true, Where: "above"}
	})
	out, _, err := explainCLI(t, "cap-x1", "--dsn", dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		" 1. checkout /pay 1000 ms",
		"\nBlock IO in the window (ftrace), issue → complete; 3 completions issued before the window, 0 requests in flight at its end:\n  note: the trace lost 9 events",
		"  7,0                 1     512 µs     512 µs        300µs\n",
		"  checkout /pay 1000 ms (web[4242]): blocked 998ms, device 7,0 busy 12ms of it: above the block layer\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	js, _, err := explainCLI(t, "cap-x1", "--dsn", dsn, "-o", "json")
	var back explain.Analysis
	if err != nil || json.Unmarshal([]byte(js), &back) != nil || back.BlockIO == nil || back.BlockIO.Devices[0].P99US != 512 ||
		back.Requests[0].IO == nil || back.Requests[0].IO.Where != "above" || back.Requests[0].Verdict != a.Requests[0].Verdict {
		t.Errorf("-o json: %v\n%s", err, js)
	}
}

func TestCapturesExplainSaysWhenACaptureHasNoAnalysis(t *testing.T) {
	s, err := artifact.OpenLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x := putAndIndex(t, s, "cap-plain")
	_, _, err = explainCLI(t, "cap-plain", "--dsn", x.dsn)
	if err == nil || !strings.Contains(err.Error(), "has no explain.json") {
		t.Errorf("err %v", err)
	}
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	var f float64
	if _, err := fmt.Sscan(s, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func htmlEscape(s string) string { return html.EscapeString(s) }
