package nodecapture

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

func TestReportStatusFollowsTheEngine(t *testing.T) {
	armed := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	fired := armed.Add(5*time.Second + 123456*time.Microsecond)
	now := fired.Add(3 * time.Second)
	profile := capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendPerf, Pre: dur(10 * time.Second), Post: dur(2 * time.Second)}
	cause := &record.FireCause{Kind: "latency", Service: "checkout", Endpoint: "/pay", Latency: 1200 * time.Millisecond, RequestAt: fired}
	md := &record.Metadata{FiredAt: fired, WindowStart: armed, WindowEnd: fired.Add(2 * time.Second),
		Bytes: 4096, Lost: 3, Overruns: 1, Checksum: strings.Repeat("ab", 32), Files: make([]record.File, 2)}
	micro := func(t time.Time) *metav1.MicroTime { return new(metav1.NewMicroTime(t)) }

	for _, tc := range []struct {
		name      string
		phase     capturev1alpha1.CapturePhase
		st        control.Status
		wantPhase capturev1alpha1.CapturePhase
		wantCond  metav1.ConditionStatus
		reason    string
		check     func(*testing.T, capturev1alpha1.CaptureStatus)
	}{
		{"armed: the ring is live", capturev1alpha1.PhasePending, control.Status{State: control.Armed, ArmedAt: armed},
			capturev1alpha1.PhaseArmed, metav1.ConditionTrue, ReasonArmed, func(t *testing.T, s capturev1alpha1.CaptureStatus) {
				if !s.ArmedAt.Time.Equal(armed) || s.FiredAt != nil {
					t.Errorf("armedAt %v firedAt %v", s.ArmedAt, s.FiredAt)
				}
			}},
		{"fired: the window is clipped to the arming", capturev1alpha1.PhaseArmed,
			control.Status{State: control.Fired, ArmedAt: armed, FiredAt: fired, Cause: cause},
			capturev1alpha1.PhaseFired, metav1.ConditionFalse, ReasonFired, func(t *testing.T, s capturev1alpha1.CaptureStatus) {
				if diff := cmp.Diff([]*metav1.MicroTime{micro(fired), micro(armed), micro(fired.Add(2 * time.Second))},
					[]*metav1.MicroTime{s.FiredAt, s.WindowStart, s.WindowEnd}); diff != "" {
					t.Errorf("firedAt, windowStart, windowEnd (-want +got)\n%s", diff)
				}
				if s.FiredBy != capturev1alpha1.FiredByLatency || !strings.Contains(s.Message, "1.2s request of checkout /pay") {
					t.Errorf("firedBy %q message %q", s.FiredBy, s.Message)
				}
			}},
		{"collected: uploaded with its artifact", capturev1alpha1.PhaseFired,
			control.Status{State: control.Collected, ArmedAt: armed, FiredAt: fired, Cause: cause, Location: "file:///store/captures/x.json", Metadata: md},
			capturev1alpha1.PhaseUploaded, metav1.ConditionFalse, ReasonUploaded, func(t *testing.T, s capturev1alpha1.CaptureStatus) {
				want := &capturev1alpha1.Artifact{URI: "file:///store/captures/x.json", Bytes: 4096, LostEvents: 3, OverrunEvents: 1, Checksum: md.Checksum}
				if diff := cmp.Diff(want, s.Artifact); diff != "" {
					t.Errorf("artifact (-want +got)\n%s", diff)
				}
				if !strings.Contains(s.Message, "3 events lost, 1 overwritten") {
					t.Errorf("message %q does not say the trace has holes", s.Message)
				}
			}},
		{"collected before the Fired report went out: straight to Uploaded", capturev1alpha1.PhaseArmed,
			control.Status{State: control.Collected, ArmedAt: armed, FiredAt: fired, Cause: cause, Location: "file:///x", Metadata: md},
			capturev1alpha1.PhaseUploaded, metav1.ConditionFalse, ReasonUploaded, nil},
		{"a recorder that failed", capturev1alpha1.PhaseFired, control.Status{State: control.Failed, Error: "collect: perf exited 1"},
			capturev1alpha1.PhaseFailed, metav1.ConditionFalse, ReasonCaptureFailed, func(t *testing.T, s capturev1alpha1.CaptureStatus) {
				if !strings.Contains(s.Message, "perf exited 1") || !strings.Contains(s.Message, "node-a") {
					t.Errorf("message %q", s.Message)
				}
			}},
		{"aborted under memory pressure", capturev1alpha1.PhaseArmed, control.Status{State: control.Aborted, Error: "aborted: memory pressure"},
			capturev1alpha1.PhaseFailed, metav1.ConditionFalse, ReasonAborted, nil},
		{"disarmed by hand on the node", capturev1alpha1.PhaseArmed, control.Status{State: control.Disarmed},
			capturev1alpha1.PhaseFailed, metav1.ConditionFalse, ReasonDisarmed, nil},
		{"an expired capture stays expired", capturev1alpha1.PhaseExpired, control.Status{State: control.Disarmed},
			capturev1alpha1.PhaseExpired, "", "", nil},
		{"an indexed capture stays indexed", capturev1alpha1.PhaseIndexed, control.Status{State: control.Collected, Metadata: md},
			capturev1alpha1.PhaseIndexed, "", "", nil},
		{"a late Armed report never moves a fired capture back", capturev1alpha1.PhaseFired, control.Status{State: control.Armed, ArmedAt: armed},
			capturev1alpha1.PhaseFired, "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCapture("payments", "c1", profile, nil)
			c.Generation = 3
			c.Status.Phase = tc.phase
			c.Status.SpikeIDs = []string{"spike-1"} // the operator's: kept
			got := reportStatus(c, tc.st, "node-a", now)
			if got.Phase != tc.wantPhase {
				t.Fatalf("phase %s, want %s", got.Phase, tc.wantPhase)
			}
			if len(got.SpikeIDs) != 1 {
				t.Errorf("the operator's spikeIDs were dropped: %v", got.SpikeIDs)
			}
			cond := meta.FindStatusCondition(got.Conditions, capturev1alpha1.ConditionArmed)
			if tc.reason == "" {
				if !equalStatus(got, c.Status) {
					t.Errorf("status of a %s capture changed: %+v", tc.phase, got)
				}
				return
			}
			if cond == nil || cond.Status != tc.wantCond || cond.Reason != tc.reason || cond.ObservedGeneration != 3 {
				t.Errorf("Armed condition %+v, want %s/%s at generation 3", cond, tc.wantCond, tc.reason)
			}
			if got.ObservedGeneration != 3 {
				t.Errorf("observedGeneration %d", got.ObservedGeneration)
			}
			if tc.check != nil {
				tc.check(t, got)
			}
		})
	}
}

func TestArmFailuresSayWhy(t *testing.T) {
	for _, tc := range []struct {
		err    error
		reason string
	}{
		{fmt.Errorf("%w: backend %q is not enabled on this agent", capture.ErrNotSupported, "wpr"), ReasonNotSupported},
		{fmt.Errorf("%w: no bpftrace script %q", capture.ErrInvalid, "nope"), ReasonInvalid},
		{fmt.Errorf("%w: 2 captures running", capture.ErrBusy), ReasonBusy},
		{errors.New("arm x: perf exited"), ReasonArmFailed},
	} {
		reason, msg := armFailure("node-a", tc.err)
		if reason != tc.reason || !strings.Contains(msg, tc.err.Error()) || !strings.Contains(msg, "node-a") {
			t.Errorf("%v: %s %q", tc.err, reason, msg)
		}
	}
	c := newCapture("payments", "c1", capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendPerf}, nil)
	s := failStatus(c, ReasonInvalid, strings.Repeat("é", 3000), time.Now())
	if len(s.Message) > maxMessage || !strings.HasSuffix(s.Message, "…") || !json.Valid([]byte(fmt.Sprintf("%q", s.Message))) {
		t.Errorf("a long message is %d bytes, want at most %d and cut cleanly", len(s.Message), maxMessage)
	}
}

func TestStatusPatchClearsWhatTheReportDrops(t *testing.T) {
	cur := capturev1alpha1.CaptureStatus{Phase: capturev1alpha1.PhasePending, Message: "waiting for the node"}
	next := capturev1alpha1.CaptureStatus{Phase: capturev1alpha1.PhaseArmed}
	b, err := statusPatch("42", cur, next)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"resourceVersion":"42"},"status":{"message":null,"phase":"Armed"}}`
	if string(b) != want {
		t.Errorf("patch %s\nwant  %s", b, want)
	}
}

func TestTheArtifactsFindingsReachTheStatusWithinTheAPIsBounds(t *testing.T) {
	long := strings.Repeat("é", 600) // 1,200 bytes
	got := findingsStatus(&record.Findings{Verdict: long, BlockingStack: "do_nanosleep ← hrtimer_nanosleep",
		HottestCPU: 5, HottestCPUBusy: 0.987, SoftirqShare: 0.2504})
	if len(got.Verdict) > 1024 || !utf8.ValidString(got.Verdict) || !strings.HasSuffix(got.Verdict, "…") {
		t.Errorf("verdict of %d bytes (valid UTF-8: %v), want at most 1024 ending in …", len(got.Verdict), utf8.ValidString(got.Verdict))
	}
	if got.BlockingStack != "do_nanosleep ← hrtimer_nanosleep" || got.HottestCPU != 5 || got.HottestCPUBusyPercent != 99 || got.SoftirqPermille != 250 {
		t.Errorf("%+v", got)
	}
	if findingsStatus(nil) != nil {
		t.Error("no findings became some")
	}
	if got := findingsStatus(&record.Findings{HottestCPU: -1, SoftirqShare: 7}); got.HottestCPU != -1 || got.SoftirqPermille != 1000 {
		t.Errorf("out-of-range shares are not clamped: %+v", got)
	}
}
