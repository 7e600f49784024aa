package policy

import (
	"cmp"
	"slices"
)

// Alert is what the policy needs of a fleet alert (pipelines/services/alerts,
// schema spikehunt.alert/v1, or a Grafana / Alertmanager webhook). The
// intake maps a spikehunt alert as follows:
//
//   - spike-group: ID = alert_id, Service, Hosts = spike_group.hosts,
//     HWClasses = the keys of spike_group.hw_classes, PatternClass and
//     PatternKey empty;
//   - pattern: ID = alert_id, Service, PatternClass = pattern.class,
//     PatternKey = pattern.pattern_id, Hosts =
//     pattern.affected_hosts_sample, HWClasses = the classes whose
//     hw_class_skew is above 1 when the modifiers include hw-class-skewed
//     (else empty), Resolved = pattern.change == "resolved".
type Alert struct {
	// ID identifies the alert across re-sends (alert_id): the armings of
	// one alert are found by it, so a redelivered alert arms no more.
	ID      string
	Service string
	// PatternClass is the pattern's class; empty for a spike group.
	PatternClass string
	// PatternKey is what Budgets.MaxPerPatternPerHour counts by; when
	// empty, the Service is, so that a storm of spike groups is bounded
	// too.
	PatternKey string
	Resolved   bool
	// Hosts the alert names, most affected first: armed first when they
	// are among the nodes.
	Hosts []string
	// HWClasses affected; empty means every class.
	HWClasses []string
}

// budgetKey is the key the per-pattern budget counts the alert under.
func (a Alert) budgetKey() string {
	if a.PatternKey != "" {
		return a.PatternKey
	}
	return a.Service
}

// Widen picks up to extra nodes to arm for a matching alert (see
// AlertTrigger.Matches), beyond the sample sel that Sample returned for
// the same policyUID, nodes and s. Never a node of sel.Nodes, nor one in
// unavailable (say, armed already or in cooldown; nil for none).
//
// The hosts the alert names come first, whatever their class, dealt
// round-robin over their classes (the first named host of each class in
// the alert's order, then the second of each, ...), so that a widening
// shorter than the alert's list still reaches every class it names a host
// of. The rest is split among the affected classes (the alert's
// classes present among the nodes; every class when the alert names none)
// in proportion to how many candidates each has, and within a class taken
// in the order the class's deck would deal them next: widening pulls the
// coming epochs' bait forward. The result is in preference order, the
// order Decide asks Admit for them, classes interleaved so that a budget
// that cuts the list short still spreads it over the classes.
func Widen(policyUID string, nodes []Node, s Sampling, sel Selection, alert Alert, extra int, unavailable map[string]bool) []string {
	p := newPlan(policyUID, nodes, s, sel.Epoch)
	chosen := make(map[string]bool, len(sel.Nodes))
	for _, n := range sel.Nodes {
		chosen[n] = true
	}
	return p.widen(alert, extra, func(n string) bool { return chosen[n] || unavailable[n] })
}

// widen is Widen on a worked-out plan; skip says which nodes not to pick.
func (p *plan) widen(alert Alert, extra int, skip func(string) bool) []string {
	if extra <= 0 {
		return nil
	}
	picked := p.namedHosts(alert.Hosts, extra, skip)
	if len(picked) == extra {
		return picked
	}
	taken := make(map[string]bool, len(picked))
	for _, h := range picked {
		taken[h] = true
	}

	var affected []int // indices into p.classes
	if len(alert.HWClasses) == 0 {
		for i := range p.classes {
			affected = append(affected, i)
		}
	} else {
		for i, c := range p.classes {
			if slices.Contains(alert.HWClasses, c.name) {
				affected = append(affected, i)
			}
		}
	}
	cands := make([][]string, len(affected))
	counts := make([]int, len(affected))
	total := 0
	for j, i := range affected {
		c := &p.classes[i]
		n := len(c.deck)
		for k := range n { // from the card after the hand, around the deck
			node := c.deck[(c.start+c.alloc+k)%n]
			if !taken[node] && !skip(node) {
				cands[j] = append(cands[j], node)
			}
		}
		counts[j] = len(cands[j])
		total += counts[j]
	}
	share := apportion(min(extra-len(picked), total), counts, false)

	// Interleave: classes with the larger share first in each round.
	order := make([]int, len(affected))
	for j := range order {
		order[j] = j
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(share[b], share[a]) })
	for round := 0; ; round++ {
		added := false
		for _, j := range order {
			if round < share[j] {
				picked = append(picked, cands[j][round])
				added = true
			}
		}
		if !added {
			return picked
		}
	}
}

// namedHosts picks up to extra of the hosts an alert names, dealt
// round-robin over their classes: the first named host of each class, the
// classes in the order the alert first names them, then the second of
// each, and so on. The alert's list is most affected first, and its head
// is usually of the largest class; taken in its order, a widening shorter
// than the list would arm one class and leave the others to bait that has
// not seen the pattern.
func (p *plan) namedHosts(hosts []string, extra int, skip func(string) bool) []string {
	var byClass [][]string // in the order the alert first names the class
	at := map[int]int{}    // class index in p.classes → index in byClass
	seen := map[string]bool{}
	for _, h := range hosts {
		ci, ok := p.classOf[h]
		if !ok || seen[h] || skip(h) {
			continue
		}
		seen[h] = true
		j, ok := at[ci]
		if !ok {
			j = len(byClass)
			at[ci] = j
			byClass = append(byClass, nil)
		}
		byClass[j] = append(byClass[j], h)
	}
	var picked []string
	for round := 0; len(picked) < extra; round++ {
		added := false
		for _, list := range byClass {
			if round < len(list) && len(picked) < extra {
				picked = append(picked, list[round])
				added = true
			}
		}
		if !added {
			break
		}
	}
	return picked
}
