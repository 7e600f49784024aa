package podwatch_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/agents/podwatch"
)

func TestNamesThisNodesPodsAndFollowsThem(t *testing.T) {
	e := newEnv(t)
	a, b := e.node("a"), e.node("b")
	before := e.createPod(t, "checkout-7d9", a)
	elsewhere := e.createPod(t, "cart-5f2", b)
	w := e.run(t, podwatch.Config{Node: a})

	eventually(t, "the pod listed at start is named, with its containers", func() bool { return named(w, before) })
	if !forgotten(w, elsewhere) {
		t.Error("a pod of another node is named")
	}

	after := e.createPod(t, "payments-1a", a)
	eventually(t, "a pod created after the start is named, with its containers", func() bool { return named(w, after) })

	e.deletePod(t, before)
	eventually(t, "a deleted pod is forgotten", func() bool { return forgotten(w, before) })
	if !named(w, after) {
		t.Error("the other pod was forgotten too")
	}
	if s := w.Stats(); s.Pods != 1 || !s.Live || s.Lists != 1 || s.ListErrors+s.WatchErrors != 0 {
		t.Errorf("stats %+v: want 1 pod, live, one list and no error", s)
	}
}

func TestKeepsTheNamesWhileTheAPIServerIsAway(t *testing.T) {
	e := newEnv(t)
	a := e.node("a")
	f := newFront(t, e.agent)
	kept := e.createPod(t, "checkout-7d9", a)
	gone := e.createPod(t, "batch-0", a)
	w := e.run(t, podwatch.Config{Node: a, Server: f.url(), HTTPClient: &http.Client{}})
	eventually(t, "both pods are named", func() bool { return named(w, kept) && named(w, gone) })

	f.down()
	eventually(t, "the watch notices the API server went away", func() bool { return !w.Stats().Live })
	// Changes while the agent cannot see them.
	e.deletePod(t, gone)
	added := e.createPod(t, "checkout-8e1", a)
	time.Sleep(500 * time.Millisecond) // a few failed attempts
	if !named(w, kept) || !named(w, gone) {
		t.Fatal("the names known before the outage are not answered during it")
	}
	if s := w.Stats(); s.ListErrors+s.WatchErrors == 0 {
		t.Errorf("stats %+v: no failed attempt counted during the outage", s)
	}

	f.up()
	eventually(t, "after the outage a new pod is named", func() bool { return named(w, added) })
	eventually(t, "after the outage a pod deleted during it is forgotten", func() bool { return forgotten(w, gone) })
	if !named(w, kept) || !w.Stats().Live {
		t.Errorf("after the outage: kept pod named %v, stats %+v", named(w, kept), w.Stats())
	}
}

// The ERROR event the API server sends when a watch's resourceVersion is
// older than it keeps.
const goneEvent = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}}` + "\n"

func TestListsAgainAfterGone(t *testing.T) {
	e := newEnv(t)
	a := e.node("a")
	f := newFront(t, e.agent)
	first := e.createPod(t, "checkout-7d9", a)
	// The first watch gets a 410 event in its stream, the second a 410
	// status: both mean only a new list recovers.
	f.setHook(once(2, func(i int, w http.ResponseWriter) {
		if i == 0 {
			writeStream(w, []byte(goneEvent))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGone)
		w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410}`))
	}))
	w := e.run(t, podwatch.Config{Node: a, Server: f.url(), HTTPClient: &http.Client{}})
	eventually(t, "the pod is named", func() bool { return named(w, first) })
	eventually(t, "two 410s were answered with two more lists", func() bool {
		s := w.Stats()
		return s.RelistsGone == 2 && s.Lists == 3
	})
	later := e.createPod(t, "checkout-8e1", a)
	eventually(t, "the watch after the lists names a new pod", func() bool { return named(w, later) })
	if s := w.Stats(); s.WatchErrors != 0 || s.RelistsError != 0 {
		t.Errorf("stats %+v: a 410 counted as an error", s)
	}
}

func TestRecoversFromAHostileStream(t *testing.T) {
	const maxEvent = 16 << 10
	for _, tc := range []struct{ name, stream, logs string }{
		{"an event over the bound", `{"type":"ADDED","object":{"metadata":{"name":"` + strings.Repeat("x", 1<<20) + `"}}}`,
			"over 16384 bytes (MaxEventBytes)"},
		{"garbage", `{"type":"ADDED","object":{"metadata":]]]` + "\n", "read the watch stream"},
		{"a pod without a uid", `{"type":"ADDED","object":{"metadata":{"name":"p","namespace":"n"},"spec":{"nodeName":"x"}}}` + "\n", "a uid of 0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			a := e.node("a")
			f := newFront(t, e.agent)
			known := e.createPod(t, "checkout-7d9", a)
			f.setHook(once(1, func(_ int, w http.ResponseWriter) { writeStream(w, []byte(tc.stream)) }))
			var logs bytes.Buffer
			var mu syncWriter
			mu.w = &logs
			w := e.run(t, podwatch.Config{Node: a, Server: f.url(), HTTPClient: &http.Client{}, MaxEventBytes: maxEvent,
				Log: slog.New(slog.NewTextHandler(&mu, nil))})
			eventually(t, "the stream's error is counted and a new list made", func() bool {
				s := w.Stats()
				return s.WatchErrors == 1 && s.RelistsError == 1 && s.Lists == 2
			})
			if !named(w, known) {
				t.Error("the pod listed before the hostile stream is not named")
			}
			later := e.createPod(t, "checkout-8e1", a)
			eventually(t, "the watch recovered: a new pod is named", func() bool { return named(w, later) })
			if got := mu.String(); !strings.Contains(got, tc.logs) {
				t.Errorf("the log does not say %q:\n%s", tc.logs, got)
			}
		})
	}
}

func TestKeepsAtMostMaxPods(t *testing.T) {
	e := newEnv(t)
	a := e.node("a")
	for _, n := range []string{"p1", "p2", "p3"} {
		e.createPod(t, n, a)
	}
	w := e.run(t, podwatch.Config{Node: a, MaxPods: 2})
	eventually(t, "two pods kept, one dropped", func() bool {
		s := w.Stats()
		return s.Pods == 2 && s.DroppedPods == 1
	})
	e.createPod(t, "p4", a)
	eventually(t, "a pod added when full is dropped and counted", func() bool { return w.Stats().DroppedPods >= 2 }) // its ADDED, and its MODIFIED when the status is written
	if s := w.Stats(); s.Pods != 2 {
		t.Errorf("stats %+v: want 2 pods kept", s)
	}
}

func TestWithoutTheAgentsRoleTheWatchIsRefusedAndSaysWhy(t *testing.T) {
	e := newEnv(t)
	a := e.node("a")
	p := e.createPod(t, "checkout-7d9", a)
	e.agent.Impersonate.UserName = "system:serviceaccount:" + systemNamespace + ":nobody"
	var mu syncWriter
	mu.w = &bytes.Buffer{}
	w := e.run(t, podwatch.Config{Node: a, Log: slog.New(slog.NewTextHandler(&mu, nil))})
	eventually(t, "the list is refused", func() bool { return w.Stats().ListErrors > 0 })
	if !forgotten(w, p) {
		t.Error("a pod is named without the right to list pods")
	}
	if got := mu.String(); !strings.Contains(got, "403") || !strings.Contains(got, "get, list and watch on pods") {
		t.Errorf("the log does not say the role is missing:\n%s", got)
	}
}

// TestTheTokenIsReadAgainAfterARefusal: the kubelet rotates the token
// file; a 401 makes the next request read it again.
func TestTheTokenIsReadAgainAfterARefusal(t *testing.T) {
	dir := t.TempDir()
	tokenPath := dir + "/token"
	if err := writeFile(tokenPath, "old\n"); err != nil {
		t.Fatal(err)
	}
	var mu syncWriter
	mu.w = &bytes.Buffer{}
	srv := newTokenServer(t, "new")
	w, err := podwatch.New(podwatch.Config{Node: "a", Server: srv.URL, HTTPClient: &http.Client{}, TokenFile: tokenPath,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&mu, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "the old token is refused", func() bool { return w.Stats().ListErrors > 0 })
	if err := writeFile(tokenPath, "new\n"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the rotated token is read and the pod named", func() bool {
		name, ok := w.PodName("uid-1")
		return ok && name == "shop/checkout"
	})
	if !strings.Contains(mu.String(), "401") {
		t.Errorf("the log does not say the token was refused:\n%s", mu.String())
	}
}
