package policy

import (
	"fmt"
	"testing"
	"time"
)

// benchInput is one policy's reconcile over 5,000 labelled nodes in four
// classes, 10% bait, with the armings of its previous decision and those
// of another policy in State, and 20 matching alerts.
func benchInput(b *testing.B) Input {
	nodes := testFleet(classSize{"gen4", 3000}, classSize{"gen5", 1200}, classSize{"gen6", 600}, classSize{"arm1", 200})
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	in := Input{
		PolicyID: "uid-billy", PolicyName: "billy", Nodes: nodes,
		Sampling: Sampling{Percent: 10, RotationPeriod: time.Hour},
		Budgets:  Budgets{MaxConcurrentPerFleet: 600, PerNodeCooldown: 10 * time.Minute, MaxPerPatternPerHour: 20},
		Trigger:  AlertTrigger{ExtraNodes: 5},
		Now:      now.Add(-2 * time.Hour),
	}
	other := in
	other.PolicyID, other.PolicyName, other.Sampling = "uid-search", "search", Sampling{Count: 50, RotationPeriod: time.Hour}
	d, err := Decide(in)
	if err != nil {
		b.Fatal(err)
	}
	in.State = apply(nil, d, in.Now)
	if d, err = Decide(other); err != nil {
		b.Fatal(err)
	}
	in.State = apply(in.State, d, in.Now)
	in.Now = now
	for i := range 20 {
		in.Alerts = append(in.Alerts, Alert{
			ID: fmt.Sprintf("pattern-%d", i), Service: "billy", PatternClass: "fleet-recurrent",
			PatternKey: fmt.Sprintf("billy/%d", i%4), Hosts: []string{nodes[i*7].Name, nodes[i*13].Name},
			HWClasses: []string{"gen5"},
		})
	}
	return in
}

// BenchmarkDecide5000Nodes is the pure share of operator.policy_5000_nodes_ms:
// one Decide over 5,000 nodes (a new epoch: the previous sample expires,
// 500 bait and 100 alert armings are proposed and admitted).
func BenchmarkDecide5000Nodes(b *testing.B) {
	in := benchInput(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decide(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSample5000Nodes is the sampling alone.
func BenchmarkSample5000Nodes(b *testing.B) {
	in := benchInput(b)
	b.ReportAllocs()
	for b.Loop() {
		Sample(in.PolicyID, in.Nodes, in.Sampling, in.Now)
	}
}
