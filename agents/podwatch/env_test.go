package podwatch_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/agents/podwatch"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// The agent's RBAC as operator/config/rbac writes it; the chart's agent
// ClusterRole is held equal to it (helm's TestRBACIsTheOperatorsOwn).
var rbacDir = filepath.Join("..", "..", "operator", "config", "rbac")

const systemNamespace = "spikehunt-system"

// env is the test binary's API server with operator/config/rbac applied,
// an admin client that plays the kubelet, and the agent's identity: every
// Watcher here runs as the spikehunt-agent ServiceAccount, so a test
// passes only if the agent's ClusterRole is enough for the watch.
type env struct {
	admin client.Client
	agent *rest.Config
	ns    string
}

var setupOnce struct {
	sync.Once
	err error
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cfg, _ := testenv.SharedAPIServer(t)
	s, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	setupOnce.Do(func() {
		objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}}
		for _, o := range testenv.Manifests(t, s, rbacDir) {
			if strings.HasPrefix(o.GetName(), "spikehunt-agent") { // the agent's role and binding alone
				objs = append(objs, o)
			}
		}
		setupOnce.err = testenv.CreateAll(ctx, admin, objs)
	})
	if setupOnce.err != nil {
		t.Fatal(setupOnce.err)
	}
	ns := strings.Trim(strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), "-")
	if len(ns) > 50 {
		ns = strings.Trim(ns[:50], "-")
	}
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return &env{admin: admin, agent: testenv.AsServiceAccount(cfg, systemNamespace, "spikehunt-agent"), ns: ns}
}

// node is a node name of the test's own: pods of other tests never match.
func (e *env) node(suffix string) string { return e.ns + "-" + suffix }

// containerID is a containerd id as the cgroup path holds it: 64 hex
// digits, made from the pod and container names.
func containerID(pod, ctr string) string {
	return fmt.Sprintf("%064x", []byte(pod+"/"+ctr))[:64]
}

// createPod creates a pod bound to node, then writes its status as the
// kubelet would: one app container and one init container with their
// runtime ids.
func (e *env) createPod(t *testing.T, name, node string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PodSpec{NodeName: node,
			InitContainers: []corev1.Container{{Name: "migrate", Image: "shop:1"}},
			Containers:     []corev1.Container{{Name: "app", Image: "shop:1"}}},
	}
	if err := e.admin.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "migrate", Image: "shop:1", ContainerID: "cri-o://" + containerID(name, "migrate")}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "shop:1", ContainerID: "containerd://" + containerID(name, "app")}}
	if err := e.admin.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// deletePod deletes p at once: with no kubelet to confirm, a graceful
// deletion would leave it terminating.
func (e *env) deletePod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if err := e.admin.Delete(context.Background(), p, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
}

// run starts a Watcher until the test ends. server and hc are the agent's
// own unless given (a front, below).
func (e *env) run(t *testing.T, cfg podwatch.Config) *podwatch.Watcher {
	t.Helper()
	if cfg.Server == "" {
		hc, err := rest.HTTPClientFor(e.agent)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Server, cfg.HTTPClient = e.agent.Host, hc
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff, cfg.MaxBackoff = 20*time.Millisecond, 300*time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	w, err := podwatch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of its context's end")
		}
	})
	return w
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// eventually polls cond for up to 30s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// named reports whether w names pod p and both its containers.
func named(w *podwatch.Watcher, p *corev1.Pod) bool {
	name, ok := w.PodName(string(p.UID))
	app, ok2 := w.ContainerName(containerID(p.Name, "app"))
	mig, ok3 := w.ContainerName(containerID(p.Name, "migrate"))
	return ok && ok2 && ok3 && name == p.Namespace+"/"+p.Name && app == "app" && mig == "migrate"
}

// forgotten reports whether w knows nothing of pod p.
func forgotten(w *podwatch.Watcher, p *corev1.Pod) bool {
	_, ok := w.PodName(string(p.UID))
	_, ok2 := w.ContainerName(containerID(p.Name, "app"))
	return !ok && !ok2
}

// front stands between a Watcher and the API server, as the agent's
// ServiceAccount: it can go away (its port refuses connections) and come
// back on the same address, and a hook may answer a request in the API
// server's place, to play a hostile or broken server.
type front struct {
	t      *testing.T
	addr   string
	proxy  *httputil.ReverseProxy
	mu     sync.Mutex
	srv    *http.Server
	hook   func(w http.ResponseWriter, r *http.Request) bool
	served map[string]int // by "list" or "watch"
}

func newFront(t *testing.T, agent *rest.Config) *front {
	t.Helper()
	target, err := url.Parse(agent.Host)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(agent)
	if err != nil {
		t.Fatal(err)
	}
	p := httputil.NewSingleHostReverseProxy(target)
	p.Transport, p.FlushInterval = rt, -1 // a watch streams
	f := &front{t: t, proxy: p, served: map[string]int{}}
	f.up()
	t.Cleanup(f.down)
	return f
}

func (f *front) url() string { return "http://" + f.addr }

// up listens again, on the same address after the first time.
func (f *front) up() {
	f.t.Helper()
	addr := f.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	for range 50 { // the old socket may linger a moment
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		f.t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(f.serve)}
	f.mu.Lock()
	f.srv = srv
	f.mu.Unlock()
	go srv.Serve(ln)
}

// down closes the listener and every connection, watches included.
func (f *front) down() {
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	f.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

func (f *front) serve(w http.ResponseWriter, r *http.Request) {
	kind := "list"
	if r.URL.Query().Get("watch") == "true" {
		kind = "watch"
	}
	f.mu.Lock()
	f.served[kind]++
	hook := f.hook
	f.mu.Unlock()
	if hook != nil && hook(w, r) {
		return
	}
	f.proxy.ServeHTTP(w, r)
}

func (f *front) setHook(h func(w http.ResponseWriter, r *http.Request) bool) {
	f.mu.Lock()
	f.hook = h
	f.mu.Unlock()
}

// once answers the first n watch requests with answer, then passes every
// request through.
func once(n int, answer func(i int, w http.ResponseWriter)) func(http.ResponseWriter, *http.Request) bool {
	var mu sync.Mutex
	i := 0
	return func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Get("watch") != "true" {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if i >= n {
			return false
		}
		answer(i, w)
		i++
		return true
	}
}

func writeStream(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}
