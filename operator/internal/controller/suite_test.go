package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/fakeclock"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	// SPIKEHUNT_TEST_LOG=1 shows the controllers' logs.
	if os.Getenv("SPIKEHUNT_TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// crdDir holds the CRDs `make manifests` generates.
var crdDir = filepath.Join("..", "..", "config", "crd", "bases")

// env is one test's kube-apiserver and etcd with the CRDs, and an
// uncached admin client to assert through. Each test has a server of its
// own: the budgets count every Capture in the cluster, and envtest has no
// namespace controller to clear a namespace away.
type env struct {
	cfg   *rest.Config
	admin client.WithWatch
	ns    string
	clock *fakeclock.Clock
}

func newEnv(t testing.TB) *env {
	t.Helper()
	cfg, _ := testenv.StartAPIServer(t, crdDir)
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 2000, 4000
	s := testScheme(t)
	admin, err := client.NewWithWatch(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{cfg: cfg, admin: admin, ns: "spikehunt", clock: fakeclock.New(time.Now().UTC().Truncate(time.Hour).Add(10 * time.Minute))}
	if err := admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}); err != nil {
		t.Fatal(err)
	}
	return e
}

func testScheme(t testing.TB) *runtime.Scheme {
	s, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// operator is one run of the operator's controllers in a manager.
type operator struct {
	policies *CapturePolicyReconciler
	captures *CaptureReconciler
	alerts   *AlertInbox
	client   client.Client // the manager's: its cache
	cancel   context.CancelFunc
	done     chan error
}

// operatorOptions adjust the controllers a test runs.
type operatorOptions struct {
	store     store.Store
	artifacts ArtifactDeleter
	// decide replaces policy.Decide.
	decide func(policy.Input) (policy.Decision, error)
	// fast makes the controllers look at the clock again within 100 ms,
	// for tests that move the fake clock.
	fast bool
}

// startOperator runs the controllers in a manager until stop (or the
// test's end).
func (e *env) startOperator(t testing.TB, o operatorOptions) *operator {
	t.Helper()
	skip := true
	cfg := rest.CopyConfig(e.cfg)
	cfg.QPS, cfg.Burst = DefaultClientQPS, DefaultClientBurst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testScheme(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Tests run several managers in one process.
		Controller: config.Controller{SkipNameValidation: &skip},
		Cache:      CacheOptions(),
	})
	if err != nil {
		t.Fatal(err)
	}
	op := &operator{done: make(chan error, 1), client: mgr.GetClient()}
	op.alerts = NewAlertInbox(mgr.GetClient(), AlertInboxConfig{Clock: e.clock})
	op.policies = &CapturePolicyReconciler{Alerts: op.alerts, Clock: e.clock, Decide: o.decide}
	op.captures = &CaptureReconciler{Store: o.store, Artifacts: o.artifacts, Clock: e.clock,
		IndexRetry: 100 * time.Millisecond, IndexWait: time.Minute}
	if o.fast {
		op.policies.MaxRequeue = 100 * time.Millisecond
		op.captures.MaxRequeue = 100 * time.Millisecond
	}
	if err := op.policies.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := op.captures.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	op.cancel = cancel
	go func() { op.done <- mgr.Start(ctx) }()
	t.Cleanup(func() { op.stop(t) })
	return op
}

// stop stops the manager and waits for it; calling it again is harmless.
func (op *operator) stop(t testing.TB) {
	t.Helper()
	op.cancel()
	if op.done == nil {
		return
	}
	select {
	case err := <-op.done:
		if err != nil {
			t.Errorf("manager: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the manager did not stop within 30 s")
	}
	op.done = nil
}

// offer hands alerts to the operator's inbox.
func (op *operator) offer(t testing.TB, alerts ...policy.Alert) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		err := op.alerts.Offer(ctx, alerts...)
		if err == nil {
			return
		}
		// The cache may not have started yet.
		if ctx.Err() != nil {
			t.Fatalf("offer alerts: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// node is a Node to create: its name, hardware class and other labels.
type node struct {
	name, class string
	labels      map[string]string
}

// fleet makes n Nodes named <prefix>-<i>, in the classes in turn, with
// label fleet=<prefix>.
func fleet(prefix string, n int, classes ...string) []node {
	out := make([]node, n)
	for i := range out {
		out[i] = node{name: fmt.Sprintf("%s-%03d", prefix, i), class: classes[i%len(classes)], labels: map[string]string{"fleet": prefix}}
	}
	return out
}

func (e *env) createNodes(t testing.TB, nodes []node) {
	t.Helper()
	errs := forEach(context.Background(), len(nodes), 32, func(ctx context.Context, i int) error {
		n := nodes[i]
		l := map[string]string{v1alpha1.DefaultHWClassLabel: n.class}
		for k, v := range n.labels {
			l[k] = v
		}
		return e.admin.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: l}})
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// policyNodes is the nodes as policy.Sample takes them.
func policyNodes(nodes []node) []policy.Node {
	out := make([]policy.Node, len(nodes))
	for i, n := range nodes {
		out[i] = policy.Node{Name: n.name, HWClass: n.class}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// basePolicy samples the nodes labelled fleet=<fleetName>: perf bait with
// a local latency trigger, fleet alerts of any class widening by one,
// a 1h rotation, no cooldown.
func (e *env) basePolicy(name, fleetName string) *v1alpha1.CapturePolicy {
	return &v1alpha1.CapturePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: v1alpha1.CapturePolicySpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": fleetName}},
			Service:      "billy",
			Sampling:     v1alpha1.Sampling{Percent: ptr[int32](10), RotationPeriod: dur(time.Hour)},
			Profile:      v1alpha1.CaptureProfile{Backend: v1alpha1.BackendPerf, Profile: "cpu", Pre: dur(10 * time.Second), Post: dur(2 * time.Second)},
			Triggers: &v1alpha1.Triggers{
				Local:       &v1alpha1.LocalTrigger{Latency: dur(time.Second)},
				FleetAlerts: &v1alpha1.FleetAlertTrigger{},
			},
			Budgets: v1alpha1.Budgets{MaxConcurrentPerFleet: 1000, PerNodeCooldown: dur(0), MaxPerPatternPerHour: 100},
		},
	}
}

func (e *env) create(t testing.TB, o client.Object) {
	t.Helper()
	if err := e.admin.Create(context.Background(), o); err != nil {
		t.Fatalf("create %T %s: %v", o, o.GetName(), err)
	}
}

// captures lists the test namespace's Captures from the API server.
func (e *env) captures(t testing.TB) []v1alpha1.Capture {
	t.Helper()
	var list v1alpha1.CaptureList
	if err := e.admin.List(context.Background(), &list, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.Capture) int { return compareStrings(a.Name, b.Name) })
	return list.Items
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (e *env) capture(t testing.TB, name string) *v1alpha1.Capture {
	t.Helper()
	var c v1alpha1.Capture
	if err := e.admin.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &c); err != nil {
		t.Fatalf("get capture %s: %v", name, err)
	}
	return &c
}

func (e *env) policy(t testing.TB, name string) *v1alpha1.CapturePolicy {
	t.Helper()
	var p v1alpha1.CapturePolicy
	if err := e.admin.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &p); err != nil {
		t.Fatalf("get policy %s: %v", name, err)
	}
	return &p
}

// agent writes a Capture's status as the node's agent does: read, change,
// update, again on a conflict.
func (e *env) agent(t testing.TB, name string, change func(st *v1alpha1.CaptureStatus)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var c v1alpha1.Capture
		if err := e.admin.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &c); err != nil {
			return err
		}
		change(&c.Status)
		return e.admin.Status().Update(context.Background(), &c)
	})
	if err != nil {
		t.Fatalf("agent: capture %s: %v", name, err)
	}
}

// eventually polls cond every 50 ms until it returns nil or timeout
// passes, then fails with its last error.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
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
		time.Sleep(50 * time.Millisecond)
	}
}

// consistently checks cond every 50 ms for d.
func consistently(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := cond(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// nodesOf returns the node names of the captures, sorted.
func nodesOf(cs []v1alpha1.Capture) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Spec.NodeName)
	}
	slices.Sort(out)
	return out
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// recordingDeleter is the other side of ArtifactDeleter: it records the
// artifacts it was asked to delete.
type recordingDeleter struct {
	mu      sync.Mutex
	deleted []string
}

func (d *recordingDeleter) DeleteArtifact(_ context.Context, armingID string, _ v1alpha1.Artifact) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deleted = append(d.deleted, armingID)
	return nil
}

func (d *recordingDeleter) ids() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.deleted)
}
