package policy

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWiden(t *testing.T) {
	// 40 nodes, 20/15/5; 10% is 4 bait: 2/1/1.
	nodes := testFleet(classSize{"gen4", 20}, classSize{"gen5", 15}, classSize{"gen6", 5})
	classOf := classesOf(nodes, "")
	s := Sampling{Percent: 10, RotationPeriod: time.Hour}
	now := at(3, time.Hour)
	sel := Sample("uid", nodes, s, now)
	if diff := cmp.Diff([]ClassCount{{"gen4", 20, 2}, {"gen5", 15, 1}, {"gen6", 5, 1}}, sel.Classes); diff != "" {
		t.Fatalf("the test fleet's sample (-want +got):\n%s", diff)
	}
	chosen := sel.Nodes[0]
	var notChosen []string // gen5 nodes outside the sample
	for _, n := range nodes {
		if classOf[n.Name] == "gen5" && !slices.Contains(sel.Nodes, n.Name) {
			notChosen = append(notChosen, n.Name)
		}
	}

	perClass := func(picked []string) map[string]int {
		m := map[string]int{}
		for _, n := range picked {
			m[classOf[n]]++
		}
		return m
	}

	for _, tc := range []struct {
		name        string
		alert       Alert
		extra       int
		unavailable map[string]bool
		check       func(t *testing.T, got []string)
	}{
		{
			name:  "the hosts the alert names come first, in its order, unless chosen or unknown",
			alert: Alert{Hosts: []string{notChosen[3], chosen, "not-a-node", notChosen[1]}},
			extra: 5,
			check: func(t *testing.T, got []string) {
				if len(got) != 5 || got[0] != notChosen[3] || got[1] != notChosen[1] {
					t.Errorf("got %v, want %s and %s first, 5 in all", got, notChosen[3], notChosen[1])
				}
			},
		},
		{
			name:  "named hosts stop at extra",
			alert: Alert{Hosts: notChosen[:4]},
			extra: 2,
			check: func(t *testing.T, got []string) {
				if diff := cmp.Diff(notChosen[:2], got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			},
		},
		{
			name:  "only the alert's classes, never more than they have",
			alert: Alert{HWClasses: []string{"gen6", "gen-absent"}},
			extra: 10,
			check: func(t *testing.T, got []string) {
				if diff := cmp.Diff(map[string]int{"gen6": 4}, perClass(got)); diff != "" {
					t.Errorf("per class (-want +got):\n%s", diff)
				}
			},
		},
		{
			name:  "no classes in the alert means every class, in proportion to their candidates",
			alert: Alert{},
			extra: 6, // candidates 18/14/4: shares 3, 2.33, 0.67
			check: func(t *testing.T, got []string) {
				if diff := cmp.Diff(map[string]int{"gen4": 3, "gen5": 2, "gen6": 1}, perClass(got)); diff != "" {
					t.Errorf("per class (-want +got):\n%s", diff)
				}
				// Interleaved, the larger share first.
				if diff := cmp.Diff([]string{"gen4", "gen5", "gen6", "gen4", "gen5", "gen4"}, classSeq(got, classOf)); diff != "" {
					t.Errorf("class order (-want +got):\n%s", diff)
				}
			},
		},
		{
			name:  "classes absent from the fleet widen by the named hosts only",
			alert: Alert{HWClasses: []string{"gen9"}, Hosts: []string{notChosen[0]}},
			extra: 3,
			check: func(t *testing.T, got []string) {
				if diff := cmp.Diff([]string{notChosen[0]}, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			},
		},
		{
			name:        "never an unavailable node, named or not",
			alert:       Alert{HWClasses: []string{"gen5"}, Hosts: notChosen[:1]},
			extra:       20,
			unavailable: map[string]bool{notChosen[0]: true, notChosen[5]: true},
			check: func(t *testing.T, got []string) {
				if len(got) != 12 || slices.Contains(got, notChosen[0]) || slices.Contains(got, notChosen[5]) {
					t.Errorf("got %v, want the 12 gen5 nodes outside the sample but %s and %s", got, notChosen[0], notChosen[5])
				}
			},
		},
		{
			name:  "extra 0 widens nothing",
			alert: Alert{Hosts: notChosen},
			extra: 0,
			check: func(t *testing.T, got []string) {
				if got != nil {
					t.Errorf("got %v, want none", got)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Widen("uid", nodes, s, sel, tc.alert, tc.extra, tc.unavailable)
			for _, n := range got {
				if slices.Contains(sel.Nodes, n) {
					t.Errorf("widened to %s, which the sample already has", n)
				}
			}
			if len(slices.Compact(slices.Sorted(slices.Values(got)))) != len(got) {
				t.Errorf("a node twice: %v", got)
			}
			tc.check(t, got)
			if again := Widen("uid", nodes, s, sel, tc.alert, tc.extra, tc.unavailable); !slices.Equal(got, again) {
				t.Errorf("a second call gave %v, the first %v", again, got)
			}
		})
	}

	t.Run("widening pulls the next epoch's bait forward", func(t *testing.T) {
		// gen4: 20 nodes, 2 per epoch, a cycle of 10 epochs; epoch 3
		// and 4 share a cycle, so the next hand is epoch 4's.
		got := Widen("uid", nodes, s, sel, Alert{HWClasses: []string{"gen4"}}, 2, nil)
		var next []string
		for _, n := range Sample("uid", nodes, s, now.Add(time.Hour)).Nodes {
			if classOf[n] == "gen4" {
				next = append(next, n)
			}
		}
		if diff := cmp.Diff(next, slices.Sorted(slices.Values(got))); diff != "" {
			t.Errorf("(-next epoch's gen4 bait +widened):\n%s", diff)
		}
	})
}

func classSeq(nodes []string, classOf map[string]string) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = classOf[n]
	}
	return out
}

func TestAlertTriggerMatches(t *testing.T) {
	pattern := Alert{ID: "pattern-1", Service: "billy", PatternClass: "fleet-recurrent", PatternKey: "billy/fleet-recurrent"}
	spikes := Alert{ID: "spikegroup-1", Service: "billy"}
	for _, tc := range []struct {
		name    string
		trigger AlertTrigger
		alert   Alert
		want    bool
	}{
		{"any alert when nothing is filtered", AlertTrigger{ExtraNodes: 1}, spikes, true},
		{"widening off matches nothing", AlertTrigger{}, pattern, false},
		{"the service must be listed", AlertTrigger{ExtraNodes: 1, Services: []string{"other"}}, pattern, false},
		{"a listed service matches", AlertTrigger{ExtraNodes: 1, Services: []string{"other", "billy"}}, pattern, true},
		{"a listed pattern class matches", AlertTrigger{ExtraNodes: 1, PatternClasses: []string{"fleet-recurrent"}}, pattern, true},
		{"another pattern class does not", AlertTrigger{ExtraNodes: 1, PatternClasses: []string{"isolated-host"}}, pattern, false},
		{"pattern classes exclude spike groups", AlertTrigger{ExtraNodes: 1, PatternClasses: []string{"fleet-recurrent"}}, spikes, false},
		{"a resolved pattern never matches", AlertTrigger{ExtraNodes: 1}, Alert{Service: "billy", PatternClass: "fleet-recurrent", Resolved: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.trigger.Matches(tc.alert); got != tc.want {
				t.Errorf("Matches = %t, want %t", got, tc.want)
			}
		})
	}
}
