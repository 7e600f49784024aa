package nodecapture_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/capture/bpftrace"
	"github.com/spikehunt/spikehunt/agents/capture/perf"
	"github.com/spikehunt/spikehunt/agents/nodecapture"
	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The node's side end to end on a real API server, as the agent's
// ServiceAccount, with the real engine and the perf flight recorder: the
// operator's Capture is armed, fired by the agent's own latency stream,
// uploaded to the local store and reported; a script outside the
// allow-list is refused; a deleted Capture's recorder is stopped.
func TestThePerfRecorderOfACaptureFiresOnTheSlowRequestAndIsUploaded(t *testing.T) {
	profiles, err := capture.NewProfiles()
	if err != nil {
		t.Fatal(err)
	}
	perf := perf.New(perf.Config{Profiles: profiles})
	if err := perf.Check(); err != nil {
		testenv.RequirePrivileged(t, "perf", err)
	}
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "perf (root)", fmt.Errorf("running as uid %d", os.Geteuid()))
	}
	scripts := t.TempDir()
	if err := os.Chmod(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	bpftrace := bpftrace.New(bpftrace.Config{ScriptDir: scripts})

	e := newEnv(t)
	eng, storeDir := newEngine(t, "node-p", perf, bpftrace)
	seen := recordStates(eng)
	e.startWatcher(t, "node-p", eng)

	pre, post := 2*time.Second, 2*time.Second
	profile := capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendPerf,
		Pre: &metav1.Duration{Duration: pre}, Post: &metav1.Duration{Duration: post}}
	trigger := &capturev1alpha1.LocalTrigger{Service: "web", Latency: &metav1.Duration{Duration: 500 * time.Millisecond}}
	e.capture(t, "slow", "node-p", profile, trigger)
	e.capture(t, "elsewhere", "node-q", profile, trigger)
	armed := e.waitPhase(t, "slow", capturev1alpha1.PhaseArmed, 30*time.Second)
	id := "slow"
	if st, ok := eng.Get(id); !ok || st.State != control.Armed || st.Backend != capture.Perf {
		t.Fatalf("engine: %+v %v", st, ok)
	}

	// The app's requests reach the engine through the intake's tap; one
	// of them took a second.
	time.Sleep(time.Second) // something in the ring before the fire
	now := time.Now()
	eng.Observe(&telemetry.Request{Service: "web", Endpoint: "/fast", Start: now.Add(-3 * time.Millisecond), Duration: 3 * time.Millisecond, Weight: 1})
	eng.Observe(&telemetry.Request{Service: "web", Endpoint: "/slow", Start: now.Add(-time.Second), Duration: time.Second, Weight: 1})

	fired := e.waitPhase(t, "slow", capturev1alpha1.PhaseFired, 10*time.Second)
	if fired.Status.FiredBy != capturev1alpha1.FiredByLatency || fired.Status.FiredAt == nil || !strings.Contains(fired.Status.Message, "/slow") {
		t.Errorf("fired status: by %q at %v, %q", fired.Status.FiredBy, fired.Status.FiredAt, fired.Status.Message)
	}
	c := e.waitPhase(t, "slow", capturev1alpha1.PhaseUploaded, 60*time.Second)
	s := c.Status
	a := s.Artifact
	if a == nil {
		t.Fatalf("uploaded without an artifact: %+v", s)
	}
	if !strings.HasPrefix(a.URI, "file://"+storeDir+"/") || a.Bytes <= 0 || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(a.Checksum) {
		t.Errorf("artifact %+v: want a file:// record in %s, bytes > 0, a sha256", a, storeDir)
	}
	if _, err := os.Stat(strings.TrimPrefix(a.URI, "file://")); err != nil {
		t.Errorf("the artifact's record is not in the store: %v", err)
	}
	md, err := readRecord(storeDir, id)
	if err != nil {
		t.Fatal(err)
	}
	if md.Checksum != a.Checksum || md.Bytes != a.Bytes || int64(md.Lost) != a.LostEvents || md.Backend != capture.Perf {
		t.Errorf("status artifact %+v disagrees with the sealed record %+v", a, md)
	}
	if !s.FiredAt.Time.Equal(now.Truncate(time.Microsecond)) || s.FiredBy != capturev1alpha1.FiredByLatency {
		t.Errorf("fired at %v by %s; want the slow request's end %v, latency", s.FiredAt, s.FiredBy, now)
	}
	if got := s.WindowEnd.Sub(s.FiredAt.Time); got != post {
		t.Errorf("the window ends %v after the fire, want post %v", got, post)
	}
	// [fire − pre, fire + post], clipped to the arming: a ring holds
	// nothing older.
	want := now.Add(-pre)
	if want.Before(md.ArmedAt) {
		want = md.ArmedAt
	}
	if !md.WindowStart.Equal(want) || !s.WindowStart.Time.Equal(want.Truncate(time.Microsecond)) {
		t.Errorf("window starts %v (record %v); armed %v, fire − pre %v", s.WindowStart, md.WindowStart, md.ArmedAt, now.Add(-pre))
	}
	if s.ArmedAt.Time.After(md.ArmedAt) || armed.Status.ArmedAt.Time != s.ArmedAt.Time {
		t.Errorf("armedAt %v, the record's %v", s.ArmedAt, md.ArmedAt)
	}
	if c.Status.Phase != capturev1alpha1.PhaseUploaded || meta.IsStatusConditionTrue(s.Conditions, capturev1alpha1.ConditionArmed) {
		t.Errorf("conditions after the upload: %+v", s.Conditions)
	}
	if err := seen.saw(id, control.Collected); err != nil {
		t.Error(err)
	}
	if c := e.get(t, "elsewhere"); c.Status.Phase != "" {
		t.Errorf("node-q's Capture went %s on node-p's agent", c.Status.Phase)
	}
	if _, ok := eng.Get("elsewhere"); ok {
		t.Error("node-p's engine armed node-q's Capture")
	}

	t.Run("a script outside the allow-list is refused", func(t *testing.T) {
		e.capture(t, "bad-script", "node-p", capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendBpftrace, Script: "not-allowed"}, nil)
		c := e.waitPhase(t, "bad-script", capturev1alpha1.PhaseFailed, 20*time.Second)
		reason, want := nodecapture.ReasonInvalid, `no bpftrace script "not-allowed"`
		if err := bpftrace.Check(); err != nil {
			reason, want = nodecapture.ReasonNotSupported, "bpftrace" // this machine has none: refused earlier
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, capturev1alpha1.ConditionArmed)
		if !strings.Contains(c.Status.Message, want) || cond == nil || cond.Reason != reason {
			t.Errorf("message %q, condition %+v; want %s saying %q", c.Status.Message, cond, reason, want)
		}
	})

	t.Run("a Capture deleted while armed stops its perf", func(t *testing.T) {
		e.capture(t, "deleted", "node-p", profile, nil)
		c := e.waitPhase(t, "deleted", capturev1alpha1.PhaseArmed, 30*time.Second)
		if err := e.admin.Delete(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		id := "deleted"
		eventually(t, 30*time.Second, "disarmed", func() error { return seen.saw(id, control.Disarmed) })
		if got := seen.of(id); got[len(got)-1] != control.Disarmed {
			t.Errorf("engine states %v", got)
		}
	})
}

// readRecord reads a capture's metadata record from the local store.
func readRecord(storeDir, id string) (*record.Metadata, error) {
	s, err := artifact.OpenLocalStore(storeDir)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Get(context.Background(), id)
}
