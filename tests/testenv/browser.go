package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// PageWidths are the viewport widths every page is read at: a desktop
// window, and a laptop's half screen, narrower than the demo report's
// plots were drawn.
var PageWidths = []int{1400, 760}

// PageVisit is what to open in headless Chromium and what to measure.
type PageVisit struct {
	// URL is the page: a file:// or http:// address.
	URL string
	// Name names the screenshots: <Name>-<width>.png.
	Name string
	// Inside are CSS selectors of the page's plots and their axes and
	// legends: every element matching one must lie within the viewport,
	// left to right.
	Inside []string
	// Headers are sent with every request (an Authorization header).
	Headers map[string]string
	// Probe, if set, is a JavaScript expression evaluated on the laid-out
	// page; its string is PageView.Probe.
	Probe string
}

// PageView is a page as Chromium laid it out at one viewport width.
type PageView struct {
	Width int
	// Errors are the console's errors, the page's uncaught exceptions and
	// the browser's error log entries (a refused load, a CSP violation).
	Errors []string
	// Requests are the requests the page made for anything but itself
	// and data: URLs.
	Requests []string
	// ScrollWidth is the document's width; over Width, the page scrolls
	// sideways.
	ScrollWidth int
	// Outside are the elements matching PageVisit.Inside that stick out
	// of the viewport, each with its selector and its left and right
	// edges in CSS pixels.
	Outside []string
	// Matched counts the elements PageVisit.Inside matched.
	Matched int
	// Text is the page's text as the browser renders it (innerText).
	Text string
	// Screenshot is the path of the full-page PNG.
	Screenshot string
	// Probe is what PageVisit.Probe returned.
	Probe string
}

// Check fails t for what a page must never do at any width: a console
// error, a request that leaves the page, sideways scrolling, and a plot,
// axis or legend outside the viewport.
func (v PageView) Check(t testing.TB) {
	t.Helper()
	for _, e := range v.Errors {
		t.Errorf("at %d px: console error: %s", v.Width, e)
	}
	for _, r := range v.Requests {
		t.Errorf("at %d px: the page requested %s: a page fetches nothing", v.Width, r)
	}
	if v.ScrollWidth > v.Width {
		t.Errorf("at %d px: the page is %d px wide: it scrolls sideways", v.Width, v.ScrollWidth)
	}
	for _, o := range v.Outside {
		t.Errorf("at %d px: outside the viewport: %s", v.Width, o)
	}
}

// chromiumNames are the names Chromium goes by on PATH; Debian's package
// (deps/versions.env) installs chromium.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome"}

// measure reads the laid-out page: its width, its text, and each
// selector's elements that stick out of the viewport. %s is the
// selectors as a JSON array.
const measure = `(() => {
  const w = document.documentElement.clientWidth, out = [];
  let matched = 0;
  for (const sel of %s) {
    for (const el of document.querySelectorAll(sel)) {
      matched++;
      const r = el.getBoundingClientRect();
      if (r.left < -0.5 || r.right > w + 0.5) out.push(sel + " #" + matched + " spans " + r.left.toFixed(1) + "–" + r.right.toFixed(1) + " px of " + w);
    }
  }
  return {scrollWidth: document.documentElement.scrollWidth, outside: out, matched: matched, text: document.body.innerText};
})()`

// VisitPage opens v.URL in a headless Chromium at each of PageWidths,
// each in a new tab, and returns what it saw there; screenshots go to
// t.ArtifactDir() (kept under go test's -outputdir with -artifacts). A
// machine without Chromium goes through RequirePrivileged. The browser
// runs under a two-minute bound and is closed before VisitPage returns.
func VisitPage(t testing.TB, v PageVisit) []PageView {
	t.Helper()
	var exe string
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			exe = p
			break
		}
	}
	if exe == "" {
		RequirePrivileged(t, "headless Chromium", errors.New("none of chromium, chromium-browser, google-chrome on PATH: apt-get install chromium"))
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.UserDataDir(t.TempDir()), chromedp.NoSandbox, chromedp.DisableGPU,
		// The page is the only thing that may reach the network.
		chromedp.Flag("no-pings", true), chromedp.Flag("disable-component-update", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	browser, closeBrowser := chromedp.NewContext(alloc)
	defer closeBrowser()
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	dir := t.ArtifactDir()
	var views []PageView
	for _, width := range PageWidths {
		view, err := visitAt(browser, v, width, dir)
		if err != nil {
			t.Fatalf("%s at %d px: %v", v.URL, width, err)
		}
		t.Logf("%s at %d px: screenshot %s", v.Name, width, view.Screenshot)
		views = append(views, view)
	}
	if err := chromedp.Cancel(browser); err != nil {
		t.Errorf("close %s: %v", exe, err)
	}
	return views
}

func visitAt(browser context.Context, v PageVisit, width int, dir string) (PageView, error) {
	tab, closeTab := chromedp.NewContext(browser)
	defer closeTab()
	view := PageView{Width: width}
	// Chromium asks an http page's server for /favicon.ico on its own,
	// whatever the page says: not the page's request.
	favicon := ""
	if u, err := url.Parse(v.URL); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		favicon = u.Scheme + "://" + u.Host + "/favicon.ico"
	}
	var mu sync.Mutex
	err := chromedp.Listen(tab, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			if u := ev.Request.URL; u != v.URL && u != favicon && !strings.HasPrefix(u, "data:") {
				view.Requests = append(view.Requests, u)
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value))
				}
				view.Errors = append(view.Errors, "console.error("+strings.Join(args, ", ")+")")
			}
		case *runtime.EventExceptionThrown:
			view.Errors = append(view.Errors, (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError {
				view.Errors = append(view.Errors, fmt.Sprintf("%s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	if err != nil {
		return view, err
	}
	headers := network.Headers{}
	for k, h := range v.Headers {
		headers[k] = h
	}
	err = chromedp.Do(tab,
		chromedp.EmulateViewport(int64(width), 900),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: headers})
			return err
		}),
		chromedp.Navigate(v.URL))
	if err != nil {
		return view, err
	}
	sel, err := json.Marshal(v.Inside)
	if err != nil {
		return view, err
	}
	m, err := chromedp.Run(tab, chromedp.Evaluate[struct {
		ScrollWidth int      `json:"scrollWidth"`
		Outside     []string `json:"outside"`
		Matched     int      `json:"matched"`
		Text        string   `json:"text"`
	}](fmt.Sprintf(measure, sel)))
	if err != nil {
		return view, fmt.Errorf("measure the page: %w", err)
	}
	if v.Probe != "" {
		if view.Probe, err = chromedp.Run(tab, chromedp.Evaluate[string](v.Probe)); err != nil {
			return view, fmt.Errorf("probe the page: %w", err)
		}
	}
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		return view, fmt.Errorf("screenshot: %w", err)
	}
	view.Screenshot = filepath.Join(dir, fmt.Sprintf("%s-%d.png", v.Name, width))
	if err := os.WriteFile(view.Screenshot, png, 0o644); err != nil {
		return view, err
	}
	mu.Lock()
	defer mu.Unlock()
	view.ScrollWidth, view.Outside, view.Matched, view.Text = m.ScrollWidth, m.Outside, m.Matched, m.Text
	return view, nil
}
