package report

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/internal/capture/reportpage"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// browserReport is the page an agent writes into a capture (reportpage,
// as perf's recorder renders it) of two slow requests and their window's
// profile, and the sentences captures explain prints of the same
// analysis.
func browserReport(t *testing.T, md *record.Metadata) (string, []string) {
	t.Helper()
	start := time.Unix(1_800_000_000, 0).UTC()
	a := &explain.Analysis{Version: explain.AnalysisVersion, Samples: 2000,
		CPUs: []explain.CPUUse{{CPU: 0, Samples: 1000, Idle: 400}, {CPU: 1, Samples: 1000, Idle: 990}}}
	for _, ms := range []int{998, 120} {
		q := record.RequestRecord{Start: start, End: start.Add(time.Duration(ms) * time.Millisecond), LatencyMS: float64(ms), Service: "checkout", Endpoint: "/v1/cart", ThreadID: uint32(ms)}
		a.Requests = append(a.Requests, explain.RequestVerdict{Request: q, Thread: "web", Verdict: "blocked in do_nanosleep for " + q.End.Sub(q.Start).String(),
			Segments: []explain.SegmentView{{State: "running", Start: q.Start, End: q.Start.Add(time.Millisecond)}, {State: "blocked", Start: q.Start.Add(time.Millisecond), End: q.End}}})
	}
	folded := []explain.StackShare{{Stack: "checkout;main;handle;nanosleep", Samples: 600}, {Stack: "swapper/1;do_idle;default_idle", Samples: 1390}, {Stack: "checkout;main;gc", Samples: 10}}
	var page strings.Builder
	if err := reportpage.WriteReport(&page, md, a, folded); err != nil {
		t.Fatal(err)
	}
	said := []string{a.Requests[0].Verdict, a.Requests[1].Verdict, reportpage.IdleLine(folded)}
	return page.String(), said
}

// In headless Chromium at a desktop's and a laptop's width, the report
// server's pages of a capture — the node's report.html and the list of
// its files — log no error (the server's CSP refuses nothing the page
// needs) and fetch nothing; the report's plots and legend fit the
// viewport without sideways scrolling; and the report's verdicts read as
// captures explain prints them.
func TestInABrowserTheServedPagesFitAtEachWidthAndFetchNothing(t *testing.T) {
	s := localStore(t)
	k := startKube(t)
	ns := k.namespace(t, "shop")
	id := "checkout-node-a-browser"
	page, said := browserReport(t, &record.Metadata{ID: id, Host: "node-a", Backend: "perf"})
	md := sealed(t, s.st, id, map[string]string{ReportFile: page, "stacks.folded": stacks})
	k.capture(t, ns, "cap", md, v1alpha1.PhaseIndexed)
	base := serve(t, Config{UsersFile: writeUsers(t, ns)}, k, storeArtifacts{s.st})
	auth := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+alicePassword))}

	for _, p := range []struct {
		name, path string
		inside     []string
		reads      []string
	}{
		{"served-report", "/captures/" + ns + "/cap/report", []string{"svg", "svg text", "p.legend", "table"}, said},
		{"served-files", "/captures/" + ns + "/cap/files/", []string{"table"}, []string{ReportFile, "stacks.folded", md.Checksum}},
	} {
		t.Run(p.name, func(t *testing.T) {
			views := testenv.VisitPage(t, testenv.PageVisit{URL: base + p.path, Name: p.name, Inside: p.inside, Headers: auth})
			for _, v := range views {
				v.Check(t)
				if v.Matched == 0 {
					t.Errorf("at %d px: none of %v on the page", v.Width, p.inside)
				}
				for _, s := range p.reads {
					if !strings.Contains(v.Text, s) {
						t.Errorf("at %d px: the page does not read %q", v.Width, s)
					}
				}
			}
		})
	}
}
