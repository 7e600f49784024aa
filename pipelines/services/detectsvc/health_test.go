package detectsvc

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

func TestDetectHealthFailsWhenPassesAreOverdue(t *testing.T) {
	start := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC) // any time: the clock is the test's
	now := start
	reg := prometheus.NewRegistry()
	h := NewHealth(reg, 30*time.Second, start)
	// The base is the service's other checks (the store's, in the
	// command): here always ok, so that the answer is the passes'.
	base := http.NewServeMux()
	base.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	base.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	srv := httptest.NewServer(h.Mux(base, func() time.Time { return now }))
	defer srv.Close()
	get := func(path string) (int, string) {
		res, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	step := func(at time.Duration, want int, body string) {
		t.Helper()
		now = start.Add(at)
		code, got := get("/healthz")
		if code != want || !strings.Contains(got, body) {
			t.Errorf("at +%s: /healthz %d %q, want %d with %q", at, code, got, want, body)
		}
	}
	step(9*time.Minute, 200, "ok")                             // the first pass may take a while
	step(11*time.Minute, 503, "no detector pass has finished") // … but not forever
	h.Observe(detect.Result{Timing: detect.Timing{Total: 2 * time.Second}}, start.Add(11*time.Minute))
	step(12*time.Minute, 200, "ok")                                                      // 1 min after a pass
	step(11*time.Minute+2*time.Minute+31*time.Second, 503, "ago (one is due every 30s)") // three passes and a minute late
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "spikehunt_detect_passes_total 1") {
		t.Errorf("/metrics %d:\n%s", code, body)
	}
}

// /livez restarts only a detector that is stuck: one pass running for half
// an hour, or no pass tried for three intervals and a minute. Passes that
// fail because the store is down keep it alive (they are tried again and
// the gap is caught up), while /healthz says they are overdue.
func TestDetectLivenessIsAboutBeingStuckNotAboutFailing(t *testing.T) {
	start := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	now := start
	h := NewHealth(prometheus.NewRegistry(), 30*time.Second, start)
	base := http.NewServeMux()
	base.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	srv := httptest.NewServer(h.Mux(base, func() time.Time { return now }))
	defer srv.Close()
	step := func(at time.Duration, path string, want int, body string) {
		t.Helper()
		now = start.Add(at)
		res, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != want || !strings.Contains(string(b), body) {
			t.Errorf("at +%s: %s %d %q, want %d with %q", at, path, res.StatusCode, b, want, body)
		}
	}
	h.Begin(start)
	h.Observe(detect.Result{}, start.Add(time.Second))
	// The store goes down: every pass fails, and is tried again.
	for at := 30 * time.Second; at <= 20*time.Minute; at += 2 * time.Minute {
		h.Begin(start.Add(at))
		h.Failed(start.Add(at + time.Second))
	}
	step(20*time.Minute+30*time.Second, "/livez", 200, "ok")
	step(20*time.Minute+30*time.Second, "/healthz", 503, "ago")
	// A long catch-up pass is alive; one of half an hour is stuck.
	h.Begin(start.Add(21 * time.Minute))
	step(40*time.Minute, "/livez", 200, "ok")
	step(52*time.Minute, "/livez", 503, "a detector pass has run for 31m0s")
	h.Observe(detect.Result{}, start.Add(53*time.Minute))
	step(54*time.Minute, "/livez", 200, "ok")
	step(54*time.Minute, "/healthz", 200, "ok")
	// No pass tried at all for ten minutes (a loop that stopped): stuck.
	step(64*time.Minute, "/livez", 503, "no detector pass was tried in 11m0s")
}
