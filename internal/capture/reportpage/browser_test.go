package reportpage

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// browser is a headless Chromium on this machine (make test's deps
// install Debian's chromium as root); without it the test skips, and
// fails under SPIKEHUNT_REQUIRE_PRIVILEGED=1 as CI runs.
func browser(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.RequirePrivileged(t, "headless Chromium", errors.New("none of chromium, chromium-browser, google-chrome on PATH: apt-get install chromium"))
	return ""
}

// layoutProbe measures the page as a browser lays it out and writes what
// is wrong into the body's data-layout: a tick label outside its
// timeline's drawing, and the flame graph's height in pixels.
const layoutProbe = `<script>
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
document.body.setAttribute("data-layout", out.join("|"));
</script>
`

// In a real browser, the page of a quiet window with a thin 64-frame
// stack and a 1 s request: no tick label is clipped by its drawing, and
// the flame graph is no taller than its bound.
func TestInABrowserTheTicksFitAndTheFlameGraphIsBounded(t *testing.T) {
	chromium := browser(t)
	start := time.Unix(1_800_000_000, 0).UTC()
	a := explain.Analysis{Version: explain.AnalysisVersion}
	for _, ms := range []int{1001, 342, 3} {
		q := record.RequestRecord{Start: start, End: start.Add(time.Duration(ms) * time.Millisecond), LatencyMS: float64(ms), Service: "checkout", Endpoint: "/v1/cart", ThreadID: uint32(ms)}
		a.Requests = append(a.Requests, explain.RequestVerdict{Request: q, Thread: "web[" + strconv.Itoa(ms) + "]", Verdict: "blocked in call" + strconv.Itoa(ms),
			Segments: []explain.SegmentView{{State: "blocked", Start: q.Start, End: q.End}}})
	}
	var page strings.Builder
	if err := WriteReport(&page, &record.Metadata{ID: "browser", Backend: "perf"}, &a, quietWindow()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(path, []byte(strings.Replace(page.String(), "</body>", layoutProbe+"</body>", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,2000",
		"--user-data-dir="+t.TempDir(), "--dump-dom", "file://"+path).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	m := regexp.MustCompile(`data-layout="([^"]*)"`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("the probe did not run:\n%.2000s", out)
	}
	for _, got := range strings.Split(m[1], "|") {
		switch {
		case strings.HasPrefix(got, "clipped "):
			t.Errorf("a tick label is outside its drawing: %s", got)
		case strings.HasPrefix(got, "flame "):
			h, _ := strconv.ParseFloat(strings.TrimPrefix(got, "flame "), 64)
			if h <= 0 || h > flameMaxLevels*flameRow {
				t.Errorf("the flame graph is %.0f px tall in the browser, want 1–%d", h, flameMaxLevels*flameRow)
			}
		}
	}
	t.Logf("layout: %s", m[1])
}
