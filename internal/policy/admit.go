package policy

import (
	"cmp"
	"slices"
	"time"
)

// Reason is why a node is armed.
type Reason string

const (
	ReasonBait  Reason = "bait"  // the node is in the policy's sample
	ReasonAlert Reason = "alert" // a fleet alert widened the sample
)

// Request is a proposed arming: one Capture on one node.
type Request struct {
	// Name is the Capture's name, ArmingName of the fields below (Decide
	// fills it in). Two requests or armings with one name are one arming.
	Name     string
	PolicyID string
	Node     string
	Epoch    int64 // the sample's epoch when it was requested
	Reason   Reason
	AlertKey string // the alert's ID; empty for bait
	// PatternKey is what the per-pattern budget counts; empty (bait) is
	// not counted.
	PatternKey string
	// Priority orders the requests of one policy and alert: lower is
	// admitted first (Decide sets it to the widening preference, or to the
	// order that spreads bait over the classes).
	Priority int
}

// Arming is a request that was admitted and its Capture created. The
// controller maps a Capture to one: Active while the Capture is Pending,
// Armed or Fired and not yet collected; Fired from the moment it fired;
// FinishedAt when it stopped being active (uploaded, indexed, failed or
// expired).
type Arming struct {
	Request
	StartedAt  time.Time
	Active     bool
	Fired      bool
	FinishedAt time.Time
}

// RefusalReason says which budget refused a request. The values are metric
// label values.
type RefusalReason string

const (
	// RefusedDuplicate: an arming of that name exists, or was admitted
	// earlier in the same call.
	RefusedDuplicate RefusalReason = "duplicate"
	// RefusedNodeBusy: the node has an active arming.
	RefusedNodeBusy RefusalReason = "node_busy"
	// RefusedNodeCooldown: an arming started on the node less than
	// Budgets.PerNodeCooldown ago.
	RefusedNodeCooldown RefusalReason = "node_cooldown"
	// RefusedFleetConcurrency: Budgets.MaxConcurrentPerFleet armings are
	// active.
	RefusedFleetConcurrency RefusalReason = "fleet_concurrency"
	// RefusedPatternPerHour: Budgets.MaxPerPatternPerHour armings of the
	// pattern started within the last PatternWindow.
	RefusedPatternPerHour RefusalReason = "pattern_per_hour"
)

// Refusal is a request a budget refused.
type Refusal struct {
	Request
	Reason RefusalReason
	// Until is when the budget opens again for the request, when that
	// depends only on time (cooldown, pattern window); zero when it waits
	// for an arming to finish.
	Until time.Time
}

// Admit applies the budgets to proposed armings, given every arming in the
// fleet (all policies; finished ones too, as far back as the cooldown and
// PatternWindow reach). Requests are taken in a fixed order, whatever the
// order of want: alert armings before bait, then by policy, epoch, alert
// key, priority, node and name. Each is admitted if all of these hold, and
// refused for the first that does not:
//
//  1. no arming of its name exists or was admitted before it
//     (RefusedDuplicate);
//  2. its node has no active arming, admitted ones included
//     (RefusedNodeBusy);
//  3. no arming on its node started within PerNodeCooldown before now
//     (RefusedNodeCooldown);
//  4. fewer than MaxConcurrentPerFleet armings are active, admitted ones
//     included (RefusedFleetConcurrency);
//  5. with a pattern key, fewer than MaxPerPatternPerHour armings of that
//     key started after now − PatternWindow, admitted ones included
//     (RefusedPatternPerHour).
//
// Admitted requests start at now. Admit reads neither state nor want's
// backing array beyond copying them.
func Admit(b Budgets, state []Arming, want []Request, now time.Time) (admit []Request, refused []Refusal) {
	names := make(map[string]bool, len(state))
	busy := map[string]bool{}
	cooldownEnd := map[string]time.Time{}
	patternStarts := map[string][]time.Time{}
	active := 0
	windowStart := now.Add(-PatternWindow)
	for _, a := range state {
		names[a.Name] = true
		if a.Active {
			active++
			busy[a.Node] = true
		}
		if end := a.StartedAt.Add(b.PerNodeCooldown); b.PerNodeCooldown > 0 && end.After(cooldownEnd[a.Node]) {
			cooldownEnd[a.Node] = end
		}
		// A start after now (another clock) counts: it will be in the
		// window once now catches up.
		if a.PatternKey != "" && a.StartedAt.After(windowStart) {
			patternStarts[a.PatternKey] = append(patternStarts[a.PatternKey], a.StartedAt)
		}
	}
	for _, starts := range patternStarts {
		slices.SortFunc(starts, time.Time.Compare)
	}

	sorted := slices.Clone(want)
	slices.SortFunc(sorted, compareRequests)
	for _, r := range sorted {
		refuse := func(why RefusalReason, until time.Time) {
			refused = append(refused, Refusal{Request: r, Reason: why, Until: until})
		}
		switch {
		case names[r.Name]:
			refuse(RefusedDuplicate, time.Time{})
		case busy[r.Node]:
			refuse(RefusedNodeBusy, time.Time{})
		case cooldownEnd[r.Node].After(now):
			refuse(RefusedNodeCooldown, cooldownEnd[r.Node])
		case b.MaxConcurrentPerFleet > 0 && active >= b.MaxConcurrentPerFleet:
			refuse(RefusedFleetConcurrency, time.Time{})
		case r.PatternKey != "" && b.MaxPerPatternPerHour > 0 && len(patternStarts[r.PatternKey]) >= b.MaxPerPatternPerHour:
			// The window's oldest start leaving it frees one place.
			refuse(RefusedPatternPerHour, patternStarts[r.PatternKey][0].Add(PatternWindow))
		default:
			admit = append(admit, r)
			names[r.Name] = true
			busy[r.Node] = true
			if b.PerNodeCooldown > 0 {
				cooldownEnd[r.Node] = now.Add(b.PerNodeCooldown)
			}
			active++
			if r.PatternKey != "" {
				patternStarts[r.PatternKey] = append(patternStarts[r.PatternKey], now)
			}
		}
	}
	return admit, refused
}

// compareRequests is Admit's order.
func compareRequests(a, b Request) int {
	return cmp.Or(
		cmp.Compare(reasonOrder(a.Reason), reasonOrder(b.Reason)),
		cmp.Compare(a.Reason, b.Reason),
		cmp.Compare(a.PolicyID, b.PolicyID),
		cmp.Compare(a.Epoch, b.Epoch),
		cmp.Compare(a.AlertKey, b.AlertKey),
		cmp.Compare(a.Priority, b.Priority),
		cmp.Compare(a.Node, b.Node),
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.PatternKey, b.PatternKey),
	)
}

// reasonOrder puts armings asked for by an alert, which has seen the
// pattern, before bait, which waits for it.
func reasonOrder(r Reason) int {
	switch r {
	case ReasonAlert:
		return 0
	case ReasonBait:
		return 1
	}
	return 2
}
