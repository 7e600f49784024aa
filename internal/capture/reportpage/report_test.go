package reportpage

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
)

// A capture as large as the analysis keeps — every request it explains
// with long timelines, 64 CPUs' histograms, 100 devices, 200,000
// stacks — still makes a page of a few MiB, which says what it
// left out.
func TestReportIsBoundedAndSaysWhatItLeftOut(t *testing.T) {
	start := time.Unix(1_800_000_000, 0).UTC()
	a := explain.Analysis{Version: explain.AnalysisVersion, Lost: 7, LostNote: "the trace lost 7 events"}
	for i := 0; i < explain.MaxRequests; i++ {
		q := record.RequestRecord{Start: start, End: start.Add(time.Second), LatencyMS: 1000, Service: "web", Endpoint: "/x", ThreadID: uint32(i + 1)}
		// Verdicts that differ in more than their times: one
		// paragraph and one timeline each.
		v := explain.RequestVerdict{Request: q, Thread: fmt.Sprintf("web[%d]", i+1), Verdict: fmt.Sprintf("blocked 1 s in call%d", i),
			IO: &explain.WaitIO{Blocked: time.Second, Device: 10 * time.Millisecond, Devices: []string{"7,0"}, Where: "above"}}
		for k := 0; k < 2000; k++ {
			s := start.Add(time.Duration(k) * 500 * time.Microsecond)
			v.Segments = append(v.Segments, explain.SegmentView{State: "blocked", Start: s, End: s.Add(400 * time.Microsecond)})
		}
		a.Requests = append(a.Requests, v)
	}
	in := &explain.Interrupts{Intervals: 10, Seconds: 10}
	for c := 0; c < 64; c++ {
		cpu := explain.CPUIrq{CPU: c, SoftirqNS: uint64(c) * 1e6, SoftirqRuns: 100}
		for i := 0; i < 24; i++ {
			lo := uint64(1) << i
			cpu.SoftirqHist = append(cpu.SoftirqHist, explain.Bucket{Lo: lo, Hi: 2 * lo, Count: 1})
		}
		in.CPUs = append(in.CPUs, cpu)
		in.Vectors = append(in.Vectors, explain.VectorTime{CPU: c, Vec: 3, Name: "NET_RX", NS: uint64(c) * 1e6})
	}
	a.Interrupts = in
	b := &explain.BlockIO{}
	for d := 0; d < 100; d++ {
		b.Devices = append(b.Devices, explain.DeviceIO{Dev: fmt.Sprintf("8,%d", d), IOs: 1, Hist: []explain.Bucket{{Lo: 64, Hi: 128, Count: 1}}})
	}
	a.BlockIO = b
	var folded []explain.StackShare
	for i := 0; i < 200_000; i++ {
		// 150 chains of 28 frames, each 6 px wide: wide enough to draw
		// every frame below the level bound, 4,350 in all.
		f := i % 150
		var chain []string
		for d := 0; d < 28; d++ {
			chain = append(chain, fmt.Sprintf("f%d_%d", f, d))
		}
		folded = append(folded, explain.StackShare{Stack: "app;" + strings.Join(chain, ";"), Samples: 1})
	}
	var page strings.Builder
	if err := WriteReport(&page, &record.Metadata{ID: "big", Backend: "ftrace"}, &a, folded); err != nil {
		t.Fatal(err)
	}
	h := page.String()
	t.Logf("page: %d bytes", len(h))
	if len(h) > 2<<20 {
		t.Errorf("the page is %d bytes, want at most 2 MiB", len(h))
	}
	// 2,000 segments of 0.36 px each: one rectangle a pixel.
	if n := strings.Count(h, `<rect class="seg`); n > reportTimelines*ReportWidth {
		t.Errorf("%d timeline rectangles, want at most one a pixel (%d)", n, reportTimelines*ReportWidth)
	}
	if n := strings.Count(h, `class="timeline"`); n != reportTimelines {
		t.Errorf("%d timelines drawn, want %d", n, reportTimelines)
	}
	if n := strings.Count(h, `class="irq-hist"`); n != reportIrqCPUs {
		t.Errorf("%d histograms drawn, want %d", n, reportIrqCPUs)
	}
	if n := strings.Count(h, `<g class="frame">`); n > flameMaxFrames {
		t.Errorf("%d frames drawn, want at most %d", n, flameMaxFrames)
	}
	// The CPUs drawn are those with the most softirq time: 63 down to 48.
	if !strings.Contains(h, `data-cpu="63"`) || strings.Contains(h, `data-cpu="47"`) {
		t.Error("the histograms drawn are not the CPUs with the most softirq time")
	}
	for _, want := range []string{"and 15 more requests", "draws its first 4000 frames", "the other 48 are in the table above", "68 more devices in explain.json"} {
		if !strings.Contains(h, want) {
			t.Errorf("the page does not say %q", want)
		}
	}
	// Lost events beside the interrupt and block IO conclusions.
	for _, sec := range []string{"Interrupt work", "Block IO"} {
		part := regexp.MustCompile(`(?s)<h2>\d\. ` + sec + `</h2>.*?(<h2>|</body>)`).FindString(h)
		if !strings.Contains(part, "the trace lost 7 events") {
			t.Errorf("the %s section does not state the lost events", sec)
		}
	}
}

// The CLI draws the page again from an artifact's explain.json: whatever
// its strings hold, the page runs no script and breaks out of no
// attribute.
func TestReportEscapesEveryStringOfTheAnalysis(t *testing.T) {
	const evil = `"><script>alert(1)</script>`
	start := time.Unix(1_800_000_000, 0).UTC()
	q := record.RequestRecord{Start: start, End: start.Add(time.Second), LatencyMS: 1000, Service: evil, Endpoint: evil}
	a := explain.Analysis{Version: explain.AnalysisVersion, LostNote: evil, Notes: []string{evil},
		Requests: []explain.RequestVerdict{{Request: q, Thread: evil, Verdict: evil,
			Segments: []explain.SegmentView{{State: evil, Start: start, End: start.Add(time.Second)}},
			IO:       &explain.WaitIO{Devices: []string{evil}, Where: evil}}},
		Interrupts: &explain.Interrupts{Seconds: 1, CPUs: []explain.CPUIrq{{SoftirqHist: []explain.Bucket{{Lo: 1, Hi: 2, Count: 1}}}}, Vectors: []explain.VectorTime{{Name: evil}}},
		BlockIO:    &explain.BlockIO{Devices: []explain.DeviceIO{{Dev: evil}}},
	}
	var page strings.Builder
	if err := WriteReport(&page, &record.Metadata{ID: evil, Host: evil, Backend: evil, Profile: evil}, &a, []explain.StackShare{{Stack: evil + ";" + evil, Samples: 1}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page.String(), "<script") {
		t.Errorf("the page holds a script:\n%s", page.String())
	}
	var un strings.Builder
	if err := WriteUnanalysedReport(&un, &record.Metadata{ID: evil, Notes: []string{evil}, Files: []record.File{{Name: evil}}}, evil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(un.String(), "<script") {
		t.Errorf("the unanalysed page holds a script:\n%s", un.String())
	}
}
