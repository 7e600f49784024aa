package query

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// -o json keeps what the lines under the table say: "3 of 5 hosts had
// spikes" as values, the range, and how many rows --limit left out, in
// one envelope every query command shares.
func TestJSONOutputKeepsTheSummaryUnderTheTable(t *testing.T) {
	f := seedQueryFleet(t)
	args := append([]string{"--dsn", f.dsn}, f.rangeArgs()...)
	out, _ := cli(t, 0, append([]string{"hosts", "-o", "json", "--limit", "2"}, args...)...)
	var got struct {
		Rows    []Host  `json:"rows"`
		Summary Summary `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := []ServiceSummary{{Service: "billy", Hosts: 5, HostsWithSpikes: 3, MedianSpikes: 2}, {Service: "other", Hosts: 1}}
	if diff := cmp.Diff(want, got.Summary.Services); diff != "" {
		t.Errorf("summary.services (-want +got):\n%s\n%s", diff, out)
	}
	if len(got.Rows) != 2 || got.Summary.Found != 6 || got.Summary.Shown != 2 || got.Summary.Limit != 2 ||
		!got.Summary.From.Equal(f.t0.Add(-60e9)) || len(got.Summary.Lines) != 3 ||
		!strings.HasPrefix(got.Summary.Lines[1], "billy: 3 of 5 hosts had spikes (60%)") {
		t.Errorf("summary: %+v\n%s", got.Summary, out)
	}
	for _, cmd := range []string{"spikes", "patterns", "suspects", "captures"} {
		out, _ := cli(t, 0, append([]string{cmd, "-o", "json"}, args...)...)
		var keys map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out), &keys); err != nil || len(keys) != 2 || keys["rows"] == nil || keys["summary"] == nil {
			t.Errorf("%s -o json: want {rows, summary}, got %v:\n%s", cmd, err, out)
		}
	}
	out, _ = cli(t, 0, append([]string{"spikes", "-o", "json", "--service", "billy"}, args...)...)
	var sp struct{ Summary Summary }
	if err := json.Unmarshal([]byte(out), &sp); err != nil || sp.Summary.HostsWithSpikes == nil || *sp.Summary.HostsWithSpikes != 3 ||
		*sp.Summary.HostsReporting != 5 || sp.Summary.Found != 6 {
		t.Errorf("spikes summary: %+v (%v)", sp.Summary, err)
	}
}
