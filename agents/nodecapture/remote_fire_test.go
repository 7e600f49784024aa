package nodecapture_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// The operator (or a person with kubectl) fires an armed capture by
// setting spec.fire; the agent fires it once, with the reason in the
// metadata, and spec.fire cannot be changed afterwards.
func TestARemoteFireInTheSpecFiresTheArmedCaptureOnce(t *testing.T) {
	e := newEnv(t)
	eng, _ := newEngine(t, "node-a", &fileBackend{})
	e.startWatcher(t, "node-a", eng)
	e.capture(t, "remote", "node-a", ftrace, nil)
	c := e.waitPhase(t, "remote", capturev1alpha1.PhaseArmed, 20*time.Second)

	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Fire = &capturev1alpha1.FireRequest{Reason: "alert 42: fleet-recurrent on checkout"}
	if err := e.admin.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
	c = e.waitPhase(t, "remote", capturev1alpha1.PhaseUploaded, 20*time.Second)
	if c.Status.FiredBy != capturev1alpha1.FiredByRemote {
		t.Errorf("fired by %q, want remote", c.Status.FiredBy)
	}
	st, ok := eng.Get("remote")
	if !ok || st.Metadata == nil || st.Metadata.Trigger.Reason != "alert 42: fleet-recurrent on checkout" {
		t.Fatalf("engine status %+v", st)
	}

	patch = client.MergeFrom(c.DeepCopy())
	c.Spec.Fire = &capturev1alpha1.FireRequest{Reason: "again"}
	err := e.admin.Patch(context.Background(), c, patch)
	if err == nil || !strings.Contains(err.Error(), "fire is set once") {
		t.Errorf("changing spec.fire: %v, want the API server to refuse it", err)
	}
}
