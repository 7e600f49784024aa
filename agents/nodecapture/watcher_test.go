package nodecapture_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/nodecapture"
	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// fileBackend is a recorder on the engine's own Backend interface that
// writes a file at Fire and one at Collect: the engine around it (budgets,
// post-window, sealing, the store) is the real one, and these tests need
// no kernel tracer. perf_linux_test.go runs the real perf.
type fileBackend struct{ live atomic.Int32 }

func (b *fileBackend) Name() string { return capture.Ftrace }
func (b *fileBackend) Check() error { return nil }
func (b *fileBackend) New(spec capture.Spec, dir string) (capture.Recorder, error) {
	if spec.Profile != "" && spec.Profile != "default" {
		return nil, fmt.Errorf("%w: no ftrace profile %q", capture.ErrInvalid, spec.Profile)
	}
	return &fileRecorder{b: b, dir: dir}, nil
}

type fileRecorder struct {
	b     *fileBackend
	dir   string
	files []string
	live  bool
}

func (r *fileRecorder) Arm(context.Context) error { r.live = true; r.b.live.Add(1); return nil }
func (r *fileRecorder) write(name string) error {
	r.files = append(r.files, name)
	return os.WriteFile(filepath.Join(r.dir, name), []byte(strings.Repeat(name, 100)), 0o640)
}
func (r *fileRecorder) Fire(context.Context) error { return r.write("pre.trace") }
func (r *fileRecorder) Collect(context.Context) (capture.Result, error) {
	err := r.write("post.trace")
	r.Disarm()
	return capture.Result{Files: r.files, Lost: 2}, err
}
func (r *fileRecorder) Disarm() error {
	if r.live {
		r.live = false
		r.b.live.Add(-1)
	}
	return nil
}

// newEngine is a real engine with the given backends and a local store.
func newEngine(t *testing.T, host string, backends ...capture.Backend) (*capture.Engine, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "store"), 0o750); err != nil {
		t.Fatal(err)
	}
	store, err := artifact.OpenLocalStore(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := capture.NewEngine(capture.EngineConfig{Dir: filepath.Join(dir, "work"), Backends: backends, Store: store,
		Resource: capture.HostIdentity{Host: host, Node: host}, MaxConcurrent: 3, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(); store.Close() })
	return eng, filepath.Join(dir, "store")
}

// testLogger logs to the test's output until the test ends.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done atomic.Bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done.Load() {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

var _ io.Writer = (*testWriter)(nil)

var ftrace = capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendFtrace,
	Pre: &metav1.Duration{Duration: time.Second}, Post: &metav1.Duration{Duration: 300 * time.Millisecond}}

func TestTheAgentArmsOnlyItsNodesCapturesAndReportsThemUntilUploaded(t *testing.T) {
	e := newEnv(t)
	eng, storeDir := newEngine(t, "node-a", &fileBackend{})
	seen := recordStates(eng)
	e.startWatcher(t, "node-a", eng)

	e.capture(t, "mine", "node-a", ftrace, nil)
	e.capture(t, "theirs", "node-b", ftrace, nil)
	c := e.waitPhase(t, "mine", capturev1alpha1.PhaseArmed, 20*time.Second)
	cond := meta.FindStatusCondition(c.Status.Conditions, capturev1alpha1.ConditionArmed)
	if c.Status.ArmedAt == nil || cond == nil || cond.Status != metav1.ConditionTrue || c.Status.ObservedGeneration != c.Generation {
		t.Errorf("armed status %+v", c.Status)
	}
	id := "mine"
	if st, ok := eng.Get(id); !ok || st.State != control.Armed {
		t.Fatalf("engine has %s: %v %s", id, ok, st.State)
	}
	consistently(t, time.Second, "another node's Capture", func() error {
		if c := e.get(t, "theirs"); c.Status.Phase != "" {
			return fmt.Errorf("node-b's Capture went %s on node-a's agent", c.Status.Phase)
		}
		if _, ok := eng.Get("theirs"); ok {
			return errors.New("node-a's engine armed node-b's Capture")
		}
		return nil
	})

	// A person fires it on the node (spikehunt-agent capture fire).
	if err := eng.Fire(id, ""); err != nil {
		t.Fatal(err)
	}
	c = e.waitPhase(t, "mine", capturev1alpha1.PhaseUploaded, 20*time.Second)
	if err := seen.saw(id, control.Fired); err != nil {
		t.Error(err)
	}
	s := c.Status
	a := s.Artifact
	if a == nil || !strings.HasPrefix(a.URI, "file://"+storeDir) || a.LostEvents != 2 || len(a.Checksum) != 64 {
		t.Fatalf("artifact %+v, want the local store's record, 2 lost", a)
	}
	// The recorder's two files (1900 bytes) and the report.html the
	// engine leaves in every artifact.
	raw, err := os.ReadFile(strings.TrimPrefix(a.URI, "file://"))
	if err != nil {
		t.Fatal(err)
	}
	md, err := record.DecodeMetadata(raw)
	if err != nil {
		t.Fatal(err)
	}
	if report, ok := md.FileNamed("report.html"); !ok || a.Bytes != 1900+report.Bytes || len(md.Files) != 3 {
		t.Fatalf("artifact %+v with files %+v, want the recorder's 2 files (1900 bytes) and report.html", a, md.Files)
	}
	if s.FiredBy != capturev1alpha1.FiredByManual || s.FiredAt == nil || s.WindowStart == nil || s.WindowEnd == nil {
		t.Fatalf("fired status %+v", s)
	}
	if s.WindowStart.Time.Before(s.ArmedAt.Time) {
		t.Errorf("window starts %v, before the arming %v", s.WindowStart, s.ArmedAt)
	}
	if got := s.WindowEnd.Sub(s.FiredAt.Time); got != 300*time.Millisecond {
		t.Errorf("window ends %v after the fire, want the post-window 300ms", got)
	}
	if _, err := os.Stat(strings.TrimPrefix(a.URI, "file://")); err != nil {
		t.Errorf("the artifact's record: %v", err)
	}
}

func TestTheAgentFailsWhatItCannotArmAndSaysWhy(t *testing.T) {
	e := newEnv(t)
	eng, _ := newEngine(t, "node-c", &fileBackend{})
	e.startWatcher(t, "node-c", eng)
	for _, tc := range []struct {
		name    string
		profile capturev1alpha1.CaptureProfile
		reason  string
		message string
	}{
		{"wpr", capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendWPR}, nodecapture.ReasonNotSupported,
			`backend "wpr" is not enabled on this agent`},
		{"no-such-profile", capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendFtrace, Profile: "nosuch"},
			nodecapture.ReasonInvalid, `no ftrace profile "nosuch"`},
		{"huge-ring", capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendFtrace, RingKB: new(int32(1 << 20))},
			nodecapture.ReasonInvalid, "over this agent's cap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.capture(t, tc.name, "node-c", tc.profile, nil)
			c := e.waitPhase(t, tc.name, capturev1alpha1.PhaseFailed, 20*time.Second)
			cond := meta.FindStatusCondition(c.Status.Conditions, capturev1alpha1.ConditionArmed)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != tc.reason {
				t.Errorf("Armed condition %+v, want False/%s", cond, tc.reason)
			}
			if !strings.Contains(c.Status.Message, tc.message) || !strings.Contains(c.Status.Message, "node-c") {
				t.Errorf("message %q, want it to name the node and say %q", c.Status.Message, tc.message)
			}
		})
	}
	if n := len(eng.List()); n != 0 {
		t.Errorf("the engine holds %d captures after refusing all", n)
	}
}

func TestACaptureDeletedOrExpiredWhileArmedIsDisarmed(t *testing.T) {
	e := newEnv(t)
	b := &fileBackend{}
	eng, _ := newEngine(t, "node-d", b)
	seen := recordStates(eng)
	e.startWatcher(t, "node-d", eng)

	e.capture(t, "deleted", "node-d", ftrace, nil)
	e.capture(t, "expired", "node-d", ftrace, nil)
	e.capture(t, "finalized", "node-d", ftrace, nil)
	for _, name := range []string{"deleted", "expired", "finalized"} {
		e.waitPhase(t, name, capturev1alpha1.PhaseArmed, 20*time.Second)
	}

	if err := e.admin.Delete(context.Background(), e.get(t, "deleted")); err != nil {
		t.Fatal(err)
	}
	e.setPhase(t, "expired", capturev1alpha1.PhaseExpired) // the operator: its epoch rotated away
	// The operator's artifact finalizer holds a deleted Capture until the
	// artifact and index row are gone; its recorder stops at once.
	ctx := context.Background()
	fin := e.get(t, "finalized")
	patch := client.MergeFrom(fin.DeepCopy())
	fin.Finalizers = []string{"capture.spikehunt.io/artifact"}
	if err := e.admin.Patch(ctx, fin, patch); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Delete(ctx, fin); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "finalized disarmed while its object waits", func() error { return seen.saw("finalized", control.Disarmed) })
	if fin = e.get(t, "finalized"); fin.DeletionTimestamp == nil || fin.Status.Phase != capturev1alpha1.PhaseArmed {
		t.Errorf("the terminating Capture: deletionTimestamp %v, phase %s (the agent writes nothing to it)", fin.DeletionTimestamp, fin.Status.Phase)
	}
	patch = client.MergeFrom(fin.DeepCopy())
	fin.Finalizers = nil
	if err := e.admin.Patch(ctx, fin, patch); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"deleted", "expired"} {
		id := name
		eventually(t, 20*time.Second, name+" disarmed", func() error { return seen.saw(id, control.Disarmed) })
	}
	eventually(t, 5*time.Second, "the deleted captures forgotten", func() error {
		for _, id := range []string{"deleted", "finalized"} {
			if _, ok := eng.Get(id); ok {
				return fmt.Errorf("%s still listed", id)
			}
		}
		return nil
	})
	if n := b.live.Load(); n != 0 {
		t.Errorf("%d recorders still live", n)
	}
	if c := e.get(t, "expired"); c.Status.Phase != capturev1alpha1.PhaseExpired {
		t.Errorf("the expired capture went %s", c.Status.Phase)
	}
}

func TestARestartedAgentFailsThePreviousAgentsArmingsAndNeverReArmsThem(t *testing.T) {
	e := newEnv(t)
	// The previous agent armed these and died with their rings.
	e.capture(t, "was-armed", "node-e", ftrace, nil)
	e.setPhase(t, "was-armed", capturev1alpha1.PhaseArmed)
	e.capture(t, "was-fired", "node-e", ftrace, nil)
	c := e.get(t, "was-fired")
	patch := c.DeepCopy()
	c.Status.Phase, c.Status.FiredBy = capturev1alpha1.PhaseFired, capturev1alpha1.FiredByLatency
	c.Status.FiredAt = new(metav1.NowMicro())
	if err := e.admin.Status().Patch(context.Background(), c, client.MergeFrom(patch)); err != nil {
		t.Fatal(err)
	}
	e.capture(t, "new", "node-e", ftrace, nil) // made while the agent was down

	eng, _ := newEngine(t, "node-e", &fileBackend{})
	e.startWatcher(t, "node-e", eng)
	for _, name := range []string{"was-armed", "was-fired"} {
		c := e.waitPhase(t, name, capturev1alpha1.PhaseFailed, 20*time.Second)
		cond := meta.FindStatusCondition(c.Status.Conditions, capturev1alpha1.ConditionArmed)
		if !strings.HasPrefix(c.Status.Message, "agent restarted; the ring was lost") || cond == nil || cond.Reason != nodecapture.ReasonAgentRestarted {
			t.Errorf("%s: message %q, condition %+v", name, c.Status.Message, cond)
		}
		if _, ok := eng.Get(name); ok {
			t.Errorf("%s was armed again", name)
		}
	}
	e.waitPhase(t, "new", capturev1alpha1.PhaseArmed, 20*time.Second)
}

func TestAStoppingAgentDisarmsItsCapturesAndSaysSo(t *testing.T) {
	e := newEnv(t)
	b := &fileBackend{}
	eng, _ := newEngine(t, "node-f", b)
	run := e.startWatcher(t, "node-f", eng)
	e.capture(t, "armed", "node-f", ftrace, nil)
	e.waitPhase(t, "armed", capturev1alpha1.PhaseArmed, 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	c := e.get(t, "armed")
	cond := meta.FindStatusCondition(c.Status.Conditions, capturev1alpha1.ConditionArmed)
	if c.Status.Phase != capturev1alpha1.PhaseFailed || cond == nil || cond.Reason != nodecapture.ReasonAgentStopped {
		t.Errorf("after the agent stopped: %s %q %+v", c.Status.Phase, c.Status.Message, cond)
	}
	if st, _ := eng.Get("armed"); st.State != control.Disarmed || b.live.Load() != 0 {
		t.Errorf("engine state %s, %d recorders live", st.State, b.live.Load())
	}
}

func TestOneArmingIDInTwoNamespacesArmsOnce(t *testing.T) {
	e := newEnv(t)
	other := e.another(t, "other") // a policy of the same name in another namespace
	eng, _ := newEngine(t, "node-g", &fileBackend{})
	e.startWatcher(t, "node-g", eng)
	e.capture(t, "checkout-node-g-bait-0123456789abcdef", "node-g", ftrace, nil)
	e.waitPhase(t, "checkout-node-g-bait-0123456789abcdef", capturev1alpha1.PhaseArmed, 20*time.Second)
	other.capture(t, "checkout-node-g-bait-0123456789abcdef", "node-g", ftrace, nil)
	c := other.waitPhase(t, "checkout-node-g-bait-0123456789abcdef", capturev1alpha1.PhaseFailed, 20*time.Second)
	if !strings.Contains(c.Status.Message, "is taken by Capture "+e.ns+"/checkout-node-g-bait-0123456789abcdef") {
		t.Errorf("message %q", c.Status.Message)
	}
	if n := len(eng.List()); n != 1 {
		t.Errorf("%d captures armed, want 1", n)
	}
}
