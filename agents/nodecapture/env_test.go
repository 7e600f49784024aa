package nodecapture_test

import (
	"context"
	"fmt"
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

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/nodecapture"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

var (
	configDir = filepath.Join("..", "..", "operator", "config")
	crdDir    = filepath.Join(configDir, "crd", "bases")
	rbacDir   = filepath.Join(configDir, "rbac")
)

const systemNamespace = "spikehunt-system"

// env is the test binary's API server with the Captures' CRD and
// operator/config/rbac applied, an admin client that plays the operator,
// and the agent's own identity: the Watcher under test runs as the
// spikehunt-agent ServiceAccount, so that a test passes only if the
// agent's ClusterRole is enough.
type env struct {
	admin client.Client
	agent *rest.Config
	ns    string
}

var setupOnce struct {
	sync.Once
	err error
}

// newEnv returns the shared environment with a namespace of the test's own.
func newEnv(t *testing.T) *env {
	t.Helper()
	cfg, _ := testenv.SharedAPIServer(t)
	testenv.InstallCRDs(t, cfg, crdDir)
	s, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := capturev1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	setupOnce.Do(func() {
		setupOnce.err = testenv.CreateAll(ctx, admin, append([]client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}}, testenv.Manifests(t, s, rbacDir)...))
	})
	if setupOnce.err != nil {
		t.Fatal(setupOnce.err)
	}
	ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(ns) > 50 {
		ns = ns[:50]
	}
	ns = strings.Trim(ns, "-")
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	agent := testenv.AsServiceAccount(cfg, systemNamespace, "spikehunt-agent")
	return &env{admin: admin, agent: agent, ns: ns}
}

// another returns the environment with a second namespace of the test's.
func (e *env) another(t *testing.T, suffix string) *env {
	t.Helper()
	o := *e
	o.ns = e.ns + "-" + suffix
	if err := e.admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.ns}}); err != nil {
		t.Fatal(err)
	}
	return &o
}

// agentRun is a Watcher running as the agent.
type agentRun struct {
	w      *nodecapture.Watcher
	cancel context.CancelFunc
	done   chan error
}

// startWatcher runs a Watcher for node over eng as the agent's
// ServiceAccount until the test ends or stop is called.
func (e *env) startWatcher(t *testing.T, node string, eng *capture.Engine) *agentRun {
	t.Helper()
	w, err := nodecapture.New(nodecapture.Config{Node: node, REST: e.agent, Engine: eng, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &agentRun{w: w, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends the Watcher and returns what Run returned.
func (r *agentRun) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // a second stop sees the same
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the Watcher did not stop within 30s")
		return nil
	}
}

// capture makes a Capture for node in the test's namespace, as the
// operator does.
func (e *env) capture(t *testing.T, name, node string, p capturev1alpha1.CaptureProfile, tr *capturev1alpha1.LocalTrigger) *capturev1alpha1.Capture {
	t.Helper()
	c := &capturev1alpha1.Capture{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: capturev1alpha1.CaptureSpec{NodeName: node, PolicyRef: capturev1alpha1.PolicyReference{Name: "checkout"},
			ArmingID: name, Reason: capturev1alpha1.ReasonBait, Profile: p, Trigger: tr},
	}
	if err := e.admin.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) get(t *testing.T, name string) *capturev1alpha1.Capture {
	t.Helper()
	c := &capturev1alpha1.Capture{}
	if err := e.admin.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// setPhase writes a Capture's phase as the operator (or a previous agent)
// would.
func (e *env) setPhase(t *testing.T, name string, phase capturev1alpha1.CapturePhase) {
	t.Helper()
	c := e.get(t, name)
	patch := client.MergeFrom(c.DeepCopy())
	c.Status.Phase = phase
	if phase == capturev1alpha1.PhaseArmed {
		c.Status.ArmedAt = new(metav1.Now())
	}
	if err := e.admin.Status().Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
}

// waitPhase waits until the Capture is in phase and returns it.
func (e *env) waitPhase(t *testing.T, name string, phase capturev1alpha1.CapturePhase, timeout time.Duration) *capturev1alpha1.Capture {
	t.Helper()
	var c *capturev1alpha1.Capture
	eventually(t, timeout, fmt.Sprintf("capture %s %s", name, phase), func() error {
		c = e.get(t, name)
		if c.Status.Phase != phase {
			return fmt.Errorf("phase %q (%s)", c.Status.Phase, c.Status.Message)
		}
		return nil
	})
	return c
}

// eventually polls cond every 20 ms until it returns nil or timeout
// passes, then fails with its last error.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// consistently checks cond every 50 ms for d.
func consistently(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := cond(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// states records every state the engine reports for each capture id.
type states struct {
	mu sync.Mutex
	m  map[string][]control.State
}

func recordStates(eng *capture.Engine) *states {
	s := &states{m: map[string][]control.State{}}
	eng.OnChange(func(id string) {
		st, ok := eng.Get(id)
		if !ok {
			return
		}
		s.mu.Lock()
		s.m[id] = append(s.m[id], st.State)
		s.mu.Unlock()
	})
	return s
}

func (s *states) of(id string) []control.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]control.State(nil), s.m[id]...)
}

func (s *states) saw(id string, want control.State) error {
	for _, st := range s.of(id) {
		if st == want {
			return nil
		}
	}
	return fmt.Errorf("engine states of %s: %v, no %s", id, s.of(id), want)
}
