package testenv_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// A page that does everything a report must not: VisitPage sees its
// console error, its uncaught exception, its fetch of an image from
// elsewhere, its sideways scrolling and the plot wider than the window,
// at each width, and its text; a data: image is not a request.
func TestVisitPageSeesWhatAPageMustNotDo(t *testing.T) {
	elsewhere := httptest.NewServer(http.NotFoundHandler())
	defer elsewhere.Close()
	page := `<!doctype html><html><head><meta charset="utf-8"><title>bad</title></head><body>
<p>one &lt;1 s&gt; stall</p><img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">
<img src="` + elsewhere.URL + `/pixel.png">
<svg class="plot" width="1600" height="10" viewBox="0 0 1600 10"><rect width="1600" height="10"/></svg>
<script>console.error("boom"); null.nothing;</script></body></html>`
	var mu sync.Mutex
	var sawAuth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sawAuth = append(sawAuth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(page))
	}))
	defer srv.Close()
	views := testenv.VisitPage(t, testenv.PageVisit{URL: srv.URL + "/", Name: "bad", Inside: []string{"svg.plot"},
		Headers: map[string]string{"Authorization": "Basic dGVzdA=="}, Probe: `document.title`})
	if len(views) != len(testenv.PageWidths) {
		t.Fatalf("%d views, want one per width (%d)", len(views), len(testenv.PageWidths))
	}
	for _, v := range views {
		if !slices.ContainsFunc(v.Errors, func(e string) bool { return strings.Contains(e, "boom") }) {
			t.Errorf("at %d px: the console error is not seen: %q", v.Width, v.Errors)
		}
		if !slices.ContainsFunc(v.Errors, func(e string) bool { return strings.Contains(e, "nothing") }) {
			t.Errorf("at %d px: the uncaught exception is not seen: %q", v.Width, v.Errors)
		}
		if !slices.Equal(v.Requests, []string{elsewhere.URL + "/pixel.png"}) {
			t.Errorf("at %d px: requests %q, want only the image from elsewhere", v.Width, v.Requests)
		}
		if v.ScrollWidth <= v.Width {
			t.Errorf("at %d px: the page is %d px wide: the 1600 px plot does not make it scroll", v.Width, v.ScrollWidth)
		}
		if v.Matched != 1 || len(v.Outside) != 1 {
			t.Errorf("at %d px: %d plots matched, %q outside; want the one, outside", v.Width, v.Matched, v.Outside)
		}
		if !strings.Contains(v.Text, "one <1 s> stall") {
			t.Errorf("at %d px: text %q", v.Width, v.Text)
		}
		if v.Probe != "bad" {
			t.Errorf("at %d px: the probe returned %q, want the title", v.Width, v.Probe)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range sawAuth {
		if a != "Basic dGVzdA==" {
			t.Errorf("the page was asked for with Authorization %q, want the visit's header", a)
		}
	}
}
