package demo

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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
		{title: "5. A real capture on this machine", summary: "skipped, not root (perf captures need root)."},
	}
	wantConsole := `4. What to capture next
   Arm perf flight recorders, fired by the
   agent when a request passes 300 ms:
     gen4: 2 of 30 (node-0026, node-0054)
     gen5: 1 of 30 (node-0031)
   Budgets (20 at once in the fleet):
   all 6 admitted.

5. A real capture on this machine: skipped, not root (perf captures need root).`
	if diff := cmp.Diff(wantConsole, strings.Join(consoleLines(sections), "\n")); diff != "" {
		t.Errorf("console (-want +got):\n%s", diff)
	}
	wantReport := []htmlreport.Step{
		{Title: "4. What to capture next", Figures: []htmlreport.Figure{htmlreport.FigureRaster}, Paragraphs: []htmlreport.Paragraph{
			{Text: "Arm perf flight recorders, fired by the agent when a request passes 300 ms:",
				Items: []string{"gen4: 2 of 30 (node-0026, node-0054)", "gen5: 1 of 30 (node-0031)"}},
			{Text: "Budgets (20 at once in the fleet): all 6 admitted."},
		}},
		{Title: "5. A real capture on this machine", Paragraphs: []htmlreport.Paragraph{{Text: "Skipped, not root (perf captures need root)."}}},
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
