package reportpage

import (
	"fmt"
	"html"
	"sort"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/explain"
)

// The report's drawing sizes, in CSS pixels: drawn at the size shown.
const (
	// ReportWidth is the width the report draws at.
	ReportWidth   = 900
	timelineRow   = 22
	flameRow      = 17
	flameMinWidth = 0.5 // narrower frames are left out (their samples still count in their parents)
	flameMaxDepth = 64
	// flameMaxFrames bounds the frames one flame graph draws: a profile
	// of many distinct stacks would otherwise make a page of megabytes.
	flameMaxFrames = 4000
)

// stateColours are the timeline's colours, one per thread state, named in
// its legend.
var stateColours = []struct{ state, colour, meaning string }{
	{"on-cpu", "#2b8a3e", "on CPU"},
	{"runnable", "#e8590c", "runnable, waiting for a CPU"},
	{"blocked", "#1c7ed6", "blocked (sleeping or waiting)"},
	{"unknown", "#ced4da", "no event tells"},
}

// TimelineSVG draws one request's thread: a bar of its segments over the
// request's time, coloured by state, with a millisecond axis.
func TimelineSVG(v explain.RequestVerdict, pageWidth int) string {
	const left, right, barTop = 10, 10, 4
	width := pageWidth - left - right
	start, end := v.Request.Start, v.Request.End
	span := end.Sub(start)
	if span <= 0 {
		return ""
	}
	x := func(t time.Time) float64 { return left + float64(width)*float64(t.Sub(start))/float64(span) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="timeline" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="thread timeline of %s">`+"\n",
		pageWidth, timelineRow+24, pageWidth, timelineRow+24, html.EscapeString(v.Thread))
	// Segments narrower than a pixel are drawn as one rectangle per
	// pixel, in the colour of the state that held most of it: a thread
	// that switches thousands of times draws at most a rectangle a pixel.
	var (
		bin          [len(stateNames)]time.Duration
		binN         int
		binX0, binX1 float64
	)
	flushBin := func() {
		if binN == 0 {
			return
		}
		top, parts := 0, make([]string, 0, len(bin))
		for i, d := range bin {
			if d > bin[top] {
				top = i
			}
			if d > 0 {
				parts = append(parts, stateNames[i]+" "+spoken(d))
			}
		}
		fmt.Fprintf(&b, `<rect class="seg %s" x="%.2f" y="%d" width="%.2f" height="%d" fill="%s"><title>%d segments: %s</title></rect>`+"\n",
			stateNames[top], binX0, barTop, max(binX1-binX0, 0.5), timelineRow, stateColour(stateNames[top]), binN, strings.Join(parts, ", "))
		bin, binN = [len(stateNames)]time.Duration{}, 0
	}
	for _, s := range v.Segments {
		x0, x1 := x(s.Start), x(s.End)
		if x1-x0 < 1 {
			if binN == 0 {
				binX0 = x0
			}
			binX1 = x1
			bin[stateIndex(s.State)] += s.End.Sub(s.Start)
			binN++
			if binX1-binX0 >= 1 {
				flushBin()
			}
			continue
		}
		flushBin()
		fmt.Fprintf(&b, `<rect class="seg %s" x="%.2f" y="%d" width="%.2f" height="%d" fill="%s"><title>%s %s, CPU %d</title></rect>`+"\n",
			stateNames[stateIndex(s.State)], x0, barTop, x1-x0, timelineRow, stateColour(s.State), html.EscapeString(s.State), spoken(s.End.Sub(s.Start)), s.CPU)
	}
	flushBin()
	// The axis: ticks at round milliseconds.
	step := tickStep(span)
	for t := time.Duration(0); t <= span; t += step {
		px := left + float64(width)*float64(t)/float64(span)
		fmt.Fprintf(&b, `<line x1="%.2f" x2="%.2f" y1="%d" y2="%d" stroke="#495057"/><text class="tick" x="%.2f" y="%d" text-anchor="middle">%s</text>`+"\n",
			px, px, barTop+timelineRow, barTop+timelineRow+4, px, barTop+timelineRow+16, spoken(t))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// stateNames are the states in stateColours' order.
var stateNames = [...]string{"on-cpu", "runnable", "blocked", "unknown"}

func stateIndex(state string) int {
	for i, n := range stateNames {
		if n == state {
			return i
		}
	}
	return len(stateNames) - 1
}

func stateColour(state string) string {
	for _, c := range stateColours {
		if c.state == state {
			return c.colour
		}
	}
	return "#ced4da"
}

// tickStep is a round step giving 4–10 ticks over span.
func tickStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{time.Microsecond, 2 * time.Microsecond, 5 * time.Microsecond} {
		for mult := time.Duration(1); mult <= 1e9; mult *= 10 {
			if span/(s*mult) <= 10 {
				return s * mult
			}
		}
	}
	return span
}

// spoken is a duration for an axis or a tooltip: "250 ms", "1.5 s", "80 µs".
func spoken(d time.Duration) string {
	switch {
	case d >= time.Second:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", d.Seconds()), "0"), ".") + " s"
	case d >= time.Millisecond:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", float64(d)/1e6), "0"), ".") + " ms"
	default:
		return fmt.Sprintf("%d µs", d/time.Microsecond)
	}
}

// flameNode is one frame in the merged call tree.
type flameNode struct {
	name     string
	samples  int
	children map[string]*flameNode
}

// FlameSVG draws the folded stacks as a flame graph: the root (all
// samples) at the bottom, each frame's width its share.
func FlameSVG(stacks []explain.StackShare, pageWidth int) string {
	svg, _ := flameSVG(stacks, pageWidth)
	return svg
}

// flameSVG is FlameSVG, and whether it left frames out past
// flameMaxFrames (in the order drawn: a frame before its callees,
// callees by name).
func flameSVG(stacks []explain.StackShare, pageWidth int) (string, bool) {
	root := &flameNode{name: "all", children: map[string]*flameNode{}}
	depth := 0
	for _, s := range stacks {
		root.samples += s.Samples
		n := root
		frames := strings.Split(s.Stack, ";")
		if len(frames) > flameMaxDepth {
			frames = frames[:flameMaxDepth]
		}
		depth = max(depth, len(frames))
		for _, f := range frames {
			c := n.children[f]
			if c == nil {
				c = &flameNode{name: f, children: map[string]*flameNode{}}
				n.children[f] = c
			}
			c.samples += s.Samples
			n = c
		}
	}
	height := (depth + 1) * flameRow
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="flame" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="flame graph of %d samples">`+"\n",
		pageWidth, height, pageWidth, height, root.samples)
	drawn, capped := 0, false
	var draw func(n *flameNode, x float64, level int)
	draw = func(n *flameNode, x float64, level int) {
		w := float64(pageWidth) * float64(n.samples) / float64(root.samples)
		if w < flameMinWidth {
			return
		}
		if drawn >= flameMaxFrames {
			capped = true
			return
		}
		drawn++
		y := height - (level+1)*flameRow
		share := 100 * float64(n.samples) / float64(root.samples)
		fmt.Fprintf(&b, `<g class="frame"><title>%s: %d samples, %.1f%%</title><rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s" stroke="#fff" stroke-width="0.5"/>`,
			html.EscapeString(n.name), n.samples, share, x, y, w, flameRow-1, flameColour(n.name))
		if w > 30 {
			label := n.name
			if max := int((w - 6) / 6.6); len(label) > max {
				label = label[:max-1] + "…"
			}
			fmt.Fprintf(&b, `<text x="%.2f" y="%d">%s</text>`, x+3, y+flameRow-5, html.EscapeString(label))
		}
		b.WriteString("</g>\n")
		kids := make([]*flameNode, 0, len(n.children))
		for _, c := range n.children {
			kids = append(kids, c)
		}
		sort.Slice(kids, func(i, j int) bool { return kids[i].name < kids[j].name })
		cx := x
		for _, c := range kids {
			draw(c, cx, level+1)
			cx += float64(pageWidth) * float64(c.samples) / float64(root.samples)
		}
	}
	if root.samples > 0 {
		draw(root, 0, 0)
	}
	b.WriteString("</svg>\n")
	return b.String(), capped
}

// flameColour is a warm colour that stays the same for the same name, so
// that one function reads as one colour across the graph; kernel frames
// are a cooler hue.
func flameColour(name string) string {
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint32(name[i])) * 16777619
	}
	if strings.HasPrefix(name, "__") || strings.Contains(name, "_sys_") || strings.HasPrefix(name, "do_") || strings.HasPrefix(name, "entry_") {
		return fmt.Sprintf("hsl(%d,55%%,70%%)", 200+h%30)
	}
	return fmt.Sprintf("hsl(%d,80%%,%d%%)", 10+h%40, 55+h%15)
}
