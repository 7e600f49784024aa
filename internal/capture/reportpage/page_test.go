package reportpage

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
)

// quietWindow is the folded stacks of a demo capture's window: the idle
// task is 95.7% of the samples, and one thin stack of the work is 64
// frames deep.
func quietWindow() []explain.StackShare {
	folded := []explain.StackShare{
		{Stack: "swapper/0;secondary_startup_64;do_idle;cpuidle_enter;default_idle", Samples: 5000},
		{Stack: "swapper/1;secondary_startup_64;do_idle;cpuidle_enter;default_idle", Samples: 4570},
		// Softirq work in the idle task's context is work.
		{Stack: "swapper/1;do_idle;irq_exit_rcu;__do_softirq;net_rx_action", Samples: 30},
		{Stack: "go;runtime.main;main.main;os.MkdirAll;syscall.Mkdirat", Samples: 300},
		{Stack: "perf;read;seq_read", Samples: 99},
	}
	deep := []string{"checkout"}
	for i := 0; i < 63; i++ {
		deep = append(deep, fmt.Sprintf("frame%02d", i))
	}
	return append(folded, explain.StackShare{Stack: strings.Join(deep, ";"), Samples: 1})
}

func TestTheFlameGraphPutsTheIdleTaskAsideAndBoundsItsHeight(t *testing.T) {
	start := time.Unix(1_800_000_000, 0).UTC()
	a := explain.Analysis{Version: explain.AnalysisVersion, Samples: 10000,
		CPUs: []explain.CPUUse{{CPU: 0, Samples: 5000, Idle: 5000}, {CPU: 1, Samples: 5000, Idle: 4570, Softirq: 30}}}
	var page strings.Builder
	if err := WriteReport(&page, &record.Metadata{ID: "quiet", Backend: "perf", WindowStart: start, WindowEnd: start.Add(4 * time.Second)}, &a, quietWindow()); err != nil {
		t.Fatal(err)
	}
	h := page.String()
	if want := "idle (swapper) 95.7% of samples (9570 of 10000), not drawn"; !strings.Contains(h, want) {
		t.Errorf("the page does not say %q", want)
	}
	svg := regexp.MustCompile(`(?s)<svg class="flame".*?</svg>`).FindString(h)
	if svg == "" {
		t.Fatal("no flame graph")
	}
	if strings.Contains(svg, "<title>swapper/0") || !strings.Contains(svg, "<title>swapper/1: 30 samples") {
		t.Error("the graph draws the idle task's idle samples, or leaves out its softirq work")
	}
	if !strings.Contains(svg, "<title>all: 430 samples, 100.0%") {
		t.Error("the graph's root is not the 430 samples that were not idle")
	}
	height, _ := strconv.Atoi(regexp.MustCompile(`height="(\d+)"`).FindStringSubmatch(svg)[1])
	if height > flameMaxLevels*flameRow {
		t.Errorf("the flame graph is %d px tall, want at most %d", height, flameMaxLevels*flameRow)
	}
	// The deep stack is a 2 px column: its callees are one "…" frame
	// that says what it stands for.
	if !regexp.MustCompile(`<g class="frame more"><title>\d+ more frames, up to \d+ deep, called from `).MatchString(svg) {
		t.Error("the thin deep stack's callees are not one … frame")
	}
}

// A wide stack deeper than flameMaxLevels is cut there by a "…" frame.
func TestAWideDeepStackIsCutAtTheLevelBound(t *testing.T) {
	deep := []string{"app"}
	for i := 0; i < 60; i++ {
		deep = append(deep, fmt.Sprintf("f%02d", i))
	}
	svg := FlameSVG([]explain.StackShare{{Stack: strings.Join(deep, ";"), Samples: 10}}, ReportWidth)
	height, _ := strconv.Atoi(regexp.MustCompile(`height="(\d+)"`).FindStringSubmatch(svg)[1])
	if height != flameMaxLevels*flameRow {
		t.Errorf("height %d px, want %d", height, flameMaxLevels*flameRow)
	}
	// all, app, f00 … f59: the top row stands for f27 … f59.
	if n := 63 - flameMaxLevels; !strings.Contains(svg, fmt.Sprintf("<title>%d more frames, up to %d deep, from f%02d up", n, n, flameMaxLevels-3)) {
		t.Errorf("the cut does not say what it left out:\n%s", svg)
	}
}

// The sentence above the CPU table names the CPU the table shows
// busiest: on a capture whose CPUs kept different numbers of samples the
// page named one CPU and the table showed another.
func TestTheCPUSentenceNamesTheTablesBusiestCPU(t *testing.T) {
	a := explain.Analysis{Version: explain.AnalysisVersion,
		CPUs: []explain.CPUUse{{CPU: 0, Samples: 3000, Idle: 2910}, {CPU: 1, Samples: 50, Softirq: 2}, {CPU: 2, Samples: 900, Idle: 600}}}
	var page strings.Builder
	if err := WriteReport(&page, &record.Metadata{ID: "cpus"}, &a, nil); err != nil {
		t.Fatal(err)
	}
	h := page.String()
	best, bestBusy := "", -1
	for _, m := range regexp.MustCompile(`<tr[^>]*><td>(\d+)</td><td>\d+</td><td>(\d+)%</td>`).FindAllStringSubmatch(h, -1) {
		if busy, _ := strconv.Atoi(m[2]); busy > bestBusy {
			best, bestBusy = m[1], busy
		}
	}
	m := regexp.MustCompile(`The busiest was CPU (\d+) \((\d+)% `).FindStringSubmatch(h)
	if m == nil {
		t.Fatalf("the page names no busiest CPU:\n%s", h)
	}
	if m[1] != best || m[2] != strconv.Itoa(bestBusy) {
		t.Errorf("the sentence says CPU %s at %s%%, the table's busiest is CPU %s at %d%%", m[1], m[2], best, bestBusy)
	}
	if !strings.Contains(h, "<tr class=busiest><td>1</td>") {
		t.Error("the table does not mark CPU 1 as the busiest")
	}
}

// Thirteen requests held by one stall are one paragraph with one
// timeline, not thirteen copies of one sentence.
func TestIdenticalVerdictsAreOneParagraphWithTheirCount(t *testing.T) {
	start := time.Unix(1_800_000_000, 0).UTC()
	a := explain.Analysis{Version: explain.AnalysisVersion}
	for i := 0; i < 13; i++ {
		q := record.RequestRecord{Start: start, End: start.Add(time.Second), LatencyMS: 1000, Service: "checkout", Endpoint: "/v1/cart", ThreadID: 18335}
		a.Requests = append(a.Requests, explain.RequestVerdict{Request: q, Thread: "spikehunt[18335]",
			Verdict:  "blocked 997 ms in do_nanosleep (stack do_nanosleep ← hrtimer_nanosleep); woken by its timer; 1.00 s of the request on spikehunt[18335]: on CPU 1 ms, runnable 3 ms, blocked 997 ms",
			Segments: []explain.SegmentView{{State: "blocked", Start: start, End: start.Add(time.Second)}}})
	}
	var page strings.Builder
	if err := WriteReport(&page, &record.Metadata{ID: "folded"}, &a, nil); err != nil {
		t.Fatal(err)
	}
	h := page.String()
	if n := strings.Count(h, "blocked 997 ms in do_nanosleep"); n != 1 {
		t.Errorf("the verdict is written %d times, want once", n)
	}
	if !strings.Contains(h, "13 requests with this verdict, 1000 ms (checkout /v1/cart ×13), on thread spikehunt[18335]") {
		t.Errorf("the verdict does not say what it covers:\n%s", h)
	}
	if n := strings.Count(h, `class="timeline"`); n != 1 {
		t.Errorf("%d timelines, want 1", n)
	}
}

// Each span's axis reads in one unit, and every tick's label lies inside
// the drawing: the first one, "0 µs", was cut in half by the left edge,
// and a 1 s request's axis went from µs to ms to s.
func TestTheTimelineAxisHasOneUnitAndItsLabelsFit(t *testing.T) {
	start := time.Unix(1_800_000_000, 0).UTC()
	tick := regexp.MustCompile(`<text class="tick" x="([\d.]+)" y="\d+" text-anchor="(\w+)">(\d+) (\S+)</text>`)
	for _, tc := range []struct {
		span time.Duration
		unit string
	}{
		{800 * time.Microsecond, "µs"}, {3 * time.Millisecond, "µs"}, {342 * time.Millisecond, "ms"},
		{1001 * time.Millisecond, "ms"}, {4 * time.Second, "ms"}, {25 * time.Second, "s"},
	} {
		t.Run(tc.span.String(), func(t *testing.T) {
			v := explain.RequestVerdict{Request: record.RequestRecord{Start: start, End: start.Add(tc.span)}, Thread: "web[1]",
				Segments: []explain.SegmentView{{State: "blocked", Start: start, End: start.Add(tc.span)}}}
			svg := TimelineSVG(v, ReportWidth)
			ticks := tick.FindAllStringSubmatch(svg, -1)
			if len(ticks) < 5 || len(ticks) > 11 {
				t.Errorf("%d ticks, want 5–11:\n%s", len(ticks), svg)
			}
			for _, m := range ticks {
				x, _ := strconv.ParseFloat(m[1], 64)
				w := tickCharWidth * float64(utf8.RuneCountInString(m[3]+" "+m[4]))
				lo := map[string]float64{"start": x, "middle": x - w/2, "end": x - w}[m[2]]
				if lo < 0 || lo+w > ReportWidth {
					t.Errorf("the label %q spans %.1f–%.1f px, outside the drawing's 0–%d", m[3]+" "+m[4], lo, lo+w, ReportWidth)
				}
				if m[4] != tc.unit {
					t.Errorf("the label %q is not in %s", m[3]+" "+m[4], tc.unit)
				}
			}
		})
	}
}
