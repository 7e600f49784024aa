package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAdmit(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	bait := func(policy, node string) Request {
		return Request{Name: policy + "-" + node + "-bait", PolicyID: policy, Node: node, Reason: ReasonBait}
	}
	alert := func(node, key, pattern string, prio int) Request {
		return Request{Name: "p-" + node + "-" + key, PolicyID: "p", Node: node, Reason: ReasonAlert, AlertKey: key, PatternKey: pattern, Priority: prio}
	}
	armed := func(r Request, ago time.Duration) Arming {
		return Arming{Request: r, StartedAt: now.Add(-ago), Active: true}
	}
	done := func(r Request, ago time.Duration) Arming {
		return Arming{Request: r, StartedAt: now.Add(-ago), FinishedAt: now.Add(-ago / 2)}
	}

	for _, tc := range []struct {
		name        string
		budgets     Budgets
		state       []Arming
		want        []Request
		wantAdmit   []string
		wantRefused []string // "name: reason [until]"
	}{
		{
			name:      "zero budgets admit one arming per node",
			want:      []Request{bait("p", "n2"), bait("p", "n1"), bait("q", "n1")},
			wantAdmit: []string{"p-n1-bait", "p-n2-bait"},
			// q's request on n1 comes after p's, by policy.
			wantRefused: []string{"q-n1-bait: node_busy"},
		},
		{
			name:        "the fleet limit counts the active armings of every policy",
			budgets:     Budgets{MaxConcurrentPerFleet: 3},
			state:       []Arming{armed(bait("q", "n9"), time.Hour), armed(bait("r", "n8"), time.Hour), done(bait("q", "n7"), time.Hour)},
			want:        []Request{bait("p", "n1"), bait("p", "n2")},
			wantAdmit:   []string{"p-n1-bait"},
			wantRefused: []string{"p-n2-bait: fleet_concurrency"},
		},
		{
			name:        "a node with an active arming is busy, however old",
			budgets:     Budgets{PerNodeCooldown: time.Minute},
			state:       []Arming{armed(bait("q", "n1"), 24*time.Hour)},
			want:        []Request{bait("p", "n1")},
			wantRefused: []string{"p-n1-bait: node_busy"},
		},
		{
			name:        "the cooldown counts from the last start, finished or not",
			budgets:     Budgets{PerNodeCooldown: 10 * time.Minute},
			state:       []Arming{done(bait("q", "n1"), 20*time.Minute), done(bait("q", "n1-again"), 4*time.Minute), done(bait("r", "n2"), 10*time.Minute)},
			want:        []Request{bait("p", "n1"), bait("p", "n1-again"), bait("p", "n2")},
			wantAdmit:   []string{"p-n1-bait", "p-n2-bait"},
			wantRefused: []string{"p-n1-again-bait: node_cooldown until 12:06"},
		},
		{
			name:    "the pattern budget is a sliding hour, finished armings included",
			budgets: Budgets{MaxPerPatternPerHour: 2},
			state: []Arming{
				done(alert("n7", "a0", "pat", 0), time.Hour), // left the window exactly now
				done(alert("n8", "a1", "pat", 0), 59*time.Minute),
				done(alert("n9", "a1", "other", 0), time.Minute),
			},
			want:        []Request{alert("n1", "a2", "pat", 0), alert("n2", "a2", "pat", 1), alert("n3", "a3", "other", 0)},
			wantAdmit:   []string{"p-n1-a2", "p-n3-a3"},
			wantRefused: []string{"p-n2-a2: pattern_per_hour until 12:01"},
		},
		{
			name:      "bait has no pattern and is not counted by pattern",
			budgets:   Budgets{MaxPerPatternPerHour: 1},
			state:     []Arming{done(bait("p", "n9"), time.Minute), done(bait("p", "n8"), time.Minute)},
			want:      []Request{bait("p", "n1"), bait("p", "n2")},
			wantAdmit: []string{"p-n1-bait", "p-n2-bait"},
		},
		{
			name:        "alert armings go before bait, then by alert key and priority",
			budgets:     Budgets{MaxConcurrentPerFleet: 2},
			want:        []Request{bait("a", "n1"), alert("n5", "k2", "pat", 0), alert("n4", "k1", "pat", 1), alert("n3", "k1", "pat", 0)},
			wantAdmit:   []string{"p-n3-k1", "p-n4-k1"},
			wantRefused: []string{"p-n5-k2: fleet_concurrency", "a-n1-bait: fleet_concurrency"},
		},
		{
			name:        "an arming of the same name is a duplicate, in the state or in the request",
			state:       []Arming{done(bait("p", "n1"), time.Hour)},
			want:        []Request{bait("p", "n1"), bait("p", "n2"), bait("p", "n2")},
			wantAdmit:   []string{"p-n2-bait"},
			wantRefused: []string{"p-n1-bait: duplicate", "p-n2-bait: duplicate"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admit, refused := Admit(tc.budgets, tc.state, tc.want, now)
			if diff := cmp.Diff(tc.wantAdmit, requestNames(admit)); diff != "" {
				t.Errorf("admitted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRefused, refusalStrings(refused)); diff != "" {
				t.Errorf("refused (-want +got):\n%s", diff)
			}
		})
	}
}

func requestNames(rs []Request) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return out
}

func refusalStrings(rs []Refusal) []string {
	var out []string
	for _, r := range rs {
		s := r.Name + ": " + string(r.Reason)
		if !r.Until.IsZero() {
			s += " until " + r.Until.Format("15:04")
		}
		out = append(out, s)
	}
	return out
}

// TestAdmitIgnoresTheOrderOfRequests shuffles the same requests many times
// under tight budgets: the admitted and refused lists never change.
func TestAdmitIgnoresTheOrderOfRequests(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	b := Budgets{MaxConcurrentPerFleet: 7, PerNodeCooldown: time.Minute, MaxPerPatternPerHour: 3}
	var want []Request
	for i := range 40 {
		r := Request{PolicyID: fmt.Sprintf("p%d", i%3), Node: fmt.Sprintf("n%d", i%11), Reason: ReasonBait, Priority: i}
		if i%2 == 0 {
			r.Reason, r.AlertKey, r.PatternKey = ReasonAlert, fmt.Sprintf("a%d", i%4), fmt.Sprintf("pat%d", i%2)
		}
		r.Name = ArmingName(r.PolicyID, r.Node, 0, r.Reason, r.AlertKey)
		want = append(want, r)
	}
	state := []Arming{{Request: Request{Name: "old", Node: "n3", PatternKey: "pat0"}, StartedAt: now.Add(-30 * time.Second)}}
	admit, refused := Admit(b, state, want, now)
	if len(admit) == 0 || len(refused) == 0 {
		t.Fatalf("admitted %d, refused %d: the budgets should cut the list, not empty it", len(admit), len(refused))
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 50 {
		shuffled := slices.Clone(want)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		a, f := Admit(b, state, shuffled, now)
		if diff := cmp.Diff(admit, a); diff != "" {
			t.Fatalf("admitted (-first +shuffled):\n%s", diff)
		}
		if diff := cmp.Diff(refused, f); diff != "" {
			t.Fatalf("refused (-first +shuffled):\n%s", diff)
		}
	}
}
