package reportpage

import (
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// browserCapture is a capture with every part the page draws: three slow
// requests, one waiting on a disk; the quiet window's flame graph; four
// CPUs' softirq histograms and two block devices.
func browserCapture() (*record.Metadata, *explain.Analysis, []explain.StackShare) {
	start := time.Unix(1_800_000_000, 0).UTC()
	a := &explain.Analysis{Version: explain.AnalysisVersion, Samples: 10000,
		CPUs: []explain.CPUUse{{CPU: 0, Samples: 5000, Idle: 5000}, {CPU: 1, Samples: 5000, Idle: 4570, Softirq: 30}}}
	for _, ms := range []int{1001, 342, 3} {
		q := record.RequestRecord{Start: start, End: start.Add(time.Duration(ms) * time.Millisecond), LatencyMS: float64(ms), Service: "checkout", Endpoint: "/v1/cart", ThreadID: uint32(ms)}
		v := explain.RequestVerdict{Request: q, Thread: "web[" + strconv.Itoa(ms) + "]", Verdict: "blocked in call" + strconv.Itoa(ms) + " <fsync>",
			Segments: []explain.SegmentView{
				{State: "running", Start: q.Start, End: q.Start.Add(q.End.Sub(q.Start) / 4)},
				{State: "blocked", Start: q.Start.Add(q.End.Sub(q.Start) / 4), End: q.End}}}
		if ms == 1001 {
			v.IO = &explain.WaitIO{Blocked: 750 * time.Millisecond, Device: 700 * time.Millisecond, Devices: []string{"8,0"}, Where: "device"}
		}
		a.Requests = append(a.Requests, v)
	}
	in := &explain.Interrupts{Intervals: 4, Seconds: 4}
	for c := 0; c < 4; c++ {
		cpu := explain.CPUIrq{CPU: c, SoftirqNS: uint64(c+1) * 3e6, SoftirqRuns: 1000, SoftirqOver100: uint64(c)}
		for i := 0; i < 12; i++ {
			lo := uint64(1) << i
			cpu.SoftirqHist = append(cpu.SoftirqHist, explain.Bucket{Lo: lo, Hi: 2 * lo, Count: uint64(100 >> (i / 2))})
		}
		in.CPUs = append(in.CPUs, cpu)
		in.Vectors = append(in.Vectors, explain.VectorTime{CPU: c, Vec: 3, Name: "NET_RX", NS: uint64(c+1) * 3e6, Runs: 1000})
	}
	a.Interrupts = in
	a.BlockIO = &explain.BlockIO{Devices: []explain.DeviceIO{
		{Dev: "8,0", IOs: 40, MaxNS: 700e6, Hist: []explain.Bucket{{Lo: 64, Hi: 128, Count: 39}, {Lo: 524288, Hi: 1048576, Count: 1}}},
		{Dev: "259,0", IOs: 3, MaxNS: 90e3, Hist: []explain.Bucket{{Lo: 64, Hi: 128, Count: 3}}},
	}}
	md := &record.Metadata{ID: "checkout-node-a-browser", Host: "node-a", Backend: "perf", Profile: "default", WindowStart: start.Add(-time.Second), WindowEnd: start.Add(3 * time.Second)}
	return md, a, quietWindow()
}

// captureProbe reads what the stylesheet cannot promise: a tick label
// outside its timeline's drawing, and the flame graph's height in pixels.
const captureProbe = `(() => {
  const out = [];
  for (const svg of document.querySelectorAll("svg.timeline")) {
    const w = svg.width.baseVal.value;
    for (const t of svg.querySelectorAll("text.tick")) {
      const b = t.getBBox();
      if (b.x < 0 || b.x + b.width > w) out.push("clipped " + t.textContent + " " + b.x.toFixed(1) + "–" + (b.x + b.width).toFixed(1));
    }
  }
  const f = document.querySelector("svg.flame");
  out.push("flame " + (f ? f.getBoundingClientRect().height : -1));
  return out.join("|");
})()`

// writeCapturePage writes the page of browserCapture to a file and
// returns its file:// URL and the texts the CLI's captures explain prints
// of the same analysis.
func writeCapturePage(t *testing.T) (string, []string) {
	t.Helper()
	md, a, folded := browserCapture()
	var page strings.Builder
	if err := WriteReport(&page, md, a, folded); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(path, []byte(page.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var said []string
	for _, v := range a.Requests {
		said = append(said, v.Verdict)
	}
	// The CPU sentence opens a paragraph on the page, after "CPUs: " in
	// the CLI's output.
	said = append(said, a.Interrupts.Verdict(), upperFirst(explain.CPUSentence(a.CPUs)), IdleLine(folded))
	return (&url.URL{Scheme: "file", Path: path}).String(), said
}

// In headless Chromium at a desktop's and a laptop's width, the capture
// page logs no error and fetches nothing; its plots, their ticks and the
// timelines' legend fit the viewport without sideways scrolling; every
// tick label is inside its timeline; the flame graph is no taller than
// its bound; and the verdicts and sentences read as captures explain
// prints them.
func TestInABrowserTheCapturePageFitsAtEachWidthAndFetchesNothing(t *testing.T) {
	u, said := writeCapturePage(t)
	views := testenv.VisitPage(t, testenv.PageVisit{URL: u, Name: "capture-page",
		Inside: []string{"svg", "svg text", "p.legend", "table"}, Probe: captureProbe})
	for _, v := range views {
		v.Check(t)
		if v.Matched == 0 {
			t.Errorf("at %d px: no plot on the page", v.Width)
		}
		for _, s := range said {
			if !strings.Contains(v.Text, s) {
				t.Errorf("at %d px: the page does not read %q as the CLI prints it", v.Width, s)
			}
		}
		for _, got := range strings.Split(v.Probe, "|") {
			switch {
			case strings.HasPrefix(got, "clipped "):
				t.Errorf("at %d px: a tick label is outside its drawing: %s", v.Width, got)
			case strings.HasPrefix(got, "flame "):
				h, _ := strconv.ParseFloat(strings.TrimPrefix(got, "flame "), 64)
				if h <= 0 || h > flameMaxLevels*flameRow {
					t.Errorf("at %d px: the flame graph is %.0f px tall, want 1–%d", v.Width, h, flameMaxLevels*flameRow)
				}
			}
		}
	}
}
