package htmlreport

import (
	"fmt"
	"html/template"
	"io"
)

// figure is one rendered plot with its caption.
type figure struct {
	ID      string
	SVG     template.HTML
	Caption string
	// Drawing: made by the caller (a capture's drawing), styled as the
	// capture page styles it.
	Drawing bool
}

// section is a step as the page shows it.
type section struct {
	Title      string
	Paragraphs []Paragraph
	Figures    []figure
}

// Write renders f as one HTML page to w.
func Write(w io.Writer, f *Fleet) error {
	rows := layoutRows(f)
	var figs [3]figure
	svg, caption := averagedSVG(f)
	figs[FigureAveraged] = figure{ID: "averaged", SVG: template.HTML(svg), Caption: caption}
	svg, caption = heatmapSVG(f, rows)
	figs[FigureHeatmap] = figure{ID: "heatmap", SVG: template.HTML(svg), Caption: caption}
	svg, caption = rasterSVG(f, rows)
	figs[FigureRaster] = figure{ID: "raster", SVG: template.HTML(svg), Caption: caption}

	placed := make([]bool, len(figs))
	var sections []section
	for _, s := range f.Steps {
		sec := section{Title: s.Title, Paragraphs: s.Paragraphs}
		for _, k := range s.Figures {
			if k < 0 || int(k) >= len(figs) || placed[k] {
				continue
			}
			placed[k] = true
			sec.Figures = append(sec.Figures, figs[k])
		}
		for _, d := range s.Drawings {
			sec.Figures = append(sec.Figures, figure{ID: d.ID, SVG: d.SVG, Caption: d.Caption, Drawing: true})
		}
		sections = append(sections, sec)
	}
	rest := section{Title: "Plots"}
	for k, fig := range figs {
		if !placed[k] {
			rest.Figures = append(rest.Figures, fig)
		}
	}
	if len(rest.Figures) > 0 {
		sections = append(sections, rest)
	}
	err := page.Execute(w, map[string]any{
		"F":        f,
		"Sections": sections,
		"Range":    f.From.Format("2006-01-02 15:04") + " – " + f.To.Format("15:04") + " UTC",
	})
	if err != nil {
		return fmt.Errorf("report: render: %w", err)
	}
	return nil
}

// Each plot is drawn at the size it is shown in a window wide enough for
// the 900 px column; a narrower window (a laptop's half screen) shrinks
// the whole plot to the column, keeping its proportions, rather than
// scrolling sideways with its colour scale cut off. max-width and
// height:auto scale from the viewBox every plot carries.
//
// A capture's drawings (reportpage's timeline and flame graph) place
// their labels for the capture page's 11 px monospace text, which
// .drawing gives them here too: in the page's own font they crowd.
var page = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>spikehunt — {{.F.Service}}</title>
<style>body{font-family:sans-serif;max-width:940px;margin:2em auto;padding:0 10px;color:#222;line-height:1.4}
h2{margin-top:1.8em;font-size:1.15em;border-bottom:1px solid #ddd;padding-bottom:.2em}
figure{margin:1.2em 0}svg{display:block;overflow:visible;max-width:100%;height:auto}.drawing svg text{font:11px ui-monospace,monospace}figcaption{color:#555;font-size:.9em;max-width:900px;margin-top:.4em}
.note{color:#555;font-size:.9em}</style></head><body>
<h1>spikehunt: {{.F.Service}}</h1>
<p class="note">{{.Range}} · {{len .F.Hosts}} hosts · {{len .F.Spikes}} spike windows</p>
{{range .Sections}}<section>
<h2>{{.Title}}</h2>
{{range .Paragraphs}}<p>{{.Text}}</p>
{{if .Items}}<ul>{{range .Items}}<li>{{.}}</li>{{end}}</ul>
{{end}}{{end}}{{range .Figures}}<figure id="{{.ID}}"{{if .Drawing}} class="drawing"{{end}}>
{{.SVG}}
<figcaption>{{.Caption}}</figcaption>
</figure>
{{end}}</section>
{{end}}</body></html>
`))
