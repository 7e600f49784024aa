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
