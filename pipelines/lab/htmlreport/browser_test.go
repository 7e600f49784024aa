package htmlreport

import (
	"bytes"
	"html/template"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/internal/capture/reportpage"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// demoPage is the demo's report of its fleet (300 hosts over three hours)
// with the demo's steps, and the capture's timeline and flame graph the
// demo brings along, as Drawings. It returns the page's file:// URL and
// the paragraphs as the demo prints them.
func demoPage(t *testing.T) (string, []string) {
	t.Helper()
	f := syntheticFleet(300, 3*time.Hour)
	start := f.From.Add(time.Hour)
	v := explain.RequestVerdict{Thread: "web[4242]", Verdict: "blocked 998 ms in do_nanosleep",
		Request:  record.RequestRecord{Start: start, End: start.Add(time.Second), LatencyMS: 1000, Service: "checkout", Endpoint: "/v1/cart"},
		Segments: []explain.SegmentView{{State: "running", Start: start, End: start.Add(2 * time.Millisecond)}, {State: "blocked", Start: start.Add(2 * time.Millisecond), End: start.Add(time.Second)}}}
	folded := []explain.StackShare{{Stack: "checkout;main;handle;nanosleep", Samples: 998}, {Stack: "checkout;main;gc", Samples: 40}}
	f.Steps = []Step{
		{Title: "1. The averaged view", Paragraphs: []Paragraph{{Text: "Fleet mean latency 5.72 ms and p99 20.1 ms, flat hour after hour: on an averaged dashboard this reads as a uniform regression."}}, Figures: []Figure{FigureAveraged}},
		{Title: "2. Per host: one machine, or all of them?", Paragraphs: []Paragraph{{Text: "300 of 300 hosts had spikes, each <1 s> & at its own phase."}}, Figures: []Figure{FigureHeatmap, FigureRaster}},
		{Title: "3. A capture of one spike", Paragraphs: []Paragraph{{Text: "Bait in every hardware class:", Items: []string{"gen4: 2 of 150", "gen5: 1 of 150"}}},
			Drawings: []Drawing{
				{ID: "capture-timeline", SVG: template.HTML(reportpage.TimelineSVG(v, 900)), Caption: "The stalled request's thread."},
				{ID: "capture-flame", SVG: template.HTML(reportpage.FlameSVG(folded, 900)), Caption: "On CPU during the capture's window."}}},
	}
	var page bytes.Buffer
	if err := Write(&page, f); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(path, page.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var said []string
	for _, s := range f.Steps {
		said = append(said, s.Title)
		for _, p := range s.Paragraphs {
			said = append(said, p.Text)
			said = append(said, p.Items...)
		}
	}
	return (&url.URL{Scheme: "file", Path: path}).String(), said
}

// tickOverlaps names the tick labels of one plot that overlap another,
// as the browser lays them out.
const tickOverlaps = `(() => {
  const out = [];
  for (const svg of document.querySelectorAll("figure svg")) {
    const ticks = [...svg.querySelectorAll("g.tick text, text.tick")].map(t => [t.textContent, t.getBoundingClientRect()]);
    for (let i = 0; i < ticks.length; i++) for (let j = i + 1; j < ticks.length; j++) {
      const [a, p] = ticks[i], [b, q] = ticks[j];
      if (p.left < q.right && q.left < p.right && p.top < q.bottom && q.top < p.bottom) out.push(svg.closest("figure").id + ": " + a + " / " + b);
    }
  }
  return out.join("|");
})()`

// In headless Chromium at a desktop's and a laptop's width, the demo's
// report logs no error and fetches nothing; every plot, its axes, its
// colour scale or legend and the capture's drawings fit the viewport
// without sideways scrolling; no tick label overlaps another (the
// capture's drawings in their own page's font); and every step's title and paragraph reads
// as the demo prints it.
func TestInABrowserTheDemoReportFitsAtEachWidthAndFetchesNothing(t *testing.T) {
	u, said := demoPage(t)
	views := testenv.VisitPage(t, testenv.PageVisit{URL: u, Name: "demo-report",
		Inside: []string{"figure svg", "svg .axis", "svg .tick", "svg .scale", "svg .legend", "svg .title", "figcaption"}, Probe: tickOverlaps})
	for _, v := range views {
		v.Check(t)
		if v.Matched == 0 {
			t.Errorf("at %d px: no plot on the page", v.Width)
		}
		if v.Probe != "" {
			for _, o := range strings.Split(v.Probe, "|") {
				t.Errorf("at %d px: tick labels overlap: %s", v.Width, o)
			}
		}
		for _, s := range said {
			if !strings.Contains(v.Text, s) {
				t.Errorf("at %d px: the page does not read %q as the demo prints it", v.Width, s)
			}
		}
	}
}
