package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// apply is what the controller does with a decision: expire, then create.
func apply(state []Arming, d Decision, now time.Time) []Arming {
	next := slices.Clone(state)
	for i := range next {
		if slices.Contains(d.Expire, next[i].Name) {
			next[i].Active, next[i].FinishedAt = false, now
		}
	}
	return append(next, d.Create...)
}

func createdNodes(d Decision, reason Reason) []string {
	var out []string
	for _, a := range d.Create {
		if a.Reason == reason {
			out = append(out, a.Node)
		}
	}
	slices.Sort(out)
	return out
}

func names(as []Arming) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Name)
	}
	slices.Sort(out)
	return out
}

func mustDecide(t *testing.T, in Input) Decision {
	t.Helper()
	d, err := Decide(in)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return d
}

func TestDecide(t *testing.T) {
	const hour = time.Hour
	nodes := testFleet(classSize{"gen4", 20}, classSize{"gen5", 15}, classSize{"gen6", 5})
	now := at(3, hour).Add(10 * time.Minute)
	base := Input{
		PolicyID:   "3f1c2b9a-uid",
		PolicyName: "billy",
		Nodes:      nodes,
		Sampling:   Sampling{Percent: 10, RotationPeriod: hour},
		Trigger:    AlertTrigger{ExtraNodes: 3, Services: []string{"billy"}},
		Now:        now,
	}
	sel := Sample(base.PolicyID, nodes, base.Sampling, now)

	t.Run("the first decision arms the sample", func(t *testing.T) {
		d := mustDecide(t, base)
		var want []Arming
		for _, n := range sel.Nodes {
			want = append(want, Arming{
				Request: Request{
					Name: ArmingName("billy", n, sel.Epoch, ReasonBait, ""), PolicyID: base.PolicyID,
					Node: n, Epoch: sel.Epoch, Reason: ReasonBait,
				},
				StartedAt: now, Active: true,
			})
		}
		slices.SortFunc(want, func(a, b Arming) int { return strings.Compare(a.Name, b.Name) })
		if diff := cmp.Diff(want, d.Create, cmpopts.IgnoreFields(Request{}, "Priority")); diff != "" {
			t.Errorf("Create (-want +got):\n%s", diff)
		}
		if len(d.Expire) > 0 || len(d.Refused) > 0 {
			t.Errorf("expired %v, refused %v; want neither", d.Expire, d.Refused)
		}
		if !d.RequeueAt.Equal(sel.NextRotation) {
			t.Errorf("RequeueAt %s, want the next rotation %s", d.RequeueAt, sel.NextRotation)
		}
	})

	t.Run("deciding again over its own armings changes nothing", func(t *testing.T) {
		first := mustDecide(t, base)
		in := base
		in.State = apply(nil, first, now)
		in.Now = now.Add(time.Minute)
		d := mustDecide(t, in)
		if len(d.Create)+len(d.Expire)+len(d.Refused) > 0 {
			t.Errorf("create %v, expire %v, refused %v; want nothing", names(d.Create), d.Expire, d.Refused)
		}
	})

	t.Run("an operator that lost its state names the same Captures", func(t *testing.T) {
		a, b := mustDecide(t, base), mustDecide(t, base)
		if diff := cmp.Diff(names(a.Create), names(b.Create)); diff != "" {
			t.Errorf("(-first +second):\n%s", diff)
		}
	})

	t.Run("a new epoch expires the bait that left the sample and keeps the bait that stayed", func(t *testing.T) {
		in := base
		in.Sampling.Percent = 50
		kept := 0
		for e := int64(0); e < 40; e++ {
			in.Now = at(e, hour)
			in.State = nil
			old := Sample(in.PolicyID, nodes, in.Sampling, in.Now)
			in.State = apply(nil, mustDecide(t, in), in.Now)

			in.Now = at(e+1, hour)
			cur := Sample(in.PolicyID, nodes, in.Sampling, in.Now)
			d := mustDecide(t, in)
			var wantExpire []string
			for _, a := range in.State {
				if !slices.Contains(cur.Nodes, a.Node) {
					wantExpire = append(wantExpire, a.Name)
				}
			}
			slices.Sort(wantExpire)
			if diff := cmp.Diff(wantExpire, d.Expire, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("epoch %d: Expire (-want +got):\n%s", e+1, diff)
			}
			var wantCreate []string
			for _, n := range cur.Nodes {
				if slices.Contains(old.Nodes, n) {
					kept++
				} else {
					wantCreate = append(wantCreate, n)
				}
			}
			if diff := cmp.Diff(wantCreate, createdNodes(d, ReasonBait), cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("epoch %d: bait created on (-want +got):\n%s", e+1, diff)
			}
		}
		if kept == 0 {
			t.Error("no node stayed in the sample across 40 rotations at 50%: the test tested no carry-over")
		}
	})

	t.Run("fired bait is not expired and its node gets no second bait", func(t *testing.T) {
		in := base
		in.Now = at(2, hour)
		in.State = apply(nil, mustDecide(t, in), in.Now)
		for i := range in.State {
			in.State[i].Fired = true
		}
		in.Now = now
		d := mustDecide(t, in)
		if len(d.Expire) > 0 {
			t.Errorf("expired fired armings %v", d.Expire)
		}
		for _, n := range createdNodes(d, ReasonBait) {
			for _, a := range in.State {
				if a.Node == n {
					t.Errorf("new bait on %s, which is still capturing", n)
				}
			}
		}
	})

	t.Run("armings on nodes that are gone are expired", func(t *testing.T) {
		in := base
		in.State = apply(nil, mustDecide(t, in), now)
		gone := in.State[0].Node
		in.Nodes = slices.DeleteFunc(slices.Clone(nodes), func(n Node) bool { return n.Name == gone })
		d := mustDecide(t, in)
		if !slices.Contains(d.Expire, in.State[0].Name) {
			t.Errorf("Expire %v, want it to hold %s of the removed node %s", d.Expire, in.State[0].Name, gone)
		}
	})

	alert := Alert{ID: "pattern-aa", Service: "billy", PatternClass: "fleet-recurrent", PatternKey: "billy/fleet-recurrent", Hosts: []string{sel.Nodes[0], "node-0039"}}

	t.Run("a matching alert widens the sample once, a new alert again", func(t *testing.T) {
		in := base
		in.Alerts = []Alert{alert, alert} // delivered twice
		d := mustDecide(t, in)
		widened := createdNodes(d, ReasonAlert)
		if len(widened) != 3 || !slices.Contains(widened, "node-0039") || slices.Contains(widened, sel.Nodes[0]) {
			t.Fatalf("widened to %v, want 3 nodes with node-0039 and without the baited %s", widened, sel.Nodes[0])
		}
		for _, a := range d.Create {
			if a.Reason == ReasonAlert && (a.AlertKey != alert.ID || a.PatternKey != alert.PatternKey) {
				t.Errorf("alert arming %+v: want alert key %s, pattern key %s", a.Request, alert.ID, alert.PatternKey)
			}
		}

		in.State = apply(nil, d, now)
		in.Now = now.Add(time.Minute)
		if d := mustDecide(t, in); len(d.Create) > 0 {
			t.Errorf("the same alert again created %v", names(d.Create))
		}
		other := alert
		other.ID = "pattern-bb"
		in.Alerts = []Alert{other}
		d = mustDecide(t, in)
		if again := createdNodes(d, ReasonAlert); len(again) != 3 || len(overlapOf(again, widened)) > 0 {
			t.Errorf("a new alert widened to %v, want 3 nodes other than %v", again, widened)
		}
	})

	t.Run("alerts that do not match arm nothing", func(t *testing.T) {
		in := base
		otherService, resolved, spikes := alert, alert, alert
		otherService.ID, otherService.Service = "x1", "other"
		resolved.ID, resolved.Resolved = "x2", true
		spikes.ID, spikes.PatternClass = "x3", ""
		in.Alerts = []Alert{otherService, resolved, spikes}
		in.Trigger.PatternClasses = []string{"fleet-recurrent"}
		if got := createdNodes(mustDecide(t, in), ReasonAlert); len(got) > 0 {
			t.Errorf("widened to %v", got)
		}
	})

	t.Run("an alert without a pattern key is budgeted under its service", func(t *testing.T) {
		in := base
		spikes := Alert{ID: "spikegroup-1", Service: "billy"}
		in.Alerts = []Alert{spikes}
		for _, a := range mustDecide(t, in).Create {
			if a.Reason == ReasonAlert && a.PatternKey != "billy" {
				t.Errorf("pattern key %q, want the service", a.PatternKey)
			}
		}
	})

	t.Run("alert armings expire a rotation period after they started", func(t *testing.T) {
		in := base
		old := Arming{Request: Request{Name: "old", PolicyID: base.PolicyID, Node: "node-0030", Reason: ReasonAlert, AlertKey: "a"}, StartedAt: now.Add(-hour), Active: true}
		young := Arming{Request: Request{Name: "young", PolicyID: base.PolicyID, Node: "node-0031", Reason: ReasonAlert, AlertKey: "a"}, StartedAt: now.Add(-59 * time.Minute), Active: true}
		someoneElses := Arming{Request: Request{Name: "theirs", PolicyID: "other", Node: "node-0032", Reason: ReasonAlert}, StartedAt: now.Add(-2 * hour), Active: true}
		in.State = []Arming{old, young, someoneElses}
		d := mustDecide(t, in)
		if diff := cmp.Diff([]string{"old"}, d.Expire); diff != "" {
			t.Errorf("Expire (-want +got):\n%s", diff)
		}
		if want := young.StartedAt.Add(hour); !d.RequeueAt.Equal(want) {
			t.Errorf("RequeueAt %s, want %s when the young one comes of age", d.RequeueAt, want)
		}
	})

	t.Run("a refusal that time lifts brings the requeue forward", func(t *testing.T) {
		in := base
		in.Budgets.PerNodeCooldown = 5 * time.Minute
		in.State = []Arming{{Request: Request{Name: "theirs", PolicyID: "other", Node: sel.Nodes[1]}, StartedAt: now.Add(-time.Minute)}}
		d := mustDecide(t, in)
		if got := refusalStrings(d.Refused); len(got) != 1 || d.Refused[0].Reason != RefusedNodeCooldown {
			t.Fatalf("refused %v, want %s in cooldown", got, sel.Nodes[1])
		}
		if want := now.Add(4 * time.Minute); !d.RequeueAt.Equal(want) {
			t.Errorf("RequeueAt %s, want %s", d.RequeueAt, want)
		}
	})

	t.Run("a fleet budget smaller than the sample still baits every class", func(t *testing.T) {
		fleet := fleet1000()
		in := base
		in.Nodes = fleet
		in.Budgets.MaxConcurrentPerFleet = 3
		d := mustDecide(t, in)
		classOf := classesOf(fleet, "")
		var got []string
		for _, n := range createdNodes(d, ReasonBait) {
			got = append(got, classOf[n])
		}
		slices.Sort(got)
		if diff := cmp.Diff([]string{"gen4", "gen5", "gen6"}, got); diff != "" {
			t.Errorf("classes of the admitted bait (-want +got):\n%s", diff)
		}
		if len(d.Refused) != 97 {
			t.Errorf("%d refused, want the other 97", len(d.Refused))
		}
		// With 10 places, the split follows the shares: 7/2/1.
		in.Budgets.MaxConcurrentPerFleet = 10
		count := map[string]int{}
		for _, n := range createdNodes(mustDecide(t, in), ReasonBait) {
			count[classOf[n]]++
		}
		if diff := cmp.Diff(map[string]int{"gen4": 7, "gen5": 2, "gen6": 1}, count); diff != "" {
			t.Errorf("per class with 10 places (-want +got):\n%s", diff)
		}
	})
}

func TestDecideRefusesInvalidInput(t *testing.T) {
	valid := Input{PolicyID: "uid", Now: time.Unix(1, 0), Sampling: Sampling{Percent: 10}}
	if _, err := Decide(valid); err != nil {
		t.Fatalf("valid input: %v", err)
	}
	for _, tc := range []struct {
		name   string
		modify func(*Input)
	}{
		{"no policy id", func(in *Input) { in.PolicyID = "" }},
		{"no time", func(in *Input) { in.Now = time.Time{} }},
		{"a node without a name", func(in *Input) { in.Nodes = []Node{{Name: "a"}, {HWClass: "gen4"}} }},
		{"a percent above 100", func(in *Input) { in.Sampling.Percent = 101 }},
		{"a negative percent", func(in *Input) { in.Sampling.Percent = -1 }},
		{"a negative count", func(in *Input) { in.Sampling = Sampling{Count: -1} }},
		{"both count and percent", func(in *Input) { in.Sampling.Count = 5 }},
		{"a negative rotation", func(in *Input) { in.Sampling.RotationPeriod = -time.Hour }},
		{"a rotation under a second", func(in *Input) { in.Sampling.RotationPeriod = time.Millisecond }},
		{"a negative fleet budget", func(in *Input) { in.Budgets.MaxConcurrentPerFleet = -1 }},
		{"a negative cooldown", func(in *Input) { in.Budgets.PerNodeCooldown = -time.Second }},
		{"a negative pattern budget", func(in *Input) { in.Budgets.MaxPerPatternPerHour = -1 }},
		{"negative extra nodes", func(in *Input) { in.Trigger.ExtraNodes = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := valid
			tc.modify(&in)
			if _, err := Decide(in); !errors.Is(err, ErrInvalid) {
				t.Errorf("Decide: %v, want ErrInvalid", err)
			}
		})
	}
}

func overlapOf(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
