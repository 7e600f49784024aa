package htmlreport

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
	"time"
)

// The plots are hand-written SVG rather than gonum.org/v1/plot: its heat
// map draws one path per cell (about 5 MB for 300 hosts × 3 hours) or, in
// raster mode, one pixel per cell stretched to the plot's size, and its
// colour bar is a second plot to lay out by hand. Here the heat map is one
// path per colour (a stroke per run of same-coloured cells), every plot is
// drawn at the size it is shown in a window wide enough for the page's
// column (SVG user units are CSS pixels; a narrower window shrinks the
// plot whole, through its viewBox), and the elements carry classes the
// tests read back: axis, tick, band, scale, swatch, row, cells, spikes.

// Geometry shared by the three plots, in CSS pixels, so their time axes
// line up on the page.
const (
	plotWidth   = 900
	marginLeft  = 150 // class (or host) labels
	marginRight = 150 // colour scale or legend
	marginTop   = 34  // title
	areaWidth   = plotWidth - marginLeft - marginRight
	axisHeight  = 44 // tick labels and the axis title below the area
	fontSize    = 11
)

// svgDoc accumulates one <svg> element.
type svgDoc struct {
	b strings.Builder
}

func newSVG(width, height float64, title string) *svgDoc {
	d := &svgDoc{}
	fmt.Fprintf(&d.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" role="img" font-family="sans-serif" font-size="%d">`,
		num(width), num(height), num(width), num(height), fontSize)
	fmt.Fprintf(&d.b, `<title>%s</title>`, esc(title))
	d.text(marginLeft, 20, "start", `class="title" font-size="14" font-weight="bold"`, title)
	return d
}

func (d *svgDoc) raw(s string) { d.b.WriteString(s) }

func (d *svgDoc) text(x, y float64, anchor, attrs, s string) {
	fmt.Fprintf(&d.b, `<text x="%s" y="%s" text-anchor="%s"`, num(x), num(y), anchor)
	if attrs != "" {
		d.b.WriteString(" " + attrs)
	}
	fmt.Fprintf(&d.b, `>%s</text>`, esc(s))
}

func (d *svgDoc) line(x1, y1, x2, y2 float64, stroke string) {
	fmt.Fprintf(&d.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>`, num(x1), num(y1), num(x2), num(y2), stroke)
}

func (d *svgDoc) rect(x, y, w, h float64, fill, attrs string) {
	fmt.Fprintf(&d.b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"`, num(x), num(y), num(w), num(h), fill)
	if attrs != "" {
		d.b.WriteString(" " + attrs)
	}
	d.b.WriteString("/>")
}

func (d *svgDoc) String() string { return d.b.String() + "</svg>" }

// num prints a coordinate to a hundredth of a pixel, without trailing
// zeros: the heat map writes tens of thousands of them.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

func esc(s string) string { return html.EscapeString(s) }

// timeScale maps [from, to) onto the plot area's x range.
type timeScale struct {
	from, to time.Time
}

func (s timeScale) x(t time.Time) float64 {
	span := s.to.Sub(s.from).Seconds()
	if span <= 0 {
		return marginLeft
	}
	return marginLeft + areaWidth*t.Sub(s.from).Seconds()/span
}

// tickSteps are the clock intervals a time axis may use, so that its
// labels fall on round UTC times.
var tickSteps = []time.Duration{
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// ticks are the round UTC times in [from, to] at the smallest step that
// keeps labels at least 80 px apart.
func (s timeScale) ticks() []time.Time {
	span := s.to.Sub(s.from)
	step := tickSteps[len(tickSteps)-1]
	for _, c := range tickSteps {
		if float64(span/c) <= areaWidth/80 {
			step = c
			break
		}
	}
	var out []time.Time
	for t := s.from.Truncate(step); !t.After(s.to); t = t.Add(step) {
		if !t.Before(s.from) {
			out = append(out, t)
		}
	}
	return out
}

// label is a tick's text: the clock time, with the date where the day
// changes after the first tick.
func (s timeScale) label(t time.Time, prev time.Time) string {
	if !prev.IsZero() && t.YearDay() != prev.YearDay() {
		return t.Format("Jan 2 15:04")
	}
	return t.Format("15:04")
}

// axis draws the time axis under an area whose bottom edge is at y.
func (s timeScale) axis(d *svgDoc, y float64) {
	d.raw(`<g class="axis x">`)
	d.line(marginLeft, y, marginLeft+areaWidth, y, "#444")
	var prev time.Time
	for _, t := range s.ticks() {
		x := s.x(t)
		fmt.Fprintf(&d.b, `<g class="tick" data-time="%s">`, t.Format(time.RFC3339))
		d.line(x, y, x, y+5, "#444")
		d.text(x, y+17, "middle", "", s.label(t, prev))
		d.raw(`</g>`)
		prev = t
	}
	day := s.from.Format("2006-01-02")
	if last := s.to.Add(-time.Nanosecond); last.Format("2006-01-02") != day {
		day += " – " + last.Format("2006-01-02")
	}
	d.text(marginLeft+areaWidth/2, y+35, "middle", `class="axis-title"`, "time (UTC), "+day)
	d.raw(`</g>`)
}

// palette is a sequential colour scale, light to dark, with the names the
// captions use for its colours.
type palette struct {
	colors, names []string
}

// ylOrRd is ColorBrewer's 9-class YlOrRd: ordered by lightness, so slower
// reads as darker in print and to most colour-blind readers.
var ylOrRd = palette{
	colors: []string{"#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8d3c", "#fc4e2a", "#e31a1c", "#bd0026", "#800026"},
	names:  []string{"pale yellow", "light yellow", "yellow", "light orange", "orange", "red-orange", "red", "crimson", "dark red"},
}

// from keeps the colours from index i on: the raster's marks sit on a
// white background, where the palest colours would vanish.
func (p palette) from(i int) palette {
	return palette{colors: p.colors[i:], names: p.names[i:]}
}

// noDataColor fills heat map cells without requests.
const noDataColor = "#d9d9d9"

// logScale bins positive milliseconds into a palette's colours in equal
// steps of log(ms) between the data's minimum and maximum.
type logScale struct {
	min, max float64
	pal      palette
}

// newLogScale spans the positive values of vals; ok is false if there is none.
func newLogScale(pal palette, vals func(yield func(float64) bool)) (s logScale, ok bool) {
	s = logScale{min: math.Inf(1), max: math.Inf(-1), pal: pal}
	for v := range vals {
		if v > 0 {
			s.min, s.max = math.Min(s.min, v), math.Max(s.max, v)
		}
	}
	return s, s.min <= s.max
}

// bin is v's colour index: 0 for the minimum, the last for the maximum.
func (s logScale) bin(v float64) int {
	n := len(s.pal.colors)
	if s.max <= s.min {
		return n - 1
	}
	f := (math.Log(v) - math.Log(s.min)) / (math.Log(s.max) - math.Log(s.min))
	return min(max(int(f*float64(n)), 0), n-1)
}

func (s logScale) color(v float64) string { return s.pal.colors[s.bin(v)] }

// formatMS prints milliseconds to three significant figures.
func formatMS(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64) + " ms"
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64) + " ms"
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64) + " ms"
	}
	return strconv.FormatFloat(v, 'f', 3, 64) + " ms"
}

// legend draws the colour scale to the right of the area, from its top at
// y: the palette's colours stacked from the minimum (bottom) to the
// maximum (top), labelled with the data's minimum and maximum and the
// powers of ten between them, and a no-data swatch when noData is set.
func (s logScale) legend(d *svgDoc, y float64, title string, noData bool) {
	const swatchW, swatchH = 14, 16
	x := float64(marginLeft + areaWidth + 16)
	n := len(s.pal.colors)
	if s.max <= s.min {
		n = 1
	}
	fmt.Fprintf(&d.b, `<g class="scale" data-min="%g" data-max="%g">`, s.min, s.max)
	for i, l := range strings.Split(title, "\n") {
		d.text(x, y+float64(i*13), "start", `class="scale-title"`, l)
	}
	top := y + float64(13*strings.Count(title, "\n")) + 10
	bottom := top + float64(n*swatchH)
	for i := 0; i < n; i++ {
		c := s.pal.colors[len(s.pal.colors)-n+i]
		d.rect(x, bottom-float64((i+1)*swatchH), swatchW, swatchH, c, `class="swatch" data-bin="`+strconv.Itoa(i)+`"`)
	}
	label := func(yy float64, v float64, cls string) {
		d.line(x+swatchW, yy, x+swatchW+4, yy, "#444")
		d.text(x+swatchW+7, yy+4, "start", `class="`+cls+`"`, formatMS(v))
	}
	if n == 1 {
		label(bottom-swatchH/2, s.min, "scale-min scale-max")
	} else {
		label(bottom, s.min, "scale-min")
		label(top, s.max, "scale-max")
		// Powers of ten between, where they do not crowd the ends.
		span := math.Log10(s.max) - math.Log10(s.min)
		for p := math.Ceil(math.Log10(s.min)); p <= math.Floor(math.Log10(s.max)); p++ {
			yy := bottom - (p-math.Log10(s.min))/span*(bottom-top)
			if yy < bottom-12 && yy > top+12 {
				label(yy, math.Pow(10, p), "scale-tick")
			}
		}
	}
	if noData {
		d.rect(x, bottom+8, swatchW, swatchH, noDataColor, `class="swatch no-data"`)
		d.text(x+swatchW+7, bottom+8+swatchH/2+4, "start", "", "no requests")
	}
	d.raw(`</g>`)
}
