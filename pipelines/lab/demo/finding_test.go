package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/pipelines/cli/query"
	"github.com/spikehunt/spikehunt/pipelines/lab/htmlreport"
)

// A section prints as the console always printed it, wrapped lines and
// all, and reaches the report with each paragraph's lines joined, the
// indented lines as a list under the paragraph before, and a one-line
// step's summary as its paragraph.
func TestSectionsPrintWrappedOnTheConsoleAndWholeInTheReport(t *testing.T) {
	sections := []section{
		{title: "4. What to capture next", figures: []htmlreport.Figure{htmlreport.FigureRaster}, paras: []paragraph{
			para("Arm perf flight recorders, fired by the", "agent when a request passes 300 ms:"),
			para("  gen4: 2 of 30 (node-0026, node-0054)"),
			para("  gen5: 1 of 30 (node-0031)"),
			para("Budgets (20 at once in the fleet):", "all 6 admitted."),
		}},
		{title: "A real capture on this machine", summary: "skipped, not root (perf captures need root)."},
	}
	wantConsole := `4. What to capture next
   Arm perf flight recorders, fired by the
   agent when a request passes 300 ms:
     gen4: 2 of 30 (node-0026, node-0054)
     gen5: 1 of 30 (node-0031)
   Budgets (20 at once in the fleet):
   all 6 admitted.

A real capture on this machine: skipped, not root (perf captures need root).`
	if diff := cmp.Diff(wantConsole, strings.Join(consoleLines(sections), "\n")); diff != "" {
		t.Errorf("console (-want +got):\n%s", diff)
	}
	wantReport := []htmlreport.Step{
		{Title: "4. What to capture next", Figures: []htmlreport.Figure{htmlreport.FigureRaster}, Paragraphs: []htmlreport.Paragraph{
			{Text: "Arm perf flight recorders, fired by the agent when a request passes 300 ms:",
				Items: []string{"gen4: 2 of 30 (node-0026, node-0054)", "gen5: 1 of 30 (node-0031)"}},
			{Text: "Budgets (20 at once in the fleet): all 6 admitted."},
		}},
		{Title: "A real capture on this machine", Paragraphs: []htmlreport.Paragraph{{Text: "Skipped, not root (perf captures need root)."}}},
	}
	if diff := cmp.Diff(wantReport, reportSteps(sections)); diff != "" {
		t.Errorf("report steps (-want +got):\n%s", diff)
	}
}

// The range the demo prints reaches past a capture taken after the
// simulated hours: the next whole minute after the clock.
func TestTheExploreRangeHoldsACaptureAfterTheSimulatedHours(t *testing.T) {
	end := time.Now().UTC().Truncate(time.Hour)
	for _, tc := range []struct{ now, want time.Time }{
		{end.Add(28*time.Minute + 13*time.Second), end.Add(29 * time.Minute)},
		{end.Add(-time.Minute), end},
	} {
		if got := exploreEnd(end, tc.now); !got.Equal(tc.want) {
			t.Errorf("exploreEnd(%v, %v) = %v, want %v", end, tc.now, got, tc.want)
		}
	}
}

// The finding is four numbered steps, as the README says; the local
// capture comes after them, under a heading of its own, numbered or not
// whether it ran.
func TestTheLocalCaptureIsNotAFifthStep(t *testing.T) {
	s := localCaptureSection(context.Background(), nil, "svc", localHost{}, "not root", policy.Decision{}, 0, "", "", func(string, ...any) {})
	if s.title == "" || strings.ContainsAny(s.title[:1], "0123456789") {
		t.Errorf("local capture's heading %q: want one that is not numbered as a step", s.title)
	}
}

// The report says the hardware classes' skew with the CLI's figure (the
// busier class's rate over the calmer one's), never each class's rate
// against the fleet, and not twice when the pattern's sentence gives it.
func TestTheReportGivesTheCLIsSkew(t *testing.T) {
	skew := map[string]float64{"gen4": 0.67, "gen5": 1.33}
	want := "Spikes by hardware class: 2.0× as often on hw class gen5 (the detector did not judge it apart from chance)."
	if got := classSkewLine(query.Pattern{HWClassSkew: skew, Description: "Every host stalls at its own phase."}); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got := classSkewLine(query.Pattern{HWClassSkew: skew, Description: "Every host stalls; 2.0× as often on hw class gen5."}); got != "" {
		t.Errorf("the sentence gives the skew, yet the report says it again: %q", got)
	}
}
