package htmlreport

import (
	"bytes"
	"encoding/base64"
	"image/png"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// The report's tests read the page as a browser would: parsed as HTML,
// with the SVG plots as elements of the page.

type node = html.Node

func parsePage(t *testing.T, page string) *node {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatalf("the page does not parse: %v", err)
	}
	return doc
}

func attr(n *node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasClass(n *node, class string) bool {
	return slices.Contains(strings.Fields(attr(n, "class")), class)
}

// findAll returns the elements under n named tag (any tag if empty) that
// have every class in classes.
func findAll(n *node, tag string, classes ...string) []*node {
	var out []*node
	var walk func(*node)
	walk = func(m *node) {
		if m.Type == html.ElementNode && (tag == "" || m.Data == tag) {
			ok := true
			for _, c := range classes {
				ok = ok && hasClass(m, c)
			}
			if ok {
				out = append(out, m)
			}
		}
		for c := m.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func find(t *testing.T, n *node, tag string, classes ...string) *node {
	t.Helper()
	all := findAll(n, tag, classes...)
	if len(all) == 0 {
		t.Fatalf("no <%s class=%q> in the page", tag, strings.Join(classes, " "))
	}
	return all[0]
}

// text is the text under n, with runs of white space as one space.
func text(n *node) string {
	var b strings.Builder
	var walk func(*node)
	walk = func(m *node) {
		if m.Type == html.TextNode {
			b.WriteString(m.Data)
		}
		for c := m.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

func floatAttr(t *testing.T, n *node, key string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(attr(n, key), 64)
	if err != nil {
		t.Fatalf("<%s %s=%q>: %v", n.Data, key, attr(n, key), err)
	}
	return v
}

// figureSVG is the <svg> of the figure with id.
func figureSVG(t *testing.T, doc *node, id string) (svg *node, caption string) {
	t.Helper()
	for _, f := range findAll(doc, "figure") {
		if attr(f, "id") == id {
			return find(t, f, "svg"), text(find(t, f, "figcaption"))
		}
	}
	t.Fatalf("no figure %q in the page", id)
	return nil, ""
}

// msLabel reads "14.4 ms".
func msLabel(t *testing.T, s string) float64 {
	t.Helper()
	num, ok := strings.CutSuffix(s, " ms")
	v, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil {
		t.Fatalf("label %q is not a number of ms", s)
	}
	return v
}

// pathSegment is one "M x y h w" of a path's d.
type pathSegment struct{ x, y, w float64 }

var segmentRE = regexp.MustCompile(`M(-?[\d.]+) (-?[\d.]+)h(-?[\d.]+)`)

func segments(t *testing.T, d string) []pathSegment {
	t.Helper()
	var out []pathSegment
	for _, m := range segmentRE.FindAllStringSubmatch(d, -1) {
		var v [3]float64
		for i := range v {
			f, err := strconv.ParseFloat(m[i+1], 64)
			if err != nil {
				t.Fatalf("path %q: %v", m[0], err)
			}
			v[i] = f
		}
		out = append(out, pathSegment{v[0], v[1], v[2]})
	}
	if strings.Count(d, "M") != len(out) {
		t.Fatalf("path d %.80q… is not only M x y h w segments", d)
	}
	return out
}

// rowOf names the host whose row (a rect.row with a <title> "host · class")
// holds y.
func rowOf(t *testing.T, svg *node, y float64) string {
	t.Helper()
	for _, r := range findAll(svg, "rect", "row") {
		top, h := floatAttr(t, r, "y"), floatAttr(t, r, "height")
		if y >= top && y < top+h {
			host, _, _ := strings.Cut(text(r), " · ")
			return host
		}
	}
	t.Fatalf("no row at y=%g", y)
	return ""
}

// lightnessAndHue of a #rrggbb colour (HSL lightness 0–1, hue 0–360°).
func lightnessAndHue(t *testing.T, hex string) (l, hue float64) {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(hex, "#"), 16, 32)
	if err != nil || len(hex) != 7 {
		t.Fatalf("colour %q is not #rrggbb", hex)
	}
	r, g, b := float64(v>>16)/255, float64(v>>8&0xff)/255, float64(v&0xff)/255
	hi, lo := math.Max(r, math.Max(g, b)), math.Min(r, math.Min(g, b))
	l = (hi + lo) / 2
	switch d := hi - lo; {
	case d == 0:
		hue = 0
	case hi == r:
		hue = math.Mod(60*(g-b)/d+360, 360)
	case hi == g:
		hue = 60*(b-r)/d + 120
	default:
		hue = 60*(r-g)/d + 240
	}
	return l, hue
}

// colourWordFits says whether a caption's colour name describes hex:
// "pale"/"light" are light, "dark" is dark, and the hue word names the
// hue. It is the reader's judgement, written down, not the report's table.
func colourWordFits(t *testing.T, name, hex string) bool {
	l, hue := lightnessAndHue(t, hex)
	ok := true
	switch {
	case strings.Contains(name, "white"):
		return l > 0.95
	case strings.HasPrefix(name, "pale"):
		ok = l > 0.85
	case strings.HasPrefix(name, "light"):
		ok = l > 0.7
	case strings.HasPrefix(name, "dark"):
		ok = l < 0.35
	}
	words := strings.Fields(name)
	switch words[len(words)-1] {
	case "yellow":
		return ok && hue >= 40 && hue <= 70
	case "orange":
		return ok && hue >= 15 && hue < 45
	case "red", "crimson":
		return ok && (hue < 15 || hue > 330)
	}
	return false
}

// imgNaturalSize decodes an <img>'s data: URL PNG.
func imgNaturalSize(t *testing.T, img *node) (w, h int) {
	t.Helper()
	b64, ok := strings.CutPrefix(attr(img, "src"), "data:image/png;base64,")
	if !ok {
		t.Fatalf("<img src=%.40q…> is not an inline PNG", attr(img, "src"))
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	im, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return im.Bounds().Dx(), im.Bounds().Dy()
}
