package nodecapture

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spikehunt/spikehunt/agents/capture"
	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func newCapture(ns, name string, p capturev1alpha1.CaptureProfile, tr *capturev1alpha1.LocalTrigger) *capturev1alpha1.Capture {
	return &capturev1alpha1.Capture{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Generation: 1},
		Spec: capturev1alpha1.CaptureSpec{NodeName: "node-a", PolicyRef: capturev1alpha1.PolicyReference{Name: "checkout"},
			ArmingID: name, Reason: capturev1alpha1.ReasonBait, Profile: p, Trigger: tr},
	}
}

func TestSpecForMapsEveryFieldOfTheCapture(t *testing.T) {
	for _, tc := range []struct {
		name    string
		capture *capturev1alpha1.Capture
		want    capture.Spec
	}{
		{"a perf profile with a latency and p99 trigger", newCapture("payments", "checkout-node-a-bait-0123456789abcdef",
			capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendPerf, Profile: "offcpu", RingKB: new(int32(4096)),
				Pre: dur(10 * time.Second), Post: dur(2 * time.Second),
				Overhead: &capturev1alpha1.OverheadLimits{Nice: new(int32(15)), IOClass: capturev1alpha1.IOClassIdle}},
			&capturev1alpha1.LocalTrigger{Service: "checkout", Endpoint: "/pay", Latency: dur(time.Second),
				P99: dur(250 * time.Millisecond), Cooldown: dur(5 * time.Minute)}),
			capture.Spec{ID: "checkout-node-a-bait-0123456789abcdef", Backend: capture.Perf, Profile: "offcpu", RingKB: 4096,
				Pre: 10 * time.Second, Post: 2 * time.Second, Govern: capture.GovernConfig{Nice: 15, IOClass: "idle"},
				Trigger: capture.Trigger{Service: "checkout", Endpoint: "/pay", Latency: time.Second,
					P99: 250 * time.Millisecond, Cooldown: 5 * time.Minute}}},
		{"a bpftrace script without a trigger fires only remotely or by hand", newCapture("ops", "irq",
			capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendBpftrace, Script: "irq_duration"}, nil),
			capture.Spec{ID: "irq", Backend: capture.Bpftrace, Script: "irq_duration"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SpecFor(tc.capture)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestSpecForRefusesWhatTheEngineWouldNot(t *testing.T) {
	// The API server refuses these too; the agent does not rely on it.
	c := newCapture("payments", "x", capturev1alpha1.CaptureProfile{Backend: "dtrace"}, nil)
	if _, err := SpecFor(c); !errors.Is(err, capture.ErrInvalid) || !strings.Contains(err.Error(), "payments/x") {
		t.Errorf("unknown backend: %v, want ErrInvalid naming the Capture", err)
	}
	c = newCapture("payments", "x", capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendPerf,
		Overhead: &capturev1alpha1.OverheadLimits{Nice: new(int32(40))}}, nil)
	if _, err := SpecFor(c); !errors.Is(err, capture.ErrInvalid) {
		t.Errorf("nice 40: %v, want ErrInvalid", err)
	}
}
