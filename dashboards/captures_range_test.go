package dashboards

import (
	"context"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// TestCapturesIndexShowsTheCapturesThatOverlapTheRange holds the Captures
// dashboard to the CLI's time-range rule (pipelines/cli/query/where.go):
// a capture covering [start, end) is shown for a range
// [from, to) exactly when the two overlap, so a range that ends where the
// capture starts, or starts where it ends, does not show it, and one that
// falls inside it does.
func TestCapturesIndexShowsTheCapturesThatOverlapTheRange(t *testing.T) {
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(context.Background(), st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	start := testenv.RecentDay().Add(49*time.Minute + 11500*time.Millisecond)
	end := start.Add(4 * time.Second)
	insertCapture(t, st, "cap-edge", "node-0001", "perf", "fleet alert", "uploaded", start, end, nil)

	var index Panel
	var board Board
	for _, b := range Boards() {
		for _, r := range b.Rows {
			for _, p := range r.Panels {
				if b.File == "captures" && p.Key == "index" {
					index, board = p, b
				}
			}
		}
	}
	if index.SQL == "" {
		t.Fatal("no index panel on the captures board")
	}
	for _, c := range []struct {
		name     string
		from, to time.Time
		want     int
	}{
		{"inside the capture", start.Add(500 * time.Millisecond), start.Add(2500 * time.Millisecond), 1},
		{"ends where it starts", start.Add(-time.Minute), start, 0},
		{"starts where it ends", end, end.Add(time.Minute), 0},
		{"covers it", start.Add(-time.Minute), end.Add(time.Minute), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := grafanaQuery{From: c.from, To: c.to, Interval: time.Second, Vars: map[string]any{}, All: map[string]bool{}}
			for _, v := range board.Vars {
				if v.IncludeAll || v.Multi {
					q.Vars[v.Name], q.All[v.Name] = []string{"x"}, true
				} else {
					q.Vars[v.Name] = v.Default
				}
			}
			if got := len(run(t, st, q, index.SQL).Rows); got != c.want {
				t.Errorf("range [%s, %s): %d captures shown, want %d", c.from.Format(time.RFC3339Nano), c.to.Format(time.RFC3339Nano), got, c.want)
			}
		})
	}
}
