package nodecapture

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/agents/capture"
	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// idleBackend arms recorders that record nothing until disarmed.
type idleBackend struct{}

func (idleBackend) Name() string { return capture.Ftrace }
func (idleBackend) Check() error { return nil }
func (idleBackend) New(capture.Spec, string) (capture.Recorder, error) {
	return idleRecorder{}, nil
}

type idleRecorder struct{}

func (idleRecorder) Arm(context.Context) error                       { return nil }
func (idleRecorder) Fire(context.Context) error                      { return nil }
func (idleRecorder) Collect(context.Context) (capture.Result, error) { return capture.Result{}, nil }
func (idleRecorder) Disarm() error                                   { return nil }

// A report computed from a stale read meets a Conflict (the write is
// conditional on the resourceVersion read), is decided again from the
// fresh object, keeps what the operator wrote meanwhile, and arms nothing
// twice.
func TestAStaleReportIsDecidedAgainAndKeepsTheOperatorsWrites(t *testing.T) {
	cfg, _ := testenv.SharedAPIServer(t)
	testenv.InstallCRDs(t, cfg, filepath.Join("..", "..", "operator", "config", "crd", "bases"))
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
	const ns = "stale-reads"
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	c := &capturev1alpha1.Capture{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: ns},
		Spec: capturev1alpha1.CaptureSpec{NodeName: "node-s", PolicyRef: capturev1alpha1.PolicyReference{Name: "p"},
			ArmingID: "c1", Reason: capturev1alpha1.ReasonBait, Profile: capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendFtrace}}}
	if err := admin.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	stale := c.DeepCopy()
	// The operator writes the status after the agent's read.
	patch := client.MergeFrom(c.DeepCopy())
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: "Sampled", Status: metav1.ConditionTrue, Reason: "Bait", Message: "epoch 7"})
	c.Status.Phase = capturev1alpha1.PhasePending
	if err := admin.Status().Patch(ctx, c, patch); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "work"), 0o750)
	eng, err := capture.NewEngine(capture.EngineConfig{Dir: filepath.Join(dir, "work"), Backends: []capture.Backend{idleBackend{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	w, err := New(Config{Node: "node-s", REST: cfg, Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	defer w.queue.ShutDown()
	if err := w.store.Add(stale); err != nil { // the informer's cache, behind
		t.Fatal(err)
	}
	key := cache.ObjectName{Namespace: ns, Name: "c1"}
	if err := w.reconcile(ctx, key); err != nil {
		t.Fatal(err)
	}

	got := &capturev1alpha1.Capture{}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(c), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != capturev1alpha1.PhaseArmed || !meta.IsStatusConditionTrue(got.Status.Conditions, "Sampled") ||
		!meta.IsStatusConditionTrue(got.Status.Conditions, capturev1alpha1.ConditionArmed) {
		t.Errorf("status %+v: want Armed with the operator's Sampled condition kept", got.Status)
	}
	if n := testutil.ToFloat64(w.m.conflicts); n != 1 {
		t.Errorf("%v conflicts counted, want 1", n)
	}
	if n := len(eng.List()); n != 1 {
		t.Errorf("the engine holds %d captures, want the one armed once", n)
	}
	// Deciding again from the stale cache arms nothing more and writes
	// nothing that would undo the operator's condition.
	if err := w.reconcile(ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := len(eng.List()); n != 1 {
		t.Errorf("the engine holds %d captures after a second pass, want 1", n)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(c), got); err != nil || !meta.IsStatusConditionTrue(got.Status.Conditions, "Sampled") {
		t.Errorf("after a second pass from the stale cache: %v %+v", err, got.Status.Conditions)
	}
}
