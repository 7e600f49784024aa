package policy

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"testing"
	"time"
)

// TestAlertStormNeverExceedsABudget runs 1,000 alerts/s for 10 s through
// Decide for two policies over 1,000 nodes, on a fake clock ticking every
// 10 ms. Each tick the armings move on (some fire 0.5–3.5 s after they
// start and are done a second later, the rest wait to be expired), ten
// alerts arrive — many of them re-sends, some for services or pattern
// classes the policies ignore — and each policy decides in turn (the
// serialization the package documents), its decision applied at once.
// After every decision the whole history is checked at that instant:
// active armings within the fleet budget, at most one active per node,
// starts on a node at least the cooldown apart, per pattern at most the
// hourly budget, per alert at most ExtraNodes (or one per class the
// alert names hosts of, when more). The budgets must bind (some
// refusals of each budget) without refusing everything.
func TestAlertStormNeverExceedsABudget(t *testing.T) {
	nodes := fleet1000()
	budgets := Budgets{MaxConcurrentPerFleet: 25, PerNodeCooldown: 3 * time.Second, MaxPerPatternPerHour: 8}
	policies := []Input{
		{
			PolicyID: "uid-billy", PolicyName: "billy", Nodes: nodes, Budgets: budgets,
			Sampling: Sampling{Percent: 2, RotationPeriod: 4 * time.Second},
			Trigger:  AlertTrigger{ExtraNodes: 3, Services: []string{"billy"}},
		},
		{
			PolicyID: "uid-search", PolicyName: "search", Nodes: nodes[:600], Budgets: budgets,
			Sampling: Sampling{Count: 6, RotationPeriod: 3 * time.Second},
			Trigger:  AlertTrigger{ExtraNodes: 2, Services: []string{"search"}, PatternClasses: []string{"fleet-recurrent"}},
		},
	}
	const (
		tick          = 10 * time.Millisecond
		ticks         = 1000 // 10 s
		alertsPerTick = 10   // 1,000/s
	)
	r := rand.New(rand.NewPCG(11, 12))
	services := []string{"billy", "search", "other"}
	classes := []string{"gen4", "gen5", "gen6", "gen9"}
	newAlert := func() Alert {
		id := r.IntN(3000) // re-sends: the same id again
		a := Alert{
			ID:      fmt.Sprintf("alert-%04d", id),
			Service: services[id%len(services)],
		}
		switch id % 5 {
		case 0: // a spike group: budgeted under its service
		case 4:
			a.PatternClass, a.Resolved = "fleet-synchronized", id%10 == 4
			a.PatternKey = fmt.Sprintf("%s/pattern-%d", a.Service, id%12)
		default:
			a.PatternClass = "fleet-recurrent"
			a.PatternKey = fmt.Sprintf("%s/pattern-%d", a.Service, id%12)
		}
		for range r.IntN(4) {
			a.Hosts = append(a.Hosts, nodes[r.IntN(len(nodes))].Name)
		}
		for range r.IntN(3) {
			a.HWClasses = append(a.HWClasses, classes[r.IntN(len(classes))])
		}
		return a
	}
	// fireAfter: half the armings fire 0.5–3.5 s after starting; the
	// others never do and wait for Decide to expire them.
	fireAfter := func(name string) (time.Duration, bool) {
		h := fnv.New64a()
		h.Write([]byte(name))
		v := h.Sum64()
		return 500*time.Millisecond + time.Duration(v%3000)*time.Millisecond, v&(1<<40) != 0
	}

	var state []Arming
	admitted := map[Reason]int{}
	refused := map[RefusalReason]int{}
	alerts, expired := 0, 0
	// wants: per policy and alert, the most armings any send of the alert
	// may get: ExtraNodes, or one per class it names hosts of.
	wants := map[string]int{}
	now := time.Date(2025, 6, 1, 12, 0, 0, 1_500_000_000, time.UTC) // mid-epoch: rotations happen during the storm
	for i := 0; i < ticks; i++ {
		now = now.Add(tick)
		for j := range state {
			a := &state[j]
			if !a.Active {
				continue
			}
			after, fires := fireAfter(a.Name)
			if fires && !now.Before(a.StartedAt.Add(after)) {
				a.Fired = true
			}
			if a.Fired && !now.Before(a.StartedAt.Add(after+time.Second)) {
				a.Active, a.FinishedAt = false, now
			}
		}
		batch := make([]Alert, alertsPerTick)
		for j := range batch {
			batch[j] = newAlert()
		}
		alerts += len(batch)
		for _, in := range policies {
			for _, a := range batch {
				k := in.PolicyID + " " + a.ID
				wants[k] = max(wants[k], in.Trigger.ExtraNodes, namedClassesOf(in.Nodes, a.Hosts))
			}
		}
		for _, in := range policies {
			in.Alerts, in.State, in.Now = batch, state, now
			d, err := Decide(in)
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			expired += len(d.Expire)
			for _, a := range d.Create {
				admitted[a.Reason]++
			}
			for _, f := range d.Refused {
				refused[f.Reason]++
			}
			state = apply(state, d, now)
			if err := checkBudgets(budgets, policies, wants, state, now); err != nil {
				t.Fatalf("%s after %s: %v", in.PolicyName, now.Sub(time.Date(2025, 6, 1, 12, 0, 1, 500_000_000, time.UTC)), err)
			}
		}
	}
	t.Logf("%d alerts; admitted %v; refused %v; expired %d", alerts, admitted, refused, expired)
	if admitted[ReasonBait] == 0 || admitted[ReasonAlert] == 0 {
		t.Errorf("admitted %v: the budgets should let bait and alert armings through", admitted)
	}
	for _, why := range []RefusalReason{RefusedFleetConcurrency, RefusedPatternPerHour} {
		if refused[why] == 0 {
			t.Errorf("no refusal %s: the storm did not test that budget", why)
		}
	}
	if expired == 0 {
		t.Error("nothing expired: the storm did not rotate")
	}
}

// checkBudgets checks the history of armings against the budgets at now.
func checkBudgets(b Budgets, policies []Input, wants map[string]int, state []Arming, now time.Time) error {
	active := 0
	activeOn := map[string]int{}
	starts := map[string][]time.Time{}
	perPattern := map[string]int{}
	perAlert := map[string]int{}
	for _, a := range state {
		if a.Active {
			active++
			activeOn[a.Node]++
			if activeOn[a.Node] > 1 {
				return fmt.Errorf("node %s has %d active armings", a.Node, activeOn[a.Node])
			}
		}
		for _, s := range starts[a.Node] {
			if d := a.StartedAt.Sub(s).Abs(); d < b.PerNodeCooldown {
				return fmt.Errorf("node %s: armings started %s apart, cooldown %s", a.Node, d, b.PerNodeCooldown)
			}
		}
		starts[a.Node] = append(starts[a.Node], a.StartedAt)
		if a.PatternKey != "" && a.StartedAt.After(now.Add(-PatternWindow)) {
			perPattern[a.PatternKey]++
			if perPattern[a.PatternKey] > b.MaxPerPatternPerHour {
				return fmt.Errorf("pattern %s: %d armings within the hour", a.PatternKey, perPattern[a.PatternKey])
			}
		}
		if a.Reason == ReasonAlert {
			perAlert[a.PolicyID+" "+a.AlertKey]++
		}
	}
	if active > b.MaxConcurrentPerFleet {
		return fmt.Errorf("%d active armings, budget %d", active, b.MaxConcurrentPerFleet)
	}
	for key, n := range perAlert {
		if n > wants[key] {
			return fmt.Errorf("policy and alert %s: %d armings, at most %d (extra nodes, or one per named class)", key, n, wants[key])
		}
	}
	return nil
}

// namedClassesOf is how many classes of nodes the hosts are of.
func namedClassesOf(nodes []Node, hosts []string) int {
	classOf := classesOf(nodes, "")
	seen := map[string]bool{}
	for _, h := range hosts {
		if c, ok := classOf[h]; ok {
			seen[c] = true
		}
	}
	return len(seen)
}
