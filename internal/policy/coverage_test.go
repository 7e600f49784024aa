package policy

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The fleet of the capture-strategy benchmark, small: 80 nodes in four
// classes (40/20/10/10), 5% bait is 4 nodes, and a fleet budget of 4 is
// full of bait.
func coverageInput() Input {
	nodes := testFleet(classSize{"gen4", 40}, classSize{"gen5", 20}, classSize{"gen6", 10}, classSize{"arm1", 10})
	return Input{
		PolicyID: "uid-checkout", PolicyName: "checkout-offcpu", Nodes: nodes,
		Sampling: Sampling{Percent: 5, RotationPeriod: time.Hour},
		Budgets:  Budgets{MaxConcurrentPerFleet: 4, PerNodeCooldown: 30 * time.Minute, MaxPerPatternPerHour: 6},
		Trigger:  AlertTrigger{ExtraNodes: 3, Services: []string{"checkout"}},
		Now:      at(7, time.Hour).Add(5 * time.Minute),
	}
}

// namedPerClass returns, for an alert, up to n nodes of each class outside
// the sample, most affected first in the alert's order: the largest class
// first, as the detector's sample of most-affected hosts usually has it.
func namedPerClass(in Input, sample []string, n int) []string {
	classOf := classesOf(in.Nodes, "")
	var hosts []string
	for _, class := range []string{"gen4", "arm1", "gen5", "gen6"} {
		k := 0
		for _, node := range in.Nodes {
			if classOf[node.Name] == class && !slices.Contains(sample, node.Name) && k < n {
				hosts = append(hosts, node.Name)
				k++
			}
		}
	}
	// gen4's hosts lead the list, as in the detector's sample.
	return hosts
}

func TestAPatternAlertArmsAHostItNamesInEveryClassItNamesHostsOf(t *testing.T) {
	in := coverageInput()
	in.Budgets.MaxConcurrentPerFleet = 0 // no fleet budget: widening alone
	sel := Sample(in.PolicyID, in.Nodes, in.Sampling, in.Now)
	in.State = apply(nil, mustDecide(t, in), in.Now)
	alert := Alert{ID: "kafka/p1", Service: "checkout", PatternClass: "fleet-recurrent", PatternKey: "p",
		Hosts: namedPerClass(in, sel.Nodes, 3)}
	in.Alerts = []Alert{alert}
	in.Now = in.Now.Add(time.Minute)
	d := mustDecide(t, in)

	classOf := classesOf(in.Nodes, "")
	got := map[string]int{}
	for _, a := range d.Create {
		if a.Reason != ReasonAlert {
			continue
		}
		if !slices.Contains(alert.Hosts, a.Node) {
			t.Errorf("armed %s, which the alert does not name", a.Node)
		}
		got[classOf[a.Node]]++
	}
	// Four classes named, widen by 3: one each, not three of gen4.
	if diff := cmp.Diff(map[string]int{"gen4": 1, "gen5": 1, "gen6": 1, "arm1": 1}, got); diff != "" {
		t.Errorf("alert armings per class (-want +got):\n%s", diff)
	}
	if d.Wants[alert.ID] != 4 {
		t.Errorf("Wants[%s] = %d, want 4 (one per named class)", alert.ID, d.Wants[alert.ID])
	}
}

func TestAPatternAlertPreemptsBaitThatHasNotFiredWhenTheFleetBudgetIsFull(t *testing.T) {
	in := coverageInput()
	sel := Sample(in.PolicyID, in.Nodes, in.Sampling, in.Now)
	in.State = apply(nil, mustDecide(t, in), in.Now)
	if n := len(in.State); n != 4 {
		t.Fatalf("%d bait armed, want 4: the fleet budget full", n)
	}
	in.State[0].Fired = true // one bait caught a stall: it is not preempted
	alert := Alert{ID: "kafka/p1", Service: "checkout", PatternClass: "fleet-recurrent", PatternKey: "p",
		Hosts: namedPerClass(in, sel.Nodes, 1)}
	in.Alerts = []Alert{alert}

	// The alert's armings are refused for the fleet's budget, and as
	// many unfired bait are expired to make room.
	in.Now = in.Now.Add(time.Minute)
	d := mustDecide(t, in)
	if c := createdNodes(d, ReasonAlert); len(c) != 0 {
		t.Fatalf("alert armings %v created over a full fleet budget", c)
	}
	if len(d.Expire) != 3 || slices.Contains(d.Expire, in.State[0].Name) {
		t.Fatalf("Expire %v, want the 3 unfired bait (not the fired %s)", d.Expire, in.State[0].Name)
	}

	// The next decision, once they are expired, arms the named hosts.
	in.State = apply(in.State, d, in.Now)
	in.Now = in.Now.Add(time.Second)
	d = mustDecide(t, in)
	widened := createdNodes(d, ReasonAlert)
	if len(widened) != 3 {
		t.Fatalf("alert armings %v (refused %+v), want 3 in the places the bait left", widened, d.Refused)
	}
	for _, n := range widened {
		if !slices.Contains(alert.Hosts, n) {
			t.Errorf("armed %s, which the alert does not name", n)
		}
	}
	if len(d.Expire) != 0 {
		t.Errorf("Expire %v after the alert got its places; want none", d.Expire)
	}
}

func TestPreemptionTakesFromTheClassWithTheMostBaitAndNeverAHostTheAlertNames(t *testing.T) {
	in := coverageInput()
	in.Sampling.Percent = 10 // 8 bait: 4/2/1/1
	in.Budgets.MaxConcurrentPerFleet = 8
	sel := Sample(in.PolicyID, in.Nodes, in.Sampling, in.Now)
	in.State = apply(nil, mustDecide(t, in), in.Now)
	classOf := classesOf(in.Nodes, "")
	var gen4Bait string
	for _, n := range sel.Nodes {
		if classOf[n] == "gen4" {
			gen4Bait = n
			break
		}
	}
	alert := Alert{ID: "kafka/p1", Service: "checkout", PatternClass: "fleet-recurrent", PatternKey: "p",
		Hosts: append([]string{gen4Bait}, namedPerClass(in, sel.Nodes, 1)[:2]...)}
	in.Alerts = []Alert{alert}
	in.Now = in.Now.Add(time.Minute)
	d := mustDecide(t, in)
	got := map[string]int{}
	for _, name := range d.Expire {
		for _, a := range in.State {
			if a.Name == name {
				got[classOf[a.Node]]++
				if a.Node == gen4Bait {
					t.Errorf("preempted the bait on %s, a host the alert names", gen4Bait)
				}
			}
		}
	}
	// Three alert armings refused (two named hosts, gen4Bait armed
	// already, and one from the decks). Bait per class: gen4 4, gen5 2,
	// gen6 1, arm1 1. gen4 gives each time: 4, then 3 against gen5's 2,
	// then 2 against gen5's 2, the tie going to the class that sorts first.
	if diff := cmp.Diff(map[string]int{"gen4": 3}, got); diff != "" {
		t.Errorf("preempted per class (-want +got):\n%s", diff)
	}
}
