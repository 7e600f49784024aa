package demo

import (
	"strings"

	"github.com/spikehunt/spikehunt/pipelines/lab/htmlreport"
)

// section is one step of the demo's finding. The console prints its title
// and each paragraph's lines as they are written, wrapped for a terminal;
// the HTML report shows the title as a heading and joins each paragraph's
// lines, so that a sentence the console wraps stays one paragraph there.
type section struct {
	title string
	// summary, when set, is the whole step, printed on the title's line
	// ("A real capture on this machine: skipped, not root.").
	summary string
	paras   []paragraph
	figures []htmlreport.Figure
	// drawings are plots the step brings to the report only (the local
	// capture's thread timeline and flame graph).
	drawings []htmlreport.Drawing
}

// paragraph is one paragraph's console lines. Extra leading spaces indent
// a line under the one before it (a list item).
type paragraph []string

// para is a paragraph of the given console lines.
func para(lines ...string) paragraph { return paragraph(lines) }

// consoleLines is how the console prints sections: the title, each line
// indented by three spaces, and a blank line between steps.
func consoleLines(sections []section) []string {
	var out []string
	for i, s := range sections {
		if i > 0 {
			out = append(out, "")
		}
		if s.summary != "" {
			out = append(out, s.title+": "+s.summary)
		} else {
			out = append(out, s.title)
		}
		for _, p := range s.paras {
			for _, l := range p {
				out = append(out, "   "+l)
			}
		}
	}
	return out
}

// reportSteps is how the HTML report shows sections: whole paragraphs under
// their heading, and the indented ones as a list under the paragraph before.
func reportSteps(sections []section) []htmlreport.Step {
	out := make([]htmlreport.Step, 0, len(sections))
	for _, s := range sections {
		r := htmlreport.Step{Title: s.title, Figures: s.figures, Drawings: s.drawings}
		if s.summary != "" {
			r.Paragraphs = append(r.Paragraphs, htmlreport.Paragraph{Text: strings.ToUpper(s.summary[:1]) + s.summary[1:]})
		}
		for _, p := range s.paras {
			words := make([]string, 0, len(p))
			for _, l := range p {
				if l = strings.TrimSpace(l); l != "" {
					words = append(words, l)
				}
			}
			text := strings.Join(words, " ")
			switch {
			case text == "":
			case len(r.Paragraphs) > 0 && strings.HasPrefix(p[0], " "):
				last := &r.Paragraphs[len(r.Paragraphs)-1]
				last.Items = append(last.Items, text)
			default:
				r.Paragraphs = append(r.Paragraphs, htmlreport.Paragraph{Text: text})
			}
		}
		out = append(out, r)
	}
	return out
}
