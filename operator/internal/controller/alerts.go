package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// Defaults of AlertInboxConfig.
const (
	DefaultAlertTTL          = 15 * time.Minute
	DefaultMaxPendingAlerts  = 1000
	defaultAlertEventsBuffer = 1024
)

// AlertInboxConfig configures an AlertInbox.
type AlertInboxConfig struct {
	// TTL is how long an alert stays pending for a policy whose budgets
	// keep refusing its armings (default 15m). A detector alert is re-sent
	// while its pattern holds, so an alert dropped here comes again.
	TTL time.Duration
	// MaxPending bounds the alerts pending per policy (default 1000); the
	// oldest go first, counted (reason backlog). Every reconcile of the
	// policy passes all of them to policy.Decide.
	MaxPending int
	Clock      Clock
}

// AlertInbox is the fleet alerts' way into the CapturePolicy controller.
// Offer keeps an alert pending for each policy whose trigger matches it and
// wakes those policies through Events (a source.Channel); the reconcile
// takes the pending alerts with Pending, and Settle drops those that have
// all their armings. Alerts are deduplicated on their ID per policy, so a
// re-sent alert arms no more (policy.Decide counts its armings too).
//
// Offer may be called from many goroutines (the intake's Sink is); it
// blocks while the controller's event buffer is full, until ctx ends.
type AlertInbox struct {
	policies client.Reader // CapturePolicies, from the manager's cache
	cfg      AlertInboxConfig
	events   chan event.GenericEvent

	mu      sync.Mutex
	pending map[types.NamespacedName]*policyAlerts
}

type policyAlerts struct {
	byID  map[string]pendingAlert
	order []string // IDs, oldest first
}

type pendingAlert struct {
	alert    policy.Alert
	received time.Time
}

// NewAlertInbox returns an inbox that finds the policies an alert matches
// through policies (the manager's client: its cache).
func NewAlertInbox(policies client.Reader, cfg AlertInboxConfig) *AlertInbox {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultAlertTTL
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPendingAlerts
	}
	cfg.Clock = clockOr(cfg.Clock)
	return &AlertInbox{
		policies: policies,
		cfg:      cfg,
		events:   make(chan event.GenericEvent, defaultAlertEventsBuffer),
		pending:  map[types.NamespacedName]*policyAlerts{},
	}
}

// Events is the channel the CapturePolicy controller watches: one event
// per policy an offered alert matched.
func (b *AlertInbox) Events() <-chan event.GenericEvent { return b.events }

// Offer hands alerts to every policy whose fleet-alert trigger matches
// them. It fails only when the policies cannot be listed (the cache has
// not started) or ctx ends; the caller retries (the intake answers 503 or
// polls again).
func (b *AlertInbox) Offer(ctx context.Context, alerts ...policy.Alert) error {
	if len(alerts) == 0 {
		return nil
	}
	var list v1alpha1.CapturePolicyList
	if err := b.policies.List(ctx, &list); err != nil {
		return fmt.Errorf("alert inbox: list CapturePolicies: %w", err)
	}
	now := b.cfg.Clock.Now()
	woken := map[types.NamespacedName]bool{}
	b.mu.Lock()
	for _, a := range alerts {
		alertsReceived.Inc()
		matched := false
		for i := range list.Items {
			p := &list.Items[i]
			if !p.DeletionTimestamp.IsZero() || !alertTriggerOf(p).Matches(a) {
				continue
			}
			matched = true
			key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
			b.add(key, a, now)
			woken[key] = true
		}
		if !matched {
			alertsDropped.WithLabelValues("no_policy").Inc()
			logf.FromContext(ctx).V(1).Info("an alert matched no CapturePolicy; dropped", "alert", a.ID,
				"service", a.Service, "hosts", len(a.Hosts), "policies", len(list.Items))
		}
	}
	b.mu.Unlock()
	for key := range woken {
		ev := event.GenericEvent{Object: &v1alpha1.CapturePolicy{}}
		ev.Object.SetNamespace(key.Namespace)
		ev.Object.SetName(key.Name)
		select {
		case b.events <- ev:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// add keeps a pending for the policy; b.mu is held.
func (b *AlertInbox) add(key types.NamespacedName, a policy.Alert, now time.Time) {
	pa := b.pending[key]
	if pa == nil {
		pa = &policyAlerts{byID: map[string]pendingAlert{}}
		b.pending[key] = pa
	}
	if _, dup := pa.byID[a.ID]; dup {
		// The newest copy wins (it may name more hosts); the age stays
		// the first's, so a re-sent alert cannot stay pending forever.
		p := pa.byID[a.ID]
		p.alert = a
		pa.byID[a.ID] = p
		return
	}
	pa.byID[a.ID] = pendingAlert{alert: a, received: now}
	pa.order = append(pa.order, a.ID)
	for len(pa.order) > b.cfg.MaxPending {
		delete(pa.byID, pa.order[0])
		pa.order = pa.order[1:]
		alertsDropped.WithLabelValues("backlog").Inc()
	}
}

// Pending returns the alerts pending for a policy, oldest first, after
// dropping those older than the TTL.
func (b *AlertInbox) Pending(key types.NamespacedName) []policy.Alert {
	if b == nil {
		return nil
	}
	now := b.cfg.Clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	pa := b.pending[key]
	if pa == nil {
		return nil
	}
	out := make([]policy.Alert, 0, len(pa.order))
	kept := pa.order[:0]
	for _, id := range pa.order {
		p := pa.byID[id]
		if now.Sub(p.received) > b.cfg.TTL {
			delete(pa.byID, id)
			alertsDropped.WithLabelValues("expired").Inc()
			continue
		}
		kept = append(kept, id)
		out = append(out, p.alert)
	}
	pa.order = kept
	if len(pa.order) == 0 {
		delete(b.pending, key)
	}
	return out
}

// Settle drops the policy's pending alerts for which done is true (their
// armings all exist, or the policy no longer matches them).
func (b *AlertInbox) Settle(key types.NamespacedName, done func(policy.Alert) bool) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	pa := b.pending[key]
	if pa == nil {
		return
	}
	pa.order = slices.DeleteFunc(pa.order, func(id string) bool {
		if done(pa.byID[id].alert) {
			delete(pa.byID, id)
			return true
		}
		return false
	})
	if len(pa.order) == 0 {
		delete(b.pending, key)
	}
}

// Forget drops every alert pending for a policy that is gone.
func (b *AlertInbox) Forget(key types.NamespacedName) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.pending, key)
}
