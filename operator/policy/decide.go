package policy

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Input is everything one decision for one policy depends on.
type Input struct {
	// PolicyID identifies the policy (its UID): it seeds the sample and
	// marks the policy's armings in State.
	PolicyID string
	// PolicyName prefixes the Capture names (see ArmingName); PolicyID
	// when empty.
	PolicyName string
	Nodes      []Node // the nodes the policy's node selector matches
	Sampling   Sampling
	Budgets    Budgets
	Trigger    AlertTrigger
	// Alerts to act on. Those that do not match Trigger are ignored; one
	// that already has Trigger.ExtraNodes armings of this policy in State
	// adds no more, so passing an alert again is harmless.
	Alerts []Alert
	// State is every arming in the fleet, of every policy, finished ones
	// included as far back as PerNodeCooldown and PatternWindow reach. It
	// must include the armings the previous decisions created (see the
	// package documentation on stale caches).
	State []Arming
	Now   time.Time
}

// Validate checks the input's configuration.
func (in Input) Validate() error {
	if in.PolicyID == "" {
		return fmt.Errorf("%w: the policy id is empty", ErrInvalid)
	}
	if in.Now.IsZero() {
		return fmt.Errorf("%w: the time is zero", ErrInvalid)
	}
	for i, n := range in.Nodes {
		if n.Name == "" {
			return fmt.Errorf("%w: node %d has no name", ErrInvalid, i)
		}
	}
	if err := in.Sampling.Validate(); err != nil {
		return err
	}
	if err := in.Budgets.Validate(); err != nil {
		return err
	}
	return in.Trigger.Validate()
}

// Decision is what the controller applies: first Expire, then Create.
type Decision struct {
	Selection Selection
	// Create are the armings to create, one Capture each, sorted by name;
	// they start at Input.Now.
	Create []Arming
	// Expire names this policy's active armings, not fired, to expire,
	// sorted: bait on a node that left the sample, alert armings a
	// rotation period old (without rotation they wait until they fire),
	// anything on a node that is gone.
	Expire []string
	// Refused are the requests a budget refused, in Admit's order.
	Refused []Refusal
	// RequeueAt is the earliest time the decision may change without any
	// event the controller watches: the next rotation, a budget that opens
	// with time, an alert arming that comes of age. Zero when none.
	RequeueAt time.Time
}

// Decide is the whole policy as a pure function: sample the epoch's bait,
// expire what left it, widen on matching alerts, and pass every new arming
// through the budgets. The controller's reconcile is: fetch the inputs,
// Decide, apply.
//
// Armings being expired by this decision still count against the budgets
// (as active, on their nodes): their agents may not have disarmed yet. The
// watch on their Captures brings the next reconcile, which sees them done.
func Decide(in Input) (Decision, error) {
	if err := in.Validate(); err != nil {
		return Decision{}, err
	}
	now := in.Now
	p := newPlan(in.PolicyID, in.Nodes, in.Sampling, epochOf(now, in.Sampling.RotationPeriod))
	d := Decision{Selection: p.selection()}
	chosen := make(map[string]bool, len(d.Selection.Nodes))
	for _, n := range d.Selection.Nodes {
		chosen[n] = true
	}
	name := in.PolicyName
	if name == "" {
		name = in.PolicyID
	}

	// What this policy holds, and what the fleet makes unavailable.
	names := make(map[string]bool, len(in.State))
	armed := map[string]bool{}    // nodes with an active arming of this policy that stays
	occupied := map[string]bool{} // nodes with an active arming, or in cooldown
	perAlert := map[string]int{}  // this policy's armings per alert key
	for _, a := range in.State {
		names[a.Name] = true
		if a.Active || (in.Budgets.PerNodeCooldown > 0 && a.StartedAt.Add(in.Budgets.PerNodeCooldown).After(now)) {
			occupied[a.Node] = true
		}
		if a.PolicyID != in.PolicyID {
			continue
		}
		if a.Reason == ReasonAlert {
			perAlert[a.AlertKey]++
		}
		if !a.Active {
			continue
		}
		if a.Fired {
			armed[a.Node] = true
			continue
		}
		_, exists := p.classOf[a.Node]
		switch {
		case !exists,
			a.Reason == ReasonBait && !chosen[a.Node],
			a.Reason != ReasonBait && in.Sampling.RotationPeriod > 0 && !now.Before(a.StartedAt.Add(in.Sampling.RotationPeriod)):
			d.Expire = append(d.Expire, a.Name)
		default:
			armed[a.Node] = true
			if a.Reason != ReasonBait && in.Sampling.RotationPeriod > 0 {
				d.RequeueAt = earliest(d.RequeueAt, a.StartedAt.Add(in.Sampling.RotationPeriod))
			}
		}
	}
	slices.Sort(d.Expire)

	want := p.baitRequests(in.PolicyID, name, armed, names)
	requested := map[string]bool{}
	for _, r := range want {
		requested[r.Node] = true
	}
	alerts := slices.Clone(in.Alerts)
	slices.SortStableFunc(alerts, func(a, b Alert) int { return cmp.Compare(a.ID, b.ID) })
	for i, a := range alerts {
		if (i > 0 && a.ID == alerts[i-1].ID) || !in.Trigger.Matches(a) {
			continue
		}
		extra := in.Trigger.ExtraNodes - perAlert[a.ID]
		skip := func(n string) bool { return chosen[n] || occupied[n] || requested[n] }
		for prio, node := range p.widen(a, extra, skip) {
			r := Request{
				Name:       ArmingName(name, node, p.epoch, ReasonAlert, a.ID),
				PolicyID:   in.PolicyID,
				Node:       node,
				Epoch:      p.epoch,
				Reason:     ReasonAlert,
				AlertKey:   a.ID,
				PatternKey: a.budgetKey(),
				Priority:   prio,
			}
			if names[r.Name] {
				continue
			}
			want = append(want, r)
			requested[node] = true
		}
	}

	admitted, refused := Admit(in.Budgets, in.State, want, now)
	for _, r := range admitted {
		d.Create = append(d.Create, Arming{Request: r, StartedAt: now, Active: true})
	}
	slices.SortFunc(d.Create, func(a, b Arming) int { return cmp.Compare(a.Name, b.Name) })
	d.Refused = refused
	for _, r := range refused {
		if r.Until.After(now) {
			d.RequeueAt = earliest(d.RequeueAt, r.Until)
		}
	}
	if !d.Selection.NextRotation.IsZero() {
		d.RequeueAt = earliest(d.RequeueAt, d.Selection.NextRotation)
	}
	return d, nil
}

// baitRequests asks for the sample's nodes that this policy has not armed
// and that have not had their bait of this epoch yet. Their priorities
// spread a budget that cannot take them all over the classes: first one of
// each class (largest class first), then the rest in proportion to the
// classes' shares: the i-th node of a class dealt a nodes comes at
// (i + ½) / a.
func (p *plan) baitRequests(policyID, policyName string, armed, names map[string]bool) []Request {
	type card struct {
		node  string
		class int
		i     int
	}
	var cards []card
	for ci := range p.classes {
		for i, node := range p.classes[ci].hand() {
			cards = append(cards, card{node, ci, i})
		}
	}
	slices.SortFunc(cards, func(x, y card) int {
		cx, cy := &p.classes[x.class], &p.classes[y.class]
		if (x.i == 0) != (y.i == 0) {
			if x.i == 0 {
				return -1
			}
			return 1
		}
		if x.i == 0 {
			return cmp.Or(cmp.Compare(len(cy.nodes), len(cx.nodes)), cmp.Compare(cx.name, cy.name))
		}
		// (2·x.i + 1) / x.alloc against (2·y.i + 1) / y.alloc.
		return cmp.Or(cmp.Compare((2*x.i+1)*cy.alloc, (2*y.i+1)*cx.alloc), cmp.Compare(cx.name, cy.name))
	})
	var out []Request
	for prio, c := range cards {
		if armed[c.node] {
			continue
		}
		r := Request{
			Name:     ArmingName(policyName, c.node, p.epoch, ReasonBait, ""),
			PolicyID: policyID,
			Node:     c.node,
			Epoch:    p.epoch,
			Reason:   ReasonBait,
			Priority: prio,
		}
		if !names[r.Name] {
			out = append(out, r)
		}
	}
	return out
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
