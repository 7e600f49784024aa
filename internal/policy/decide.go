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
	// anything on a node that is gone, and bait that makes room for an
	// alert's armings the fleet's concurrency budget refused (they are
	// admitted by the next decision, once the expired Captures are done;
	// see preempt).
	Expire []string
	// Refused are the requests a budget refused, in Admit's order.
	Refused []Refusal
	// Wants is, per matching alert ID, how many armings the alert gets
	// over its life: Trigger.ExtraNodes, or one per hardware class the
	// alert names hosts of when that is more. An alert that has them all
	// needs no more decisions (the controller settles it).
	Wants map[string]int
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
	var baitHeld []Arming         // this policy's bait, active, not fired, staying
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
			if a.Reason == ReasonBait {
				baitHeld = append(baitHeld, a)
			}
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
	named := map[string]bool{} // hosts the matching alerts name
	for i, a := range alerts {
		if (i > 0 && a.ID == alerts[i-1].ID) || !in.Trigger.Matches(a) {
			continue
		}
		for _, h := range a.Hosts {
			named[h] = true
		}
		wants := max(in.Trigger.ExtraNodes, p.namedClasses(a.Hosts))
		if d.Wants == nil {
			d.Wants = map[string]int{}
		}
		d.Wants[a.ID] = wants
		extra := wants - perAlert[a.ID]
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
	short := 0
	for _, r := range refused {
		if r.Reason == RefusedFleetConcurrency && r.Request.Reason == ReasonAlert {
			short++
		}
	}
	if victims := p.preempt(baitHeld, short, named); len(victims) > 0 {
		d.Expire = append(d.Expire, victims...)
		slices.Sort(d.Expire)
	}
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

// preempt chooses up to n of the policy's held bait (active, not fired)
// to expire so that an alert's armings, which the fleet's concurrency
// budget refused, get their places: an alert has seen the pattern, bait
// only waits for it. Never bait on a host a matching alert names. The
// class holding the most bait gives first, so that every class keeps
// bait as long as it can; within a class the bait armed longest, which
// has had the most time to see a stall and has not.
func (p *plan) preempt(held []Arming, n int, named map[string]bool) []string {
	if n <= 0 {
		return nil
	}
	byClass := map[int][]Arming{}
	for _, a := range held {
		if !named[a.Node] {
			ci := p.classOf[a.Node]
			byClass[ci] = append(byClass[ci], a)
		}
	}
	for _, list := range byClass {
		slices.SortFunc(list, func(x, y Arming) int {
			return cmp.Or(x.StartedAt.Compare(y.StartedAt), cmp.Compare(x.Name, y.Name))
		})
	}
	count := map[int]int{} // bait each class holds, preemptible or not
	for _, a := range held {
		count[p.classOf[a.Node]]++
	}
	var out []string
	for len(out) < n {
		best := -1
		for ci, list := range byClass {
			if len(list) == 0 {
				continue
			}
			if best < 0 || count[ci] > count[best] || (count[ci] == count[best] && ci < best) {
				best = ci
			}
		}
		if best < 0 {
			break
		}
		out = append(out, byClass[best][0].Name)
		byClass[best] = byClass[best][1:]
		count[best]--
	}
	return out
}

// namedClasses is how many classes of the policy's nodes the hosts are
// of.
func (p *plan) namedClasses(hosts []string) int {
	seen := map[int]bool{}
	for _, h := range hosts {
		if ci, ok := p.classOf[h]; ok {
			seen[ci] = true
		}
	}
	return len(seen)
}
