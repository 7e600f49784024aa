package controller

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// TestRestartMidCaptureLeavesOneCapturePerArming stops the operator in the
// middle of applying a decision (its policy function lets one creation
// through per reconcile), while an alert is widening the sample and the
// agents have armed and fired what exists, and starts a new one, which is
// handed the alert again (Kafka redelivers what was not committed). The
// result is exactly the sample's bait and the alert's widenBy nodes, one
// Capture per arming, every one owned by the policy, none lost or being
// deleted, and the armed and fired ones untouched.
func TestRestartMidCaptureLeavesOneCapturePerArming(t *testing.T) {
	e := newEnv(t)
	nodes := fleet("s", 40, "gen4", "gen5")
	e.createNodes(t, nodes)
	pol := e.basePolicy("billy", "s")
	pol.Spec.Sampling.Percent = ptr[int32](25)
	pol.Spec.Triggers.FleetAlerts.WidenBy = ptr[int32](3)
	alert := policy.Alert{ID: "kafka/a1", Service: "billy", PatternClass: "fleet-recurrent", PatternKey: "billy/p1"}

	// The first operator makes one creation per decision and, after
	// crashAfter of them, no more: it is stopped "mid-capture" whatever the
	// machine's speed (polling for a count raced the operator under load,
	// which had made all 13 by the time a poll saw 4).
	const crashAfter = 4
	var created atomic.Int32
	first := e.startOperator(t, operatorOptions{decide: func(in policy.Input) (policy.Decision, error) {
		d, err := policy.Decide(in)
		if len(d.Create) > 1 {
			d.Create = d.Create[:1]
		}
		if len(d.Create) > 0 && created.Add(1) > crashAfter {
			d.Create = nil
		}
		return d, err
	}})
	e.create(t, pol)
	first.offer(t, alert)
	eventually(t, 20*time.Second, "a few captures", func() error {
		if n := len(e.captures(t)); n < crashAfter {
			return fmt.Errorf("%d captures", n)
		}
		return nil
	})
	first.stop(t)
	before := e.captures(t)
	if len(before) >= 13 {
		t.Fatalf("the first operator made all %d captures before it stopped", len(before))
	}
	now := e.clock.Now()
	for _, c := range before {
		e.agent(t, c.Name, arm(now))
	}
	e.agent(t, before[0].Name, fire(now))

	second := e.startOperator(t, operatorOptions{})
	second.offer(t, alert)
	sel := policy.Sample(string(pol.UID), policyNodes(nodes), samplingOf(pol.Spec.Sampling), now)
	check := func() error {
		cs := e.captures(t)
		var bait []string
		alerted := 0
		seen := map[string]bool{}
		for _, c := range cs {
			key := fmt.Sprintf("%s/%d/%s/%s", c.Spec.NodeName, c.Spec.Epoch, c.Spec.Reason, c.Spec.AlertID)
			if seen[key] {
				return fmt.Errorf("two captures for the arming %s", key)
			}
			seen[key] = true
			if want := policy.ArmingName(pol.Name, c.Spec.NodeName, c.Spec.Epoch, policy.Reason(c.Spec.Reason), c.Spec.AlertID); c.Name != want {
				return fmt.Errorf("capture %s, want the name %s", c.Name, want)
			}
			if ref := metav1.GetControllerOf(&c); ref == nil || ref.UID != pol.UID {
				return fmt.Errorf("capture %s is controlled by %+v", c.Name, ref)
			}
			if !c.DeletionTimestamp.IsZero() || !slices.Contains(c.Finalizers, FinalizerArtifact) {
				return fmt.Errorf("capture %s: deleting %t, finalizers %v", c.Name, !c.DeletionTimestamp.IsZero(), c.Finalizers)
			}
			switch c.Spec.Reason {
			case v1alpha1.ReasonBait:
				bait = append(bait, c.Spec.NodeName)
			case v1alpha1.ReasonAlert:
				if c.Spec.AlertID != alert.ID {
					return fmt.Errorf("capture %s for alert %s", c.Name, c.Spec.AlertID)
				}
				alerted++
			}
		}
		slices.Sort(bait)
		if !slices.Equal(bait, sel.Nodes) {
			return fmt.Errorf("bait on %v, want %v", bait, sel.Nodes)
		}
		if alerted != 3 {
			return fmt.Errorf("%d captures for the alert, want 3", alerted)
		}
		return nil
	}
	eventually(t, 20*time.Second, "the whole decision applied once", check)
	consistently(t, 2*time.Second, "nothing more", check)
	for i, c := range before {
		want := v1alpha1.PhaseArmed
		if i == 0 {
			want = v1alpha1.PhaseFired
		}
		if got := e.capture(t, c.Name); got.UID != c.UID || got.Status.Phase != want {
			t.Errorf("capture %s: uid %s phase %s, want the same object (%s) %s", c.Name, got.UID, got.Status.Phase, c.UID, want)
		}
	}
}
