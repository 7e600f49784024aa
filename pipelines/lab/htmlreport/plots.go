package htmlreport

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Row layout of the per-host plots.
const (
	// maxRows is the most hosts a per-host plot draws; a larger fleet
	// shows the hosts with the most spike windows, and the caption says so.
	maxRows = 300
	// hostLabelRows is the most rows that get a host name each; above it
	// only the classes are labelled (each row names its host on hover).
	hostLabelRows = 40
	bandGap       = 8 // pixels between hardware classes
)

// hostRows is the per-host plots' vertical axis: the hosts drawn, grouped
// by hardware class, each class a band.
type hostRows struct {
	hosts  []int // indexes into Fleet.Hosts, in drawing order
	y      []float64
	height float64 // of one row
	bands  []band
	total  int // hosts in the fleet
	area   float64
}

type band struct {
	class      string
	hosts      int // drawn
	top, under float64
}

// layoutRows picks the hosts to draw (all, or the maxRows with the most
// spike windows), orders them by class then name, and sizes the rows so
// that 300 hosts take 2 px each and a few hosts get room for their names.
func layoutRows(f *Fleet) hostRows {
	idx := make([]int, len(f.Hosts))
	for i := range idx {
		idx[i] = i
	}
	if len(idx) > maxRows {
		spikes := map[string]int{}
		for _, s := range f.Spikes {
			spikes[s.Host]++
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			return cmp.Or(cmp.Compare(spikes[f.Hosts[b]], spikes[f.Hosts[a]]), cmp.Compare(f.Hosts[a], f.Hosts[b]))
		})
		idx = idx[:maxRows]
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		return cmp.Or(cmp.Compare(f.HWClass[a], f.HWClass[b]), cmp.Compare(f.Hosts[a], f.Hosts[b]))
	})
	r := hostRows{hosts: idx, total: len(f.Hosts)}
	r.height = min(max(math.Floor(600/float64(max(len(idx), 1))), 2), 14)
	y := float64(marginTop)
	for i, h := range idx {
		if i > 0 && f.HWClass[h] != f.HWClass[idx[i-1]] {
			r.bands[len(r.bands)-1].under = y
			y += bandGap
		}
		if i == 0 || f.HWClass[h] != f.HWClass[idx[i-1]] {
			r.bands = append(r.bands, band{class: f.HWClass[h], top: y})
		}
		r.bands[len(r.bands)-1].hosts++
		r.y = append(r.y, y)
		y += r.height
	}
	if len(r.bands) > 0 {
		r.bands[len(r.bands)-1].under = y
	}
	r.area = y - marginTop
	return r
}

func classLabel(c string) string {
	if c == "" {
		return "(no class)"
	}
	return c
}

// axis labels the rows: each class's band with its name and host count,
// and each host by name when there are few enough to read.
func (r hostRows) axis(d *svgDoc, f *Fleet) {
	d.raw(`<g class="axis y">`)
	for _, b := range r.bands {
		fmt.Fprintf(&d.b, `<g class="band" data-class="%s" data-hosts="%d" data-top="%s" data-bottom="%s">`, esc(b.class), b.hosts, num(b.top), num(b.under))
		d.line(marginLeft-4, b.top, marginLeft-4, b.under, "#444")
		hosts := fmt.Sprintf("%d hosts", b.hosts)
		if b.hosts == 1 {
			hosts = "1 host"
		}
		x, anchor := float64(marginLeft-8), "end"
		if len(r.hosts) <= hostLabelRows {
			x, anchor = 6, "start"
		}
		mid := (b.top + b.under) / 2
		d.text(x, mid-2, anchor, `class="class-label" font-weight="bold"`, classLabel(b.class))
		d.text(x, mid+11, anchor, `class="class-count"`, hosts)
		d.raw(`</g>`)
	}
	if len(r.hosts) <= hostLabelRows {
		size := min(r.height-1, 10)
		for i, h := range r.hosts {
			d.text(marginLeft-8, r.y[i]+r.height/2+size/3, "end", fmt.Sprintf(`class="host-label" font-size="%s"`, num(size)), f.Hosts[h])
		}
	}
	d.raw(`</g>`)
}

// note says which hosts the rows show, for the captions.
func (r hostRows) note(f *Fleet) string {
	if len(r.hosts) == 0 {
		return "no host reported requests"
	}
	var parts []string
	for _, b := range r.bands {
		parts = append(parts, fmt.Sprintf("%s (%d)", classLabel(b.class), b.hosts))
	}
	s := "one row per host, grouped by hardware class (" + strings.Join(parts, ", ") + ") and sorted by name within a class"
	if len(r.hosts) < r.total {
		s = fmt.Sprintf("%d of the %d hosts, those with the most spike windows; ", len(r.hosts), r.total) + s
	}
	if len(r.hosts) > hostLabelRows {
		s += "; point at a row for its host's name"
	}
	return s
}

// rowTargets gives each row an invisible rectangle whose tooltip names
// its host: 300 names do not fit beside 2-px rows.
func (r hostRows) rowTargets(d *svgDoc, f *Fleet) {
	fmt.Fprintf(&d.b, `<g class="rows" fill-opacity="0" data-x="%d" data-width="%d">`, marginLeft, areaWidth)
	for i, h := range r.hosts {
		fmt.Fprintf(&d.b, `<rect class="row" x="%d" y="%s" width="%d" height="%s"><title>%s · %s</title></rect>`,
			marginLeft, num(r.y[i]), areaWidth, num(r.height), esc(f.Hosts[h]), esc(classLabel(f.HWClass[h])))
	}
	d.raw(`</g>`)
}

// columnMinutes is how many minutes one heat map column holds: one, unless
// columns would be narrower than 1.5 px (past 400 minutes), then a round
// number of minutes.
func columnMinutes(minutes int) int {
	for _, m := range []int{1, 2, 5, 10, 15, 30, 60} {
		if float64(minutes)/float64(m) <= areaWidth/1.5 {
			return m
		}
	}
	return 60
}

// heatmapSVG draws each host's slowest request per minute (or per column
// of minutes) as a cell coloured on a log scale between the data's fastest
// and slowest cell. The map is one path per colour, so the file grows with
// the number of colour changes along the rows, not with the cells.
func heatmapSVG(f *Fleet, rows hostRows) (svg, caption string) {
	ts := timeScale{from: f.From, to: f.To}
	minutes := min(len(f.Minutes), int(math.Ceil(f.To.Sub(f.From).Minutes())))
	per := columnMinutes(minutes)
	cols := (minutes + per - 1) / per
	colMax := func(h, c int) float64 {
		v := 0.0
		for m := c * per; m < min((c+1)*per, minutes); m++ {
			v = math.Max(v, f.HostMax[h][m])
		}
		return v
	}
	scale, ok := newLogScale(ylOrRd, func(yield func(float64) bool) {
		for _, h := range rows.hosts {
			for c := 0; c < cols; c++ {
				if !yield(colMax(h, c)) {
					return
				}
			}
		}
	})
	title := "Per host: the slowest request of each minute"
	if per > 1 {
		title = fmt.Sprintf("Per host: the slowest request of each %d minutes", per)
	}
	height := marginTop + math.Max(rows.area, 160) + axisHeight
	d := newSVG(plotWidth, height, title)
	d.rect(marginLeft, marginTop, areaWidth, rows.area, noDataColor, `class="area"`)
	noData := false
	// A row is drawn as horizontal strokes as thick as the row, one per
	// run of cells of one colour, in column units (the group's transform
	// scales a column to its width in pixels): one path per colour, ~10
	// bytes per run.
	spanCols := f.To.Sub(f.From).Minutes() / float64(per)
	runs := map[string]*strings.Builder{}
	for i, h := range rows.hosts {
		yc := rows.y[i] - marginTop + rows.height/2
		for c := 0; c < cols; {
			color := noDataColor
			if v := colMax(h, c); v > 0 && ok {
				color = scale.color(v)
			}
			e := c + 1
			for e < cols {
				next := noDataColor
				if w := colMax(h, e); w > 0 && ok {
					next = scale.color(w)
				}
				if next != color {
					break
				}
				e++
			}
			if color == noDataColor {
				noData = true // the area's background shows through
			} else {
				b := runs[color]
				if b == nil {
					b = &strings.Builder{}
					runs[color] = b
				}
				fmt.Fprintf(b, "M%d %sh%s", c, num(yc), num(math.Min(float64(e), spanCols)-float64(c)))
			}
			c = e
		}
	}
	fmt.Fprintf(&d.b, `<g class="cells" data-column-minutes="%d" transform="translate(%d %d) scale(%s 1)" fill="none" stroke-width="%s" shape-rendering="crispEdges">`,
		per, marginLeft, marginTop, strconv.FormatFloat(areaWidth/math.Max(spanCols, 1e-9), 'f', -1, 64), num(rows.height))
	for _, c := range scale.pal.colors {
		if runs[c] != nil {
			fmt.Fprintf(&d.b, `<path stroke="%s" d="%s"/>`, c, runs[c].String())
		}
	}
	d.raw(`</g>`)
	rows.rowTargets(d, f)
	rows.axis(d, f)
	ts.axis(d, marginTop+math.Max(rows.area, 160))
	column, cell := "one column per minute", "that minute"
	if per > 1 {
		column, cell = fmt.Sprintf("one column per %d minutes", per), fmt.Sprintf("those %d minutes", per)
	}
	if !ok {
		return d.String(), "No requests in this range: nothing to colour (" + rows.note(f) + ")."
	}
	legend := "slowest request\nin the minute (ms)"
	if per > 1 {
		legend = fmt.Sprintf("slowest request\nin %d minutes (ms)", per)
	}
	scale.legend(d, marginTop+12, legend, noData)
	caption = fmt.Sprintf("%s; %s. A cell's colour is the slowest request of its host in %s, on a log scale in %d steps from %s (%s, the fastest cell here) to %s (%s, the slowest)",
		upperFirst(rows.note(f)), column, cell, len(scale.pal.colors), scale.pal.names[0], formatMS(scale.min), scale.pal.names[len(scale.pal.names)-1], formatMS(scale.max))
	if scale.max <= scale.min {
		caption = fmt.Sprintf("%s; %s. Every cell's slowest request took %s: one colour, %s",
			upperFirst(rows.note(f)), column, formatMS(scale.max), scale.pal.names[len(scale.pal.names)-1])
	}
	if noData {
		caption += "; grey: no requests"
	}
	return d.String(), caption + ". A host's own spikes are its isolated dark cells; a column dark on every row would be a fleet-wide event."
}

// rasterSVG marks each spike window at its host's row, from its start to
// its end (at least 2 px wide), coloured by its slowest request.
func rasterSVG(f *Fleet, rows hostRows) (svg, caption string) {
	ts := timeScale{from: f.From, to: f.To}
	drawn := map[string]int{}
	for i, h := range rows.hosts {
		drawn[f.Hosts[h]] = i
	}
	pal := ylOrRd.from(4)
	scale, ok := newLogScale(pal, func(yield func(float64) bool) {
		for _, s := range f.Spikes {
			if _, in := drawn[s.Host]; in && !yield(s.PeakMS) {
				return
			}
		}
	})
	const title = "Spike windows: each host's detected stalls"
	height := marginTop + math.Max(rows.area, 160) + axisHeight
	d := newSVG(plotWidth, height, title)
	d.rect(marginLeft, marginTop, areaWidth, rows.area, "#fafafa", `class="area" stroke="#ccc"`)
	for _, b := range rows.bands[min(1, len(rows.bands)):] {
		d.line(marginLeft, b.top-bandGap/2, marginLeft+areaWidth, b.top-bandGap/2, "#ccc")
	}
	// As the heat map's rows: one path per colour, a stroke as thick as
	// the row per spike window.
	marks := 0
	runs := map[string]*strings.Builder{}
	for _, s := range f.Spikes {
		i, in := drawn[s.Host]
		if !in || !s.End.After(f.From) || !s.Start.Before(f.To) {
			continue
		}
		x0 := math.Max(ts.x(s.Start), marginLeft)
		x1 := math.Min(math.Max(ts.x(s.End), x0+2), marginLeft+areaWidth)
		color := pal.colors[len(pal.colors)-1]
		if ok {
			color = scale.color(s.PeakMS)
		}
		b := runs[color]
		if b == nil {
			b = &strings.Builder{}
			runs[color] = b
		}
		fmt.Fprintf(b, "M%s %sh%s", num(x0), num(rows.y[i]+rows.height/2), num(x1-x0))
		marks++
	}
	fmt.Fprintf(&d.b, `<g class="spikes" fill="none" stroke-width="%s" shape-rendering="crispEdges">`, num(rows.height))
	for _, c := range pal.colors {
		if runs[c] != nil {
			fmt.Fprintf(&d.b, `<path stroke="%s" d="%s"/>`, c, runs[c].String())
		}
	}
	d.raw(`</g>`)
	rows.rowTargets(d, f)
	rows.axis(d, f)
	ts.axis(d, marginTop+math.Max(rows.area, 160))
	note := upperFirst(rows.note(f))
	if !ok {
		return d.String(), note + ". No spike windows were detected in this range."
	}
	scale.legend(d, marginTop+12, "spike's slowest\nrequest (ms)", false)
	caption = fmt.Sprintf("%s. Each of the %d marks is one detected spike window, from its start to its end (at least 2 px wide), coloured by its slowest request on a log scale from %s (%s) to %s (%s).",
		note, marks, pal.names[0], formatMS(scale.min), pal.names[len(pal.names)-1], formatMS(scale.max))
	if scale.max <= scale.min {
		caption = fmt.Sprintf("%s. Each of the %d marks is one detected spike window, from its start to its end (at least 2 px wide); every one's slowest request took %s (%s).",
			note, marks, formatMS(scale.max), pal.names[len(pal.names)-1])
	}
	return d.String(), caption + " Marks at a steady rhythm along each row, rows out of step with one another: every host recurs at its own phase. A vertical line would be a fleet-synchronized event; one dense row, an isolated host."
}

// averagedSVG plots the fleet's per-minute mean and p99: the view that
// makes rare per-host spikes look like a uniform regression.
func averagedSVG(f *Fleet) (svg, caption string) {
	ts := timeScale{from: f.From, to: f.To}
	const areaH = 200
	top := 0.0
	for i := range f.Minutes {
		top = math.Max(top, math.Max(f.MeanMS[i], f.P99MS[i]))
	}
	step := niceStep(top / 4)
	ymax := step * math.Max(math.Ceil(top/step), 1)
	y := func(v float64) float64 { return marginTop + areaH*(1-v/ymax) }
	const title = "Averaged over the fleet: mean and p99 latency per minute"
	d := newSVG(plotWidth, marginTop+areaH+axisHeight, title)
	d.raw(`<g class="axis y">`)
	decimals := max(0, int(-math.Floor(math.Log10(step))))
	for k := 0; float64(k)*step <= ymax+step/2; k++ {
		v := float64(k) * step
		d.raw(`<g class="tick">`)
		d.line(marginLeft, y(v), marginLeft+areaWidth, y(v), "#e5e5e5")
		d.text(marginLeft-6, y(v)+4, "end", "", strconv.FormatFloat(v, 'f', decimals, 64)+" ms")
		d.raw(`</g>`)
	}
	d.text(marginLeft-70, marginTop+areaH/2, "middle", fmt.Sprintf(`class="axis-title" transform="rotate(-90 %d %s)"`, marginLeft-70, num(marginTop+areaH/2)), "latency (ms)")
	d.line(marginLeft, marginTop, marginLeft, marginTop+areaH, "#444")
	d.raw(`</g>`)
	series := []struct {
		name, color string
		vals        []float64
	}{{"fleet mean", "#1f77b4", f.MeanMS}, {"fleet p99", "#d62728", f.P99MS}}
	for _, s := range series {
		var p strings.Builder
		pen := false
		for i, v := range s.vals {
			t := f.Minutes[i]
			if v <= 0 || !t.Before(f.To) {
				pen = false // a minute without requests breaks the line
				continue
			}
			cmd := "L"
			if !pen {
				cmd = "M"
			}
			fmt.Fprintf(&p, "%s%s %s", cmd, num(ts.x(t.Add(30*time.Second))), num(y(v)))
			pen = true
		}
		fmt.Fprintf(&d.b, `<path class="series" data-name="%s" fill="none" stroke="%s" stroke-width="1.5" d="%s"/>`, s.name, s.color, p.String())
	}
	ts.axis(d, marginTop+areaH)
	// The legend: a line swatch per series, right of the area.
	x := float64(marginLeft + areaWidth + 16)
	d.raw(`<g class="legend">`)
	for i, s := range series {
		yy := marginTop + 20 + float64(i)*18
		fmt.Fprintf(&d.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"/>`, num(x), num(yy), num(x+18), num(yy), s.color)
		d.text(x+24, yy+4, "start", `class="legend-label"`, s.name+" (ms)")
	}
	d.raw(`</g>`)
	return d.String(), "The mean (blue) and p99 (red) of every request of every host, per minute, on a linear scale in milliseconds. Rare one-second stalls on every host, at different moments, are smeared into a higher, flat line: it reads as a uniform regression."
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
