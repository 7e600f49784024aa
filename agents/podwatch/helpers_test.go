package podwatch_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/agents/podwatch"
)

// syncWriter is a log sink the Watcher's goroutine and the test share.
type syncWriter struct {
	mu sync.Mutex
	w  interface {
		io.Writer
		String() string
	}
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }

// newTokenServer answers as an API server that takes only the bearer
// token want: one pod, and a watch that stays open.
func newTokenServer(t *testing.T, want string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+want {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"kind":"Status","code":401,"message":"Unauthorized"}`)
			return
		}
		if !strings.Contains(r.URL.RawQuery, "fieldSelector=spec.nodeName%3Da") {
			t.Errorf("a request without the node's field selector: %s", r.URL.RawQuery)
		}
		if r.URL.Query().Get("watch") == "true" {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[
			{"metadata":{"name":"checkout","namespace":"shop","uid":"uid-1"},"spec":{"nodeName":"a"}}]}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRegisterExposesEveryFigure(t *testing.T) {
	w, err := podwatch.New(podwatch.Config{Node: "a", Server: "http://127.0.0.1:1", HTTPClient: &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := w.Register(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric())
	}
	want := map[string]int{"spikehunt_podwatch_pods": 1, "spikehunt_podwatch_live": 1, "spikehunt_podwatch_lists_total": 1,
		"spikehunt_podwatch_relists_total": 2, "spikehunt_podwatch_errors_total": 2, "spikehunt_podwatch_dropped_total": 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("families and their series (-want +got):\n%s", diff)
	}
}
