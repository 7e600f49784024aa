package controller

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// TestPolicyArmsExactlyTheSampledNodes: a policy over 60 labelled Nodes in
// three hardware classes creates one bait Capture on each node that
// policy.Sample chooses for the policy's UID and epoch, and no other;
// Nodes outside the selector get none. Each Capture is named by
// ArmingName, controlled by the policy, carries the artifact finalizer and
// the policy's profile and trigger; the policy's status says what it did.
func TestPolicyArmsExactlyTheSampledNodes(t *testing.T) {
	e := newEnv(t)
	nodes := fleet("a", 60, "gen4", "gen4", "gen4", "gen5", "gen5", "arm")
	e.createNodes(t, nodes)
	e.createNodes(t, fleet("other", 5, "gen4")) // outside the selector
	e.startOperator(t, operatorOptions{})

	pol := e.basePolicy("billy", "a")
	e.create(t, pol)
	sampling := samplingOf(pol.Spec.Sampling)
	sel := policy.Sample(string(pol.UID), policyNodes(nodes), sampling, e.clock.Now())
	if len(sel.Nodes) != 6 {
		t.Fatalf("the sample of 10%% of 60 nodes has %d nodes, want 6", len(sel.Nodes))
	}
	for _, c := range sel.Classes {
		if c.Chosen < 1 {
			t.Errorf("class %s has no bait: %+v", c.Class, sel.Classes)
		}
	}

	eventually(t, 20*time.Second, "the sampled captures", func() error {
		if got := nodesOf(e.captures(t)); !slices.Equal(got, sel.Nodes) {
			return fmt.Errorf("captures on %v, want %v", got, sel.Nodes)
		}
		return nil
	})
	consistently(t, 2*time.Second, "no capture beyond the sample", func() error {
		if got := nodesOf(e.captures(t)); !slices.Equal(got, sel.Nodes) {
			return fmt.Errorf("captures on %v, want %v", got, sel.Nodes)
		}
		return nil
	})

	for _, c := range e.captures(t) {
		wantName := policy.ArmingName(pol.Name, c.Spec.NodeName, sel.Epoch, policy.ReasonBait, "")
		if c.Name != wantName {
			t.Errorf("capture on %s is named %s, want %s", c.Spec.NodeName, c.Name, wantName)
		}
		ref := metav1.GetControllerOf(&c)
		if ref == nil || ref.UID != pol.UID || ref.Kind != "CapturePolicy" {
			t.Errorf("capture %s is controlled by %+v, want the policy %s", c.Name, ref, pol.UID)
		}
		if !slices.Contains(c.Finalizers, FinalizerArtifact) {
			t.Errorf("capture %s has finalizers %v, want %s", c.Name, c.Finalizers, FinalizerArtifact)
		}
		want := v1alpha1.CaptureSpec{
			NodeName:  c.Spec.NodeName,
			PolicyRef: v1alpha1.PolicyReference{Name: pol.Name},
			ArmingID:  policy.ArmingName(string(pol.UID), c.Spec.NodeName, sel.Epoch, policy.ReasonBait, ""),
			Epoch:     sel.Epoch,
			Reason:    v1alpha1.ReasonBait,
			Profile:   pol.Spec.Profile,
			Trigger:   &v1alpha1.LocalTrigger{Service: "billy", Latency: dur(time.Second)},
		}
		if diff := cmp.Diff(want, c.Spec); diff != "" {
			t.Errorf("capture %s spec (-want +got):\n%s", c.Name, diff)
		}
		if got := startedAt(&c); !got.Equal(e.clock.Now()) {
			t.Errorf("capture %s started at %s, want the controller's clock %s", c.Name, got, e.clock.Now())
		}
	}

	eventually(t, 10*time.Second, "the policy's status", func() error {
		p := e.policy(t, pol.Name)
		st := p.Status
		if st.ObservedGeneration != p.Generation || st.SampledNodes != 6 || st.Epoch != sel.Epoch ||
			st.LastRotation == nil || !st.LastRotation.Time.Equal(sel.EpochStart) {
			return fmt.Errorf("status %+v, want generation %d, 6 sampled nodes, epoch %d from %s", st, p.Generation, sel.Epoch, sel.EpochStart)
		}
		if !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionReady) ||
			!meta.IsStatusConditionFalse(st.Conditions, v1alpha1.ConditionBudgetLimited) {
			return fmt.Errorf("conditions %+v, want Ready and not BudgetLimited", st.Conditions)
		}
		return nil
	})
}

// TestPolicyWithinItsBudgetSaysWhichBudgetLimits: a sample larger than the
// fleet's concurrency budget arms up to the budget, spread over the
// classes, and the status says which budget held it back.
func TestPolicyWithinItsBudgetSaysWhichBudgetLimits(t *testing.T) {
	e := newEnv(t)
	nodes := fleet("b", 30, "gen4", "gen5", "arm")
	e.createNodes(t, nodes)
	e.startOperator(t, operatorOptions{})
	pol := e.basePolicy("billy", "b")
	pol.Spec.Sampling.Percent = ptr[int32](50)
	pol.Spec.Budgets.MaxConcurrentPerFleet = 4
	e.create(t, pol)

	eventually(t, 20*time.Second, "four captures and BudgetLimited", func() error {
		cs := e.captures(t)
		if len(cs) != 4 {
			return fmt.Errorf("%d captures, want 4", len(cs))
		}
		p := e.policy(t, pol.Name)
		c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionBudgetLimited)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != "FleetConcurrency" {
			return fmt.Errorf("BudgetLimited = %+v, want True, FleetConcurrency", c)
		}
		if r := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady); r == nil || r.Reason != ReasonBaitRefused {
			return fmt.Errorf("Ready = %+v, want False, %s", r, ReasonBaitRefused)
		}
		return nil
	})
	classes := map[string]int{}
	for _, c := range e.captures(t) {
		classes[nodes[slices.IndexFunc(nodes, func(n node) bool { return n.name == c.Spec.NodeName })].class]++
	}
	if len(classes) != 3 {
		t.Errorf("bait by class %v: want every class armed first", classes)
	}
	consistently(t, time.Second, "no capture beyond the budget", func() error {
		if n := len(e.captures(t)); n != 4 {
			return fmt.Errorf("%d captures, want 4", n)
		}
		return nil
	})
}
