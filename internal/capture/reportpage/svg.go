package reportpage

import (
	"fmt"
	"html"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spikehunt/spikehunt/internal/capture/explain"
)

// The report's drawing sizes, in CSS pixels: drawn at the size shown in a
// window as wide as ReportWidth or wider; a narrower one shrinks each
// drawing whole to the page (the stylesheet's svg rule, through the
// viewBox every drawing carries).
const (
	// ReportWidth is the width the report draws at.
	ReportWidth   = 900
	timelineRow   = 22
	flameRow      = 17
	flameMinWidth = 0.5 // narrower frames are left out (their samples still count in their parents)
	flameMaxDepth = 64
	// flameThinWidth and flameMaxLevels bound the graph's height: a
	// frame narrower draws its callees as one "…" frame, and the graph
	// draws at most flameMaxLevels rows (about 500 px).
	flameThinWidth = 4.0
	flameMaxLevels = 30
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
	// The axis: ticks at round steps, every label in the one unit the
	// span reads in, and each inside the drawing (the first starts at
	// its tick, the last ends at it).
	step := tickStep(span)
	unit, name := axisUnit(span)
	for t := time.Duration(0); t <= span; t += step {
		px := left + float64(width)*float64(t)/float64(span)
		label := fmt.Sprintf("%d %s", t/unit, name)
		anchor := "middle"
		half := tickCharWidth * float64(utf8.RuneCountInString(label)) / 2
		switch {
		case px-half < 0:
			anchor = "start"
		case px+half > float64(pageWidth):
			anchor = "end"
		}
		fmt.Fprintf(&b, `<line x1="%.2f" x2="%.2f" y1="%d" y2="%d" stroke="#495057"/><text class="tick" x="%.2f" y="%d" text-anchor="%s">%s</text>`+"\n",
			px, px, barTop+timelineRow, barTop+timelineRow+4, px, barTop+timelineRow+16, anchor, label)
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

// tickStep is the smallest round step (1, 2 or 5 µs times a power of
// ten) giving at most 10 steps over span: 5–10 of them.
func tickStep(span time.Duration) time.Duration {
	for mult := time.Duration(1); mult <= 1e9; mult *= 10 {
		for _, s := range []time.Duration{time.Microsecond, 2 * time.Microsecond, 5 * time.Microsecond} {
			if span/(s*mult) <= 10 {
				return s * mult
			}
		}
	}
	return span
}

// tickCharWidth is the width of one character of a tick's label: the
// page draws them in an 11 px monospace font, 0.6 em a character.
const tickCharWidth = 6.6

// axisUnit is the one unit an axis over span is labelled in: the largest
// in which span is at least 10, so that every tick (tickStep) is a
// whole number of it.
func axisUnit(span time.Duration) (time.Duration, string) {
	switch {
	case span >= 10*time.Second:
		return time.Second, "s"
	case span >= 10*time.Millisecond:
		return time.Millisecond, "ms"
	}
	return time.Microsecond, "µs"
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

// flameFrame is one rectangle of the graph: a frame, or the "…" that
// stands for frames left undrawn (hidden of them, depth deep): n's
// callees, or n and its callees when self.
type flameFrame struct {
	n        *flameNode
	x, w     float64
	level    int
	hidden   int
	depth    int
	ellipsis bool
	self     bool
}

// FlameSVG draws the folded stacks as a flame graph of the work: the
// idle task's samples (explain.IdleStack) are put aside, since on a
// quiet node they are nearly all of them and would leave the work a
// sliver; IdleLine says what was left out. The root (every sample not
// idle) is at the bottom, each frame's width its share.
func FlameSVG(stacks []explain.StackShare, pageWidth int) string {
	svg, _ := flameSVG(WorkStacks(stacks), pageWidth)
	return svg
}

// WorkStacks are the stacks that are not the idle task's.
func WorkStacks(stacks []explain.StackShare) []explain.StackShare {
	out := make([]explain.StackShare, 0, len(stacks))
	for _, s := range stacks {
		if !explain.IdleStack(s.Stack) {
			out = append(out, s)
		}
	}
	return out
}

// IdleLine says how much of the stacks' samples the flame graph left out
// as idle: "idle (swapper) 95.7% of samples (4700 of 4911), not drawn";
// "" when none was.
func IdleLine(stacks []explain.StackShare) string {
	idle, total := 0, 0
	for _, s := range stacks {
		total += s.Samples
		if explain.IdleStack(s.Stack) {
			idle += s.Samples
		}
	}
	if idle == 0 {
		return ""
	}
	return fmt.Sprintf("idle (swapper) %.1f%% of samples (%d of %d), not drawn", 100*float64(idle)/float64(total), idle, total)
}

// flameSVG is FlameSVG, and whether it left frames out past
// flameMaxFrames (in the order drawn: a frame before its callees,
// callees by name).
//
// The graph's height is bounded: a frame narrower than flameThinWidth
// draws its callees as one "…" frame, and no frame is drawn above
// flameMaxLevels (a "…" stands for the rest). One deep stack of a few
// samples would otherwise make the page a screen of blank tall graph.
func flameSVG(stacks []explain.StackShare, pageWidth int) (string, bool) {
	root := &flameNode{name: "all", children: map[string]*flameNode{}}
	for _, s := range stacks {
		root.samples += s.Samples
		n := root
		frames := strings.Split(s.Stack, ";")
		if len(frames) > flameMaxDepth {
			frames = frames[:flameMaxDepth]
		}
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
	var (
		frames []flameFrame
		capped bool
		levels int
	)
	width := func(n *flameNode) float64 { return float64(pageWidth) * float64(n.samples) / float64(root.samples) }
	var place func(n *flameNode, x float64, level int)
	place = func(n *flameNode, x float64, level int) {
		w := width(n)
		if w < flameMinWidth {
			return
		}
		if len(frames) >= flameMaxFrames {
			capped = true
			return
		}
		if level == flameMaxLevels-1 && len(n.children) > 0 {
			hidden, depth := below(n)
			frames = append(frames, flameFrame{n: n, x: x, w: w, level: level, ellipsis: true, self: true, hidden: hidden + 1, depth: depth + 1})
			levels = max(levels, level+1)
			return
		}
		frames = append(frames, flameFrame{n: n, x: x, w: w, level: level})
		levels = max(levels, level+1)
		if len(n.children) == 0 {
			return
		}
		if w < flameThinWidth {
			if len(frames) >= flameMaxFrames {
				capped = true
				return
			}
			hidden, depth := below(n)
			frames = append(frames, flameFrame{n: n, x: x, w: w, level: level + 1, ellipsis: true, hidden: hidden, depth: depth})
			levels = max(levels, level+2)
			return
		}
		kids := make([]*flameNode, 0, len(n.children))
		for _, c := range n.children {
			kids = append(kids, c)
		}
		sort.Slice(kids, func(i, j int) bool { return kids[i].name < kids[j].name })
		cx := x
		for _, c := range kids {
			place(c, cx, level+1)
			cx += width(c)
		}
	}
	if root.samples > 0 {
		place(root, 0, 0)
	}
	height := max(levels, 1) * flameRow
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="flame" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="flame graph of %d samples">`+"\n",
		pageWidth, height, pageWidth, height, root.samples)
	for _, f := range frames {
		y := height - (f.level+1)*flameRow
		share := 100 * float64(f.n.samples) / float64(root.samples)
		name, title, fill, class := f.n.name, fmt.Sprintf("%s: %d samples, %.1f%%", f.n.name, f.n.samples, share), flameColour(f.n.name), "frame"
		if f.ellipsis {
			name, fill, class = "…", "#dee2e6", "frame more"
			title = fmt.Sprintf("%d more frames, up to %d deep, called from %s (%d samples, %.1f%%): in stacks.folded", f.hidden, f.depth, f.n.name, f.n.samples, share)
			if f.self {
				title = fmt.Sprintf("%d more frames, up to %d deep, from %s up (%d samples, %.1f%%): in stacks.folded", f.hidden, f.depth, f.n.name, f.n.samples, share)
			}
		}
		fmt.Fprintf(&b, `<g class="%s"><title>%s</title><rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s" stroke="#fff" stroke-width="0.5"/>`,
			class, html.EscapeString(title), f.x, y, f.w, flameRow-1, fill)
		if f.w > 30 {
			label := name
			if max := int((f.w - 6) / 6.6); utf8.RuneCountInString(label) > max {
				label = string([]rune(label)[:max-1]) + "…"
			}
			fmt.Fprintf(&b, `<text x="%.2f" y="%d">%s</text>`, f.x+3, y+flameRow-5, html.EscapeString(label))
		}
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	return b.String(), capped
}

// below counts the frames under n's callees (n not counted) and how deep
// they go.
func below(n *flameNode) (frames, depth int) {
	for _, c := range n.children {
		f, d := below(c)
		frames += f + 1
		depth = max(depth, d+1)
	}
	return frames, depth
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
