package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/fakeclock"
)

// policyLister is the cache's side of the inbox: it lists fixed policies.
type policyLister struct {
	client.Reader
	items []v1alpha1.CapturePolicy
}

func (l policyLister) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*v1alpha1.CapturePolicyList).Items = l.items
	return nil
}

func inboxPolicy(name, service string, classes ...v1alpha1.PatternClass) v1alpha1.CapturePolicy {
	p := v1alpha1.CapturePolicy{Spec: v1alpha1.CapturePolicySpec{Service: service,
		Triggers: &v1alpha1.Triggers{FleetAlerts: &v1alpha1.FleetAlertTrigger{PatternClasses: classes}}}}
	p.Name, p.Namespace = name, "ns"
	return p
}

func ids(alerts []policy.Alert) []string {
	out := []string{}
	for _, a := range alerts {
		out = append(out, a.ID)
	}
	return out
}

func TestAlertInboxKeepsAlertsPerMatchingPolicy(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)) // fixed date: the inbox's fake clock, never stored
	lister := policyLister{items: []v1alpha1.CapturePolicy{
		inboxPolicy("billy", "billy"),
		inboxPolicy("billy-patterns", "billy", "fleet-recurrent"),
		inboxPolicy("cart", "cart"),
	}}
	inbox := NewAlertInbox(lister, AlertInboxConfig{TTL: time.Minute, MaxPending: 3, Clock: clock})
	billy := types.NamespacedName{Namespace: "ns", Name: "billy"}
	patterns := types.NamespacedName{Namespace: "ns", Name: "billy-patterns"}
	cart := types.NamespacedName{Namespace: "ns", Name: "cart"}
	ctx := context.Background()

	offer := func(alerts ...policy.Alert) {
		t.Helper()
		if err := inbox.Offer(ctx, alerts...); err != nil {
			t.Fatal(err)
		}
	}
	offer(policy.Alert{ID: "a1", Service: "billy"},
		policy.Alert{ID: "a2", Service: "billy", PatternClass: "fleet-recurrent"},
		policy.Alert{ID: "a1", Service: "billy", Hosts: []string{"n1"}}, // re-sent
		policy.Alert{ID: "x", Service: "nobody"})
	if diff := cmp.Diff([]string{"a1", "a2"}, ids(inbox.Pending(billy))); diff != "" {
		t.Errorf("billy's alerts (-want +got):\n%s", diff)
	}
	if got := inbox.Pending(billy)[0].Hosts; !cmp.Equal(got, []string{"n1"}) {
		t.Errorf("a re-sent alert keeps its newest copy: hosts %v", got)
	}
	if diff := cmp.Diff([]string{"a2"}, ids(inbox.Pending(patterns))); diff != "" {
		t.Errorf("the pattern policy's alerts (-want +got):\n%s", diff)
	}
	if got := inbox.Pending(cart); len(got) != 0 {
		t.Errorf("cart's alerts %v, want none", ids(got))
	}
	if n := len(inbox.Events()); n != 2 {
		t.Errorf("%d policies woken, want 2 (billy, billy-patterns)", n)
	}

	// Over MaxPending the oldest go; past the TTL every one goes.
	clock.Advance(30 * time.Second)
	offer(policy.Alert{ID: "a3", Service: "billy"}, policy.Alert{ID: "a4", Service: "billy"})
	if diff := cmp.Diff([]string{"a2", "a3", "a4"}, ids(inbox.Pending(billy))); diff != "" {
		t.Errorf("billy's alerts over the backlog (-want +got):\n%s", diff)
	}
	inbox.Settle(billy, func(a policy.Alert) bool { return a.ID == "a3" })
	if diff := cmp.Diff([]string{"a2", "a4"}, ids(inbox.Pending(billy))); diff != "" {
		t.Errorf("billy's alerts after settling a3 (-want +got):\n%s", diff)
	}
	clock.Advance(31 * time.Second)
	if diff := cmp.Diff([]string{"a4"}, ids(inbox.Pending(billy))); diff != "" {
		t.Errorf("billy's alerts a minute after a2 (-want +got):\n%s", diff)
	}
	inbox.Forget(billy)
	if got := inbox.Pending(billy); len(got) != 0 {
		t.Errorf("a forgotten policy's alerts %v", ids(got))
	}
}
