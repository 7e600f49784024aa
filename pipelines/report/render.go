package report

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"sort"
	"strings"
)

// Write renders f as one HTML page to w.
func Write(w io.Writer, f *Fleet) error {
	order := hostOrder(f)
	heat, err := heatmapPNG(f, order)
	if err != nil {
		return err
	}
	raster, err := rasterPNG(f, order)
	if err != nil {
		return err
	}
	return page.Execute(w, map[string]any{
		"F":        f,
		"Averaged": template.HTML(averagedSVG(f)),
		"Heatmap":  template.URL("data:image/png;base64," + heat),
		"Raster":   template.URL("data:image/png;base64," + raster),
		"Classes":  classBands(f, order),
		"Range":    f.From.Format("2006-01-02 15:04") + " – " + f.To.Format("15:04") + " UTC",
	})
}

// hostOrder sorts hosts by hardware class, then name, so a class's rows
// form one band in the heatmap and the raster.
func hostOrder(f *Fleet) []int {
	idx := make([]int, len(f.Hosts))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		if f.HWClass[idx[a]] != f.HWClass[idx[b]] {
			return f.HWClass[idx[a]] < f.HWClass[idx[b]]
		}
		return f.Hosts[idx[a]] < f.Hosts[idx[b]]
	})
	return idx
}

// classBands names the hardware classes in row order, with their host counts.
func classBands(f *Fleet, order []int) string {
	var parts []string
	for i := 0; i < len(order); {
		c, j := f.HWClass[order[i]], i
		for j < len(order) && f.HWClass[order[j]] == c {
			j++
		}
		parts = append(parts, fmt.Sprintf("%s (%d hosts)", c, j-i))
		i = j
	}
	return strings.Join(parts, ", then ")
}

const (
	plotW, plotH = 900, 220
	cellH        = 2
)

// averagedSVG plots the fleet's per-minute mean and p99: the view that
// makes rare per-host spikes look like a uniform regression.
func averagedSVG(f *Fleet) string {
	top := 0.0
	for i := range f.Minutes {
		top = math.Max(top, math.Max(f.MeanMS[i], f.P99MS[i]))
	}
	if top == 0 {
		top = 1
	}
	top *= 1.15
	n := len(f.Minutes)
	x := func(i int) float64 { return 50 + float64(i)*float64(plotW-60)/float64(max(n-1, 1)) }
	y := func(v float64) float64 { return 10 + (plotH-40)*(1-v/top) }
	line := func(vals []float64, stroke string) string {
		var b strings.Builder
		for i, v := range vals {
			if v == 0 {
				continue
			}
			fmt.Fprintf(&b, "%.1f,%.1f ", x(i), y(v))
		}
		return fmt.Sprintf(`<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, stroke, b.String())
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, plotW, plotH)
	for k := 0; k <= 4; k++ {
		v := top * float64(k) / 4
		fmt.Fprintf(&b, `<line x1="50" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="45" y="%.1f" text-anchor="end">%.1f ms</text>`, plotW-10, y(v), y(v), y(v)+4, v)
	}
	for i := 0; i < n; i += max(n/6, 1) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, x(i), plotH-12, f.Minutes[i].Format("15:04"))
	}
	b.WriteString(line(f.MeanMS, "#1f77b4"))
	b.WriteString(line(f.P99MS, "#d62728"))
	fmt.Fprintf(&b, `<text x="60" y="22" fill="#1f77b4">fleet mean</text><text x="140" y="22" fill="#d62728">fleet p99</text></svg>`)
	return b.String()
}

// heatColor maps a per-minute max latency to white (fast) … dark red
// (≥ 1 s) on a log scale from 1 ms.
func heatColor(ms float64) color.RGBA {
	if ms <= 0 {
		return color.RGBA{245, 245, 245, 255}
	}
	t := math.Log10(math.Max(ms, 1)) / 3 // 1 ms → 0, 1 s → 1
	t = math.Min(math.Max(t, 0), 1)
	t = t * t // most minutes sit at a few ms: keep them pale
	return color.RGBA{255 - uint8(120*t), uint8(255 * (1 - t)), uint8(255 * (1 - t)), 255}
}

func heatmapPNG(f *Fleet, order []int) (string, error) {
	n := len(f.Minutes)
	cw := max(1, plotW/max(n, 1))
	img := image.NewRGBA(image.Rect(0, 0, n*cw, max(len(order)*cellH, 1)))
	for row, h := range order {
		for i := 0; i < n; i++ {
			c := heatColor(f.HostMax[h][i])
			for dx := 0; dx < cw; dx++ {
				for dy := 0; dy < cellH; dy++ {
					img.SetRGBA(i*cw+dx, row*cellH+dy, c)
				}
			}
		}
	}
	return encodePNG(img)
}

// rasterPNG marks each spike window at its host's row and its time.
func rasterPNG(f *Fleet, order []int) (string, error) {
	rowOf := map[string]int{}
	for row, h := range order {
		rowOf[f.Hosts[h]] = row
	}
	width := plotW
	img := image.NewRGBA(image.Rect(0, 0, width, max(len(order)*cellH, 1)))
	for p := range img.Pix {
		img.Pix[p] = 255
	}
	span := f.To.Sub(f.From).Seconds()
	for _, s := range f.Spikes {
		row, ok := rowOf[s.Host]
		if !ok || span <= 0 {
			continue
		}
		x0 := int(s.Start.Sub(f.From).Seconds() / span * float64(width))
		x1 := max(int(s.End.Sub(f.From).Seconds()/span*float64(width)), x0+1)
		for x := x0; x <= x1 && x < width; x++ {
			for dy := 0; dy < cellH; dy++ {
				img.SetRGBA(max(x, 0), row*cellH+dy, color.RGBA{20, 20, 20, 255})
			}
		}
	}
	return encodePNG(img)
}

func encodePNG(img image.Image) (string, error) {
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return "", fmt.Errorf("report: png: %w", err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

var page = template.Must(template.New("report").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>spikehunt — {{.F.Service}}</title>
<style>body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}
h2{margin-top:1.6em;font-size:1.1em}img{image-rendering:pixelated;border:1px solid #ccc;width:900px}
.note{color:#555;font-size:.9em}</style></head><body>
<h1>spikehunt: {{.F.Service}}</h1>
<p class="note">{{.Range}} · {{len .F.Hosts}} hosts · {{len .F.Spikes}} spike windows</p>
{{range .F.Text}}<p>{{.}}</p>{{end}}
<h2>1. Averaged over the fleet</h2>
<p class="note">Per-minute mean and p99 of every request of every host. Rare one-second stalls on every host, at different moments, are smeared into a higher, flat line: it reads as a uniform regression.</p>
{{.Averaged}}
<h2>2. Per host: max latency per minute (host × time)</h2>
<p class="note">One row per host ({{.Classes}}), one column per minute; white is a few milliseconds, dark red is a second. Each host's own spikes stand out as isolated dark cells.</p>
<img src="{{.Heatmap}}" alt="per-host max latency heatmap">
<h2>3. Spike raster (host × time)</h2>
<p class="note">Each detected spike window, at its host's row. Marks spaced at a steady rhythm along each row, rows out of step with one another: every host recurs at its own phase. A vertical line would be a fleet-synchronized event; one dense row, an isolated host.</p>
<img src="{{.Raster}}" alt="spike raster">
</body></html>
`))
