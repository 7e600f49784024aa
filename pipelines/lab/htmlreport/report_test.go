package htmlreport

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// simulated is a small thousand-spikes fleet loaded into the real engine,
// each stall marked as a spike window, gathered and rendered once for the
// tests that read the page.
var simulated struct {
	once  sync.Once
	fleet *Fleet
	page  string
	truth sim.Truth
	err   error
}

func simulatedReport(t *testing.T) (*Fleet, string, sim.Truth) {
	t.Helper()
	simulated.once.Do(func() {
		ctx := context.Background()
		st := testenv.ClickHouse(t)
		simulated.err = func() error {
			if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
				return err
			}
			start := testenv.RecentDay().Add(6 * time.Hour)
			cfg := sim.Config{Scenario: sim.ThousandSpikes, Hosts: 12, Duration: time.Hour, Start: start, Seed: 1, CounterStep: 30 * time.Second}
			truth, _, err := sim.Load(ctx, st, cfg, nil, nil)
			if err != nil {
				return err
			}
			simulated.truth = truth
			for i, w := range truth.Windows {
				// Peaks spread from 300 ms to 1 s, so that the raster's
				// colour scale has a range to label.
				peak := 300000 + 700000*i/max(len(truth.Windows)-1, 1)
				if err := st.Exec(ctx, `INSERT INTO spikes (service, host, hw_class, window_start, window_end, peak_us, baseline_us, score, detector_version, detected_at)
					VALUES ('checkout', '`+w.Host+`', '', fromUnixTimestamp64Milli(`+itoa(w.Start.UnixMilli())+`), fromUnixTimestamp64Milli(`+itoa(w.End.UnixMilli())+`), `+strconv.Itoa(peak)+`, 4000, 10, 'test', now64(3))`); err != nil {
					return err
				}
			}
			f, err := Gather(ctx, st, "checkout", start, start.Add(time.Hour))
			if err != nil {
				return err
			}
			f.Steps = []Step{{Title: "1. The averaged view", Paragraphs: []Paragraph{{Text: "Every host stalls <1 s>."}}, Figures: []Figure{FigureAveraged}}}
			var out bytes.Buffer
			if err := Write(&out, f); err != nil {
				return err
			}
			simulated.fleet, simulated.page = f, out.String()
			return nil
		}()
	})
	if simulated.err != nil {
		t.Fatal(simulated.err)
	}
	return simulated.fleet, simulated.page, simulated.truth
}

// Gather reads every host, every minute and every spike window, and the
// stalls show in their hosts' rows while the fleet mean stays low.
func TestReportGathersEveryHostMinuteAndSpikeOfASimulatedFleet(t *testing.T) {
	f, page, truth := simulatedReport(t)
	if len(f.Hosts) != 12 || len(f.Minutes) != 61 || len(f.Spikes) != len(truth.Windows) {
		t.Fatalf("%d hosts, %d minutes, %d spikes; want 12, 61, %d", len(f.Hosts), len(f.Minutes), len(f.Spikes), len(truth.Windows))
	}
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
	if !strings.Contains(page, "Every host stalls &lt;1 s&gt;.") {
		t.Error("the finding is missing from the page, or not escaped")
	}
}

// Each plot has a time axis whose labels are UTC clock times at round
// steps, from the data's first minute to its end, each placed where its
// time falls on the axis.
func TestEveryPlotHasAUTCTimeAxisWhoseTicksSpanTheDataAndSitAtTheirTimes(t *testing.T) {
	f, page, _ := simulatedReport(t)
	doc := parsePage(t, page)
	span := f.To.Sub(f.From)
	for _, id := range []string{"averaged", "heatmap", "raster"} {
		svg, _ := figureSVG(t, doc, id)
		axis := find(t, svg, "g", "axis", "x")
		base := find(t, axis, "line")
		x0, x1 := floatAttr(t, base, "x1"), floatAttr(t, base, "x2")
		if title := text(find(t, axis, "text", "axis-title")); title != "time (UTC), "+f.From.Format("2006-01-02") {
			t.Errorf("%s: axis title %q, want the UTC date of the data", id, title)
		}
		var times []time.Time
		for _, tick := range findAll(axis, "g", "tick") {
			label := text(find(t, tick, "text"))
			at, err := time.Parse(time.RFC3339, attr(tick, "data-time"))
			if err != nil {
				t.Fatalf("%s: tick %q: %v", id, label, err)
			}
			if label != at.UTC().Format("15:04") {
				t.Errorf("%s: tick at %s labelled %q, want its UTC clock time", id, at.UTC().Format(time.RFC3339), label)
			}
			if at.Before(f.From) || at.After(f.To) {
				t.Errorf("%s: tick %s outside the data's %s–%s", id, label, f.From.Format("15:04"), f.To.Format("15:04"))
			}
			want := x0 + (x1-x0)*at.Sub(f.From).Seconds()/span.Seconds()
			if x := floatAttr(t, find(t, tick, "line"), "x1"); math.Abs(x-want) > 0.01 {
				t.Errorf("%s: tick %s at x=%g, want %g", id, label, x, want)
			}
			times = append(times, at)
		}
		if len(times) < 3 {
			t.Fatalf("%s: %d ticks, want at least 3", id, len(times))
		}
		step := times[1].Sub(times[0])
		if times[0].Sub(f.From) >= step || f.To.Sub(times[len(times)-1]) >= step {
			t.Errorf("%s: ticks %s…%s every %s do not span the data's %s–%s", id,
				times[0].Format("15:04"), times[len(times)-1].Format("15:04"), step, f.From.Format("15:04"), f.To.Format("15:04"))
		}
	}
}

// The per-host plots label their rows: one band per hardware class with
// its name and host count, every host's row inside its class's band, and
// (12 hosts being few) each host's name beside its row.
func TestPerHostPlotsLabelEachClassBandAndEachHostRow(t *testing.T) {
	f, page, _ := simulatedReport(t)
	doc := parsePage(t, page)
	classOf := map[string]string{}
	perClass := map[string]int{}
	for i, h := range f.Hosts {
		classOf[h] = f.HWClass[i]
		perClass[f.HWClass[i]]++
	}
	if len(perClass) < 2 {
		t.Fatalf("the simulated fleet has classes %v; want two to label", perClass)
	}
	for _, id := range []string{"heatmap", "raster"} {
		svg, _ := figureSVG(t, doc, id)
		axis := find(t, svg, "g", "axis", "y")
		bands := map[string][2]float64{}
		for _, b := range findAll(axis, "g", "band") {
			name := text(find(t, b, "text", "class-label"))
			count := text(find(t, b, "text", "class-count"))
			if want := fmt.Sprintf("%d hosts", perClass[name]); count != want {
				t.Errorf("%s: class %q labelled %q, want %q", id, name, count, want)
			}
			bands[name] = [2]float64{floatAttr(t, b, "data-top"), floatAttr(t, b, "data-bottom")}
		}
		if len(bands) != len(perClass) {
			t.Errorf("%s: class bands %v, want one per class of %v", id, bands, perClass)
		}
		var rowHosts []string
		for _, r := range findAll(svg, "rect", "row") {
			host, class, _ := strings.Cut(text(r), " · ")
			if classOf[host] != class {
				t.Errorf("%s: row %q, want class %q", id, text(r), classOf[host])
			}
			b := bands[class]
			if y := floatAttr(t, r, "y"); y < b[0] || y+floatAttr(t, r, "height") > b[1]+0.01 {
				t.Errorf("%s: %s's row at y=%g is outside its class band %v", id, host, y, b)
			}
			rowHosts = append(rowHosts, host)
		}
		var labels []string
		for _, l := range findAll(axis, "text", "host-label") {
			labels = append(labels, text(l))
		}
		if !slices.Equal(labels, rowHosts) {
			t.Errorf("%s: host labels %v, want the rows' hosts %v", id, labels, rowHosts)
		}
		sorted := slices.Clone(rowHosts)
		slices.Sort(sorted)
		if want := slices.Sorted(func(yield func(string) bool) {
			for _, h := range f.Hosts {
				if !yield(h) {
					return
				}
			}
		}); !slices.Equal(sorted, want) {
			t.Errorf("%s: rows %v, want every host of the data %v", id, rowHosts, want)
		}
	}
}

// The colour scales are in ms and labelled, at their ends, with the
// smallest and largest value they colour: the heat map's fastest and
// slowest minute, the raster's mildest and worst spike.
func TestColourScalesAreLabelledWithTheDataMinimumAndMaximumInMilliseconds(t *testing.T) {
	f, page, _ := simulatedReport(t)
	doc := parsePage(t, page)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, row := range f.HostMax {
		for _, v := range row {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	plo, phi := math.Inf(1), math.Inf(-1)
	for _, s := range f.Spikes {
		plo, phi = math.Min(plo, s.PeakMS), math.Max(phi, s.PeakMS)
	}
	for _, c := range []struct {
		id      string
		lo, hi  float64
		heading string
	}{{"heatmap", lo, hi, "slowest request in the minute (ms)"}, {"raster", plo, phi, "spike's slowest request (ms)"}} {
		svg, _ := figureSVG(t, doc, c.id)
		scale := find(t, svg, "g", "scale")
		var title []string
		for _, l := range findAll(scale, "text", "scale-title") {
			title = append(title, text(l))
		}
		if got := strings.Join(title, " "); got != c.heading {
			t.Errorf("%s: scale titled %q, want %q", c.id, got, c.heading)
		}
		for _, end := range []struct {
			class string
			want  float64
		}{{"scale-min", c.lo}, {"scale-max", c.hi}} {
			got := msLabel(t, text(find(t, scale, "text", end.class)))
			if math.Abs(got-end.want) > 0.005*end.want {
				t.Errorf("%s: %s labelled %g ms, the data's is %g ms", c.id, end.class, got, end.want)
			}
		}
	}
}

// The captions name the colours the plots draw: the colour the caption
// gives the fastest cell is the colour of the fastest minute's cell and
// of the scale's bottom, and so for the slowest, the raster's likewise.
func TestCaptionsNameTheColoursTheCellsAreDrawnIn(t *testing.T) {
	f, page, _ := simulatedReport(t)
	doc := parsePage(t, page)
	ends := regexp.MustCompile(`from ([a-z -]+?) \(([\d.]+) ms[^)]*\) to ([a-z -]+?) \(([\d.]+) ms`)

	// The heat map: which host and minute hold the data's extremes.
	type cell struct {
		host   string
		minute int
		ms     float64
	}
	fastest, slowest := cell{ms: math.Inf(1)}, cell{ms: math.Inf(-1)}
	for h, row := range f.HostMax {
		for m, v := range row[:60] {
			if v > 0 && v < fastest.ms {
				fastest = cell{f.Hosts[h], m, v}
			}
			if v > slowest.ms {
				slowest = cell{f.Hosts[h], m, v}
			}
		}
	}
	svg, caption := figureSVG(t, doc, "heatmap")
	m := ends.FindStringSubmatch(caption)
	if m == nil {
		t.Fatalf("heatmap caption names no colours from the fastest to the slowest: %q", caption)
	}
	cells := find(t, svg, "g", "cells")
	var tx, ty, sx float64
	if _, err := fmt.Sscanf(attr(cells, "transform"), "translate(%g %g) scale(%g 1)", &tx, &ty, &sx); err != nil {
		t.Fatalf("cells transform %q: %v", attr(cells, "transform"), err)
	}
	if per := attr(cells, "data-column-minutes"); per != "1" {
		t.Fatalf("one hour in %s-minute columns, want 1", per)
	}
	colourAt := func(c cell) string {
		for _, p := range findAll(cells, "path") {
			for _, s := range segments(t, attr(p, "d")) {
				if float64(c.minute) >= s.x && float64(c.minute) < s.x+s.w && rowOf(t, svg, ty+s.y) == c.host {
					return attr(p, "stroke")
				}
			}
		}
		t.Fatalf("no cell drawn for %s at minute %d", c.host, c.minute)
		return ""
	}
	swatches := findAll(find(t, svg, "g", "scale"), "rect", "swatch")
	for _, end := range []struct {
		which  string
		c      cell
		name   string
		label  string
		swatch string
	}{
		{"fastest", fastest, m[1], m[2], attr(swatches[0], "fill")},
		{"slowest", slowest, m[3], m[4], attr(swatches[len(swatches)-1], "fill")},
	} {
		drawn := colourAt(end.c)
		if !colourWordFits(t, end.name, drawn) {
			t.Errorf("heatmap: the caption calls the %s cell (%s, %.1f ms) %q, but it is drawn %s", end.which, end.c.host, end.c.ms, end.name, drawn)
		}
		if drawn != end.swatch {
			t.Errorf("heatmap: the %s cell is drawn %s, the scale's end is %s", end.which, drawn, end.swatch)
		}
		if v, _ := strconv.ParseFloat(end.label, 64); math.Abs(v-end.c.ms) > 0.005*end.c.ms {
			t.Errorf("heatmap: the caption gives the %s cell %s ms, the data %.2f ms", end.which, end.label, end.c.ms)
		}
	}

	// The raster: the mildest and the worst spike's marks.
	svg, caption = figureSVG(t, doc, "raster")
	if m = ends.FindStringSubmatch(caption); m == nil {
		t.Fatalf("raster caption names no colours from the mildest to the worst spike: %q", caption)
	}
	mild, worst := f.Spikes[0], f.Spikes[0]
	for _, s := range f.Spikes {
		if s.PeakMS < mild.PeakMS {
			mild = s
		}
		if s.PeakMS > worst.PeakMS {
			worst = s
		}
	}
	ts := timeScale{from: f.From, to: f.To}
	markColour := func(s Spike) string {
		for _, p := range findAll(find(t, svg, "g", "spikes"), "path") {
			for _, seg := range segments(t, attr(p, "d")) {
				if math.Abs(seg.x-ts.x(s.Start)) < 0.01 && rowOf(t, svg, seg.y) == s.Host {
					return attr(p, "stroke")
				}
			}
		}
		t.Fatalf("no mark for %s's spike at %s", s.Host, s.Start.Format("15:04:05"))
		return ""
	}
	if c := markColour(mild); !colourWordFits(t, m[1], c) {
		t.Errorf("raster: the caption calls the mildest spike (%.0f ms) %q, but it is drawn %s", mild.PeakMS, m[1], c)
	}
	if c := markColour(worst); !colourWordFits(t, m[3], c) {
		t.Errorf("raster: the caption calls the worst spike (%.0f ms) %q, but it is drawn %s", worst.PeakMS, m[3], c)
	}
}

// Nothing on the page is scaled where the column has room: every <svg>
// is as large as its viewBox (one user unit, one CSS pixel) and no wider
// than the page's 900 px column; the stylesheet's only sizing of an svg
// is max-width:100% with height:auto, which shrinks a plot whole to a
// narrower window (the browser test measures it there); no rule sizes an
// img, and every <img> (there is none today) is its image's natural size.
func TestReportDrawsEveryPlotAtTheSizeItIsShown(t *testing.T) {
	_, page, _ := simulatedReport(t)
	doc := parsePage(t, page)
	for _, s := range findAll(doc, "style") {
		for _, rule := range strings.Split(text(s), "}") {
			sel, decl, _ := strings.Cut(rule, "{")
			for _, el := range strings.Split(sel, ",") {
				el = strings.TrimSpace(el)
				isImg := el == "img" || strings.HasSuffix(el, " img")
				isSVG := el == "svg" || strings.HasSuffix(el, " svg")
				for _, d := range strings.Split(decl, ";") {
					prop, val, _ := strings.Cut(d, ":")
					prop, val = strings.TrimSpace(prop), strings.TrimSpace(val)
					if !regexp.MustCompile(`^(min-|max-)?(width|height)$`).MatchString(prop) {
						continue
					}
					if isImg || isSVG && !(prop == "max-width" && val == "100%" || prop == "height" && val == "auto") {
						t.Errorf("stylesheet rule %q sizes %s away from its own size", strings.TrimSpace(rule)+"}", el)
					}
				}
			}
		}
	}
	svgs := findAll(doc, "svg")
	if len(svgs) != 3 {
		t.Errorf("%d plots, want 3", len(svgs))
	}
	for _, s := range svgs {
		var x, y, w, h float64
		if _, err := fmt.Sscanf(attr(s, "viewBox"), "%g %g %g %g", &x, &y, &w, &h); err != nil {
			t.Fatalf("svg viewBox %q: %v", attr(s, "viewBox"), err)
		}
		if floatAttr(t, s, "width") != w || floatAttr(t, s, "height") != h {
			t.Errorf("svg %s×%s shows a viewBox of %g×%g: scaled", attr(s, "width"), attr(s, "height"), w, h)
		}
		if w > 900 {
			t.Errorf("svg %g px wide, wider than the page's 900 px column", w)
		}
	}
	for _, img := range findAll(doc, "img") {
		nw, nh := imgNaturalSize(t, img)
		if attr(img, "width") != strconv.Itoa(nw) || attr(img, "height") != strconv.Itoa(nh) {
			t.Errorf("<img> of %d×%d shown at width=%q height=%q", nw, nh, attr(img, "width"), attr(img, "height"))
		}
	}
}

// A fleet larger than the plots' rows shows the hosts with the most spike
// windows, still grouped by class, and its captions say how many of how
// many.
func TestAFleetOfMoreThan300HostsShowsThe300WithTheMostSpikesAndSaysSo(t *testing.T) {
	from := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC) // fixed date: a page rendered in memory, never stored
	f := &Fleet{Service: "checkout", From: from, To: from.Add(time.Hour)}
	for m := 0; m <= 60; m++ {
		f.Minutes = append(f.Minutes, from.Add(time.Duration(m)*time.Minute))
		f.MeanMS, f.P99MS = append(f.MeanMS, 5), append(f.P99MS, 20)
	}
	spiky := map[string]bool{}
	for h := 0; h < 400; h++ {
		name := fmt.Sprintf("node-%04d", h)
		f.Hosts = append(f.Hosts, name)
		f.HWClass = append(f.HWClass, []string{"gen4", "gen5"}[h%2])
		row := make([]float64, 61)
		for m := range 60 {
			row[m] = 10
		}
		f.HostMax = append(f.HostMax, row)
		// Hosts 100–399 spike twice, the others once.
		for k := range 1 + min(h/100, 1) {
			at := from.Add(time.Duration(h%50+k) * time.Minute)
			f.Spikes = append(f.Spikes, Spike{Host: name, Start: at, End: at.Add(time.Second), PeakMS: 900})
			row[h%50+k] = 900
		}
		spiky[name] = h >= 100
	}
	var out bytes.Buffer
	if err := Write(&out, f); err != nil {
		t.Fatal(err)
	}
	doc := parsePage(t, out.String())
	for _, id := range []string{"heatmap", "raster"} {
		svg, caption := figureSVG(t, doc, id)
		rows := findAll(svg, "rect", "row")
		if len(rows) != 300 {
			t.Errorf("%s: %d rows, want 300", id, len(rows))
		}
		for _, r := range rows {
			if host, _, _ := strings.Cut(text(r), " · "); !spiky[host] {
				t.Errorf("%s: shows %s, one of the hosts with fewest spikes", id, host)
				break
			}
		}
		if !strings.Contains(caption, "300 of the 400 hosts, those with the most spike windows") {
			t.Errorf("%s: caption does not say which hosts it shows: %q", id, caption)
		}
		if h := floatAttr(t, svg, "height"); h > 800 {
			t.Errorf("%s: %g px tall for 300 rows", id, h)
		}
	}
}

// The page shows each step of the finding as a heading with its whole
// paragraphs, and each plot under the step that names it.
func TestReportShowsStepsAsHeadingsWithWholeParagraphsAndTheirPlots(t *testing.T) {
	from := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC) // fixed date: a page rendered in memory, never stored
	f := &Fleet{Service: "checkout", From: from, To: from.Add(time.Hour), Hosts: []string{"a"}, HWClass: []string{"gen4"}}
	for m := 0; m <= 60; m++ {
		f.Minutes = append(f.Minutes, from.Add(time.Duration(m)*time.Minute))
		f.MeanMS, f.P99MS = append(f.MeanMS, 5), append(f.P99MS, 20)
	}
	f.HostMax = [][]float64{make([]float64, 61)}
	long := "Fleet mean latency 5.72 ms and p99 20.1 ms, flat hour after hour: on an averaged dashboard this reads as a uniform regression, and a short profile of any one host will almost never catch the cause."
	f.Steps = []Step{
		{Title: "1. The averaged view", Paragraphs: []Paragraph{{Text: long}, {Text: "Yet 6% of that mean comes from 939 spike windows."}}, Figures: []Figure{FigureAveraged}},
		{Title: "2. Per host: one machine, or all of them?", Paragraphs: []Paragraph{{Text: "60 of 60 hosts had spikes."}}, Figures: []Figure{FigureHeatmap, FigureRaster}},
		{Title: "4. What to capture next", Paragraphs: []Paragraph{{Text: "Bait in every hardware class:", Items: []string{"gen4: 2 of 30", "gen5: 1 of 30"}}, {Text: "Budgets: all 6 admitted."}}},
	}
	var out bytes.Buffer
	if err := Write(&out, f); err != nil {
		t.Fatal(err)
	}
	doc := parsePage(t, out.String())
	sections := findAll(doc, "section")
	if len(sections) != len(f.Steps) {
		t.Fatalf("%d sections, want one per step (%d)", len(sections), len(f.Steps))
	}
	for i, s := range f.Steps {
		if h := text(find(t, sections[i], "h2")); h != s.Title {
			t.Errorf("section %d is headed %q, want %q", i, h, s.Title)
		}
		var paras []Paragraph
		for c := sections[i].FirstChild; c != nil; c = c.NextSibling {
			switch {
			case c.Data == "p":
				paras = append(paras, Paragraph{Text: text(c)})
			case c.Data == "ul" && len(paras) > 0:
				for _, li := range findAll(c, "li") {
					paras[len(paras)-1].Items = append(paras[len(paras)-1].Items, text(li))
				}
			}
		}
		if diff := cmp.Diff(s.Paragraphs, paras); diff != "" {
			t.Errorf("step %q: paragraphs (-want +got):\n%s", s.Title, diff)
		}
		var figs []string
		for _, fig := range findAll(sections[i], "figure") {
			figs = append(figs, attr(fig, "id"))
		}
		want := map[int][]string{0: {"averaged"}, 1: {"heatmap", "raster"}}[i]
		if !slices.Equal(figs, want) {
			t.Errorf("step %q shows plots %v, want %v", s.Title, figs, want)
		}
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
