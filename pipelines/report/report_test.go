package report

import (
	"bytes"
	"context"
	"encoding/base64"
	"html"
	"image/png"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/schema"
	"github.com/spikehunt/spikehunt/pipelines/sim"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// TestReportOfASimulatedFleet loads a small thousand-spikes fleet into the
// real engine, marks each stall as a spike window, and checks what the
// report read and drew: every host, every minute, the stalls in each
// host's row, and images that decode at the expected sizes.
func TestReportOfASimulatedFleet(t *testing.T) {
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	cfg := sim.Config{Scenario: sim.ThousandSpikes, Hosts: 12, Duration: time.Hour, Start: start, Seed: 1, CounterStep: 30 * time.Second}
	truth, _, err := sim.Load(ctx, st, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range truth.Windows {
		if err := st.Exec(ctx, `INSERT INTO spikes (service, host, hw_class, window_start, window_end, peak_us, baseline_us, score, detector_version, detected_at)
			VALUES ('checkout', '`+w.Host+`', '', fromUnixTimestamp64Milli(`+itoa(w.Start.UnixMilli())+`), fromUnixTimestamp64Milli(`+itoa(w.End.UnixMilli())+`), 1000000, 4000, 10, 'test', now64(3))`); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Gather(ctx, st, "checkout", start, start.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Hosts) != 12 || len(f.Minutes) != 61 || len(f.Spikes) != len(truth.Windows) {
		t.Fatalf("%d hosts, %d minutes, %d spikes; want 12, 61, %d", len(f.Hosts), len(f.Minutes), len(f.Spikes), len(truth.Windows))
	}
	// Each stall's minute shows ~1 s in its host's row; the fleet mean stays
	// a few milliseconds.
	row := map[string]int{}
	for i, h := range f.Hosts {
		row[h] = i
	}
	for _, w := range truth.Windows {
		m := int(w.Start.Sub(f.From) / time.Minute)
		if got := f.HostMax[row[w.Host]][m]; got < 500 {
			t.Errorf("%s at %s: minute max %.1f ms, want ≥ 500", w.Host, w.Start.Format("15:04:05"), got)
		}
	}
	for i, v := range f.MeanMS[:60] {
		if v < 2 || v > 20 {
			t.Errorf("minute %d: fleet mean %.2f ms", i, v)
		}
	}
	f.Text = []string{"Every host stalls <1 s>."}
	var out bytes.Buffer
	if err := Write(&out, f); err != nil {
		t.Fatal(err)
	}
	page := out.String()
	if !strings.Contains(page, "Every host stalls &lt;1 s&gt;.") || !strings.Contains(page, "<polyline") {
		t.Error("the finding or the averaged plot is missing (or the text is not escaped)")
	}
	imgs := regexp.MustCompile(`data:image/png;base64,([^"]+)`).FindAllStringSubmatch(page, -1)
	if len(imgs) != 2 {
		t.Fatalf("%d images, want 2", len(imgs))
	}
	for _, m := range imgs {
		b, err := base64.StdEncoding.DecodeString(html.UnescapeString(m[1])) // the attribute may escape + as &#43;
		if err != nil {
			t.Fatalf("base64: %v (%q)", err, m[1][:40])
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if h := img.Bounds().Dy(); h != 12*cellH {
			t.Errorf("image height %d, want %d (one band per host)", h, 12*cellH)
		}
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
