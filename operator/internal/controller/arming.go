package controller

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// This file maps the CRDs to the policy package's plain values and back.

// active reports whether a Capture holds its node and a place in the
// fleet's concurrency budget: until it is uploaded, fails or expires. A
// Capture without a phase has not been seen by its agent: Pending.
func active(p v1alpha1.CapturePhase) bool {
	switch p {
	case "", v1alpha1.PhasePending, v1alpha1.PhaseArmed, v1alpha1.PhaseFired:
		return true
	}
	return false
}

// done reports whether a Capture will record nothing more: retention's
// clock runs from then. Uploaded counts, so that a capture the operator
// cannot index (no store) still ages out.
func done(p v1alpha1.CapturePhase) bool {
	return p == v1alpha1.PhaseUploaded || p.Final()
}

// policyUIDOf is the UID of the CapturePolicy that controls c, "" when
// none does (a Capture made by hand).
func policyUIDOf(c *v1alpha1.Capture) string {
	if ref := metav1.GetControllerOf(c); ref != nil && ref.Kind == "CapturePolicy" &&
		ref.APIVersion == v1alpha1.GroupVersion.String() {
		return string(ref.UID)
	}
	return ""
}

// startedAt is when the arming began: the operator's annotation, else the
// creation timestamp.
func startedAt(c *v1alpha1.Capture) time.Time {
	if s, ok := c.Annotations[AnnotationStartedAt]; ok {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t
		}
	}
	return c.CreationTimestamp.Time
}

// armingOf maps a Capture to the arming the budgets count.
func armingOf(c *v1alpha1.Capture) policy.Arming {
	phase := c.Status.Phase
	a := policy.Arming{
		Request: policy.Request{
			Name:       c.Name,
			PolicyID:   policyUIDOf(c),
			Node:       c.Spec.NodeName,
			Epoch:      c.Spec.Epoch,
			Reason:     policy.Reason(c.Spec.Reason),
			AlertKey:   c.Spec.AlertID,
			PatternKey: c.Spec.PatternID,
		},
		StartedAt: startedAt(c),
		Active:    active(phase),
		Fired: c.Status.FiredAt != nil || phase == v1alpha1.PhaseFired ||
			phase == v1alpha1.PhaseUploaded || phase == v1alpha1.PhaseIndexed,
	}
	if !a.Active {
		if t, ok := c.Annotations[AnnotationEndedAt]; ok {
			a.FinishedAt, _ = time.Parse(time.RFC3339Nano, t)
		}
	}
	return a
}

// samplingOf maps the policy's sampling. An unset rotation period (the
// API server defaults it to 1h) does not rotate.
func samplingOf(s v1alpha1.Sampling) policy.Sampling {
	out := policy.Sampling{HWClassLabel: s.HWClassLabel}
	if s.Percent != nil {
		out.Percent = int(*s.Percent)
	}
	if s.Count != nil {
		out.Count = int(*s.Count)
	}
	if s.RotationPeriod != nil {
		out.RotationPeriod = s.RotationPeriod.Duration
	}
	return out
}

// budgetsOf maps the policy's budgets; the API server defaults each, so a
// zero (no limit) comes only from an object written around it.
func budgetsOf(b v1alpha1.Budgets) policy.Budgets {
	out := policy.Budgets{
		MaxConcurrentPerFleet: int(b.MaxConcurrentPerFleet),
		MaxPerPatternPerHour:  int(b.MaxPerPatternPerHour),
	}
	if b.PerNodeCooldown != nil {
		out.PerNodeCooldown = b.PerNodeCooldown.Duration
	}
	return out
}

// alertTriggerOf is which fleet alerts widen the policy's sample: none
// without triggers.fleetAlerts; the policy's own service when it names
// no services; one node per alert when widenBy is unset (the API default).
func alertTriggerOf(p *v1alpha1.CapturePolicy) policy.AlertTrigger {
	if p.Spec.Triggers == nil || p.Spec.Triggers.FleetAlerts == nil {
		return policy.AlertTrigger{}
	}
	fa := p.Spec.Triggers.FleetAlerts
	t := policy.AlertTrigger{ExtraNodes: 1, Services: fa.Services}
	if len(t.Services) == 0 {
		t.Services = []string{p.Spec.Service}
	}
	for _, c := range fa.PatternClasses {
		t.PatternClasses = append(t.PatternClasses, string(c))
	}
	if fa.WidenBy != nil {
		t.ExtraNodes = int(*fa.WidenBy)
	}
	return t
}

// localTriggerOf is the trigger a policy's Captures get: the policy's
// local trigger with its service filled in (a Capture's names one).
func localTriggerOf(p *v1alpha1.CapturePolicy) *v1alpha1.LocalTrigger {
	if p.Spec.Triggers == nil || p.Spec.Triggers.Local == nil {
		return nil
	}
	t := p.Spec.Triggers.Local.DeepCopy()
	if t.Service == "" {
		t.Service = p.Spec.Service
	}
	return t
}
