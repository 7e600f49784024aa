package demo

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/internal/vocab"
	"github.com/spikehunt/spikehunt/pipelines/cli/query"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
)

// The demo's step 4 arms captures the way the operator would: the
// CapturePolicy of operator/config/samples (checkout-offcpu), decided by
// internal/policy's Decide, the same pure function the CapturePolicy
// controller calls, over the simulated fleet as its nodes, with the
// detected pattern as the fleet alert. Decide samples the epoch's bait
// (policy.Sample), widens it for the alert (policy.Widen) and passes every
// arming through the budgets (policy.Admit). The fleet has no captures yet:
// the state is empty, so only the concurrency and per-pattern budgets can
// refuse.

// demoPolicyID stands for the policy's UID: it seeds the sample, so the
// same fleet gets the same bait in the same hour, run after run.
const demoPolicyID = "spikehunt-demo"

// demoSampling: 5% of the nodes, at least one per hardware class, dealt
// anew every hour.
var demoSampling = policy.Sampling{Percent: 5, RotationPeriod: time.Hour}

// demoBudgets are the CRD's defaults.
var demoBudgets = policy.Budgets{MaxConcurrentPerFleet: 20, PerNodeCooldown: 30 * time.Minute, MaxPerPatternPerHour: 6}

// demoWidenBy is how many nodes a matching pattern alert arms beyond the
// bait.
const demoWidenBy = 3

// demoTriggerCeiling bounds the request latency that fires a capture (see
// demoLatencyTrigger).
const demoTriggerCeiling = 500 * time.Millisecond

// fleetNodes is the simulated fleet as the policy's nodes.
func fleetNodes(cfg sim.Config) []policy.Node {
	hosts, _ := sim.Plan(cfg)
	nodes := make([]policy.Node, len(hosts))
	for i, h := range hosts {
		nodes[i] = policy.Node{Name: h.Name, HWClass: h.HWClass}
	}
	return nodes
}

// patternAlert is the fleet alert the detector publishes for a new pattern
// (pipelines/services/alerts), mapped as the operator's intake maps it: the
// pattern's class and id, its most affected hosts, and when its spike rate
// is skewed by hardware class, the classes that spike more often than the
// fleet, most skewed first.
func patternAlert(p query.Pattern) policy.Alert {
	a := policy.Alert{ID: "pattern-" + p.PatternID, Service: p.Service, PatternClass: p.Class, PatternKey: p.PatternID,
		Hosts: slices.Clone(p.TopHosts)}
	if slices.Contains(p.Modifiers, vocab.ModifierHWClassSkewed) {
		for _, c := range slices.Sorted(maps.Keys(p.HWClassSkew)) {
			if p.HWClassSkew[c] > 1 {
				a.HWClasses = append(a.HWClasses, c)
			}
		}
		slices.SortStableFunc(a.HWClasses, func(x, y string) int {
			switch dx, dy := p.HWClassSkew[x], p.HWClassSkew[y]; {
			case dx > dy:
				return -1
			case dx < dy:
				return 1
			}
			return 0
		})
	}
	return a
}

// decideCaptures is the policy's decision at now over nodes, with the first
// (most widespread) pattern as its alert.
func decideCaptures(service string, nodes []policy.Node, patterns []query.Pattern, now time.Time) (policy.Decision, []policy.Alert, error) {
	in := policy.Input{
		PolicyID: demoPolicyID, PolicyName: service + "-offcpu", Nodes: nodes,
		Sampling: demoSampling, Budgets: demoBudgets,
		Trigger: policy.AlertTrigger{Services: []string{service}, ExtraNodes: demoWidenBy},
		Now:     now,
	}
	if len(patterns) > 0 {
		in.Alerts = []policy.Alert{patternAlert(patterns[0])}
	}
	d, err := policy.Decide(in)
	return d, in.Alerts, err
}

// demoLatencyTrigger is the request latency that fires a capture: half the
// typical stall, within [100 ms, 500 ms].
func demoLatencyTrigger(typicalPeakMS float64) time.Duration {
	ms := max(100, min(float64(demoTriggerCeiling/time.Millisecond), typicalPeakMS/2))
	return time.Duration(ms) * time.Millisecond
}

// captureAdvice says which captures to arm, where, and how soon they
// should catch a spike: the policy's decision d over nodes, per hardware
// class.
func captureAdvice(patterns []query.Pattern, suspects []query.PatternSuspect, nodes []policy.Node, d policy.Decision, alerts []policy.Alert) []paragraph {
	if len(patterns) == 0 {
		return []paragraph{para("Nothing recurs: keep the detectors running; arm captures when a pattern appears.")}
	}
	p := patterns[0]
	var out []paragraph
	say := func(format string, a ...any) { out = append(out, para(fmt.Sprintf(format, a...))) }
	out = append(out, para("Arm perf flight recorders (cpu-clock at 99 Hz, sched_switch and sched_wakeup: on- and off-CPU time), fired by the",
		fmt.Sprintf("agent when a request passes %d ms. The operator's CapturePolicy decides where (internal/policy, run",
			demoLatencyTrigger(p.TypicalPeakMS).Milliseconds()),
		fmt.Sprintf("in-process): bait on %d%% of the hosts in every hardware class, dealt anew %s:",
			demoSampling.Percent, everyText(demoSampling.RotationPeriod))))
	classOf := make(map[string]string, len(nodes))
	for _, n := range nodes {
		classOf[n.Name] = n.HWClass
	}
	byClass := map[string][]string{}
	for _, n := range d.Selection.Nodes {
		byClass[classOf[n]] = append(byClass[classOf[n]], n)
	}
	for _, c := range d.Selection.Classes {
		say("  %s: %d of %d (%s)", classLabel(c.Class), c.Chosen, c.Nodes, nameSample(byClass[c.Class], 4))
	}

	// The alert's requests, admitted or not, in the order Widen preferred.
	var asked []policy.Request
	for _, a := range d.Create {
		if a.Reason == policy.ReasonAlert {
			asked = append(asked, a.Request)
		}
	}
	for _, r := range d.Refused {
		if r.Request.Reason == policy.ReasonAlert {
			asked = append(asked, r.Request)
		}
	}
	slices.SortFunc(asked, func(x, y policy.Request) int { return cmp.Compare(x.Priority, y.Priority) })
	widened := make([]string, len(asked))
	for i, r := range asked {
		widened[i] = r.Node
	}
	if len(alerts) > 0 {
		a := alerts[0]
		where := "in any class"
		if len(a.HWClasses) > 0 {
			where = "on " + query.AndList(a.HWClasses) + ", where the spikes are more frequent"
		}
		out = append(out, para(fmt.Sprintf("The %s pattern's alert asks for %d more %s,", p.Class, len(widened), where),
			fmt.Sprintf("its most affected hosts first: %s.", nameSample(widened, 6))))
	}
	head, outcome := budgetOutcome(d)
	out = append(out, para(head, outcome))

	if p.RecurrenceIntervalS > 0 {
		// Each armed host that is affected spikes once per interval at its
		// own phase: the first of them is expected after interval /
		// (armed + 1); a synchronized pattern spikes on all at once.
		armed := affectedArmed(p, d)
		every := time.Duration(p.RecurrenceIntervalS * float64(time.Second))
		wait := every / time.Duration(armed+1)
		if p.Class == vocab.ClassFleetSynchronized {
			wait = every
		}
		if armed == 0 {
			say("None of the armed hosts is one the pattern affects: no capture should be expected before the next rotation.")
		} else {
			say("With a spike every ~%s per host, the first capture should land within ~%s.", query.SpokenDuration(every), query.SpokenDuration(wait))
		}
	}
	for _, s := range suspects {
		switch {
		case s.Metric == "system.cpu.time" && s.Mode == "softirq", s.Metric == "spikehunt.softirqs":
			return append(out, para("Add the bpftrace softirq-duration histogram per CPU on the same hosts: how long each NET_RX run",
				"takes against the 100 µs line (the Linux view of the DPC-duration chart of the DPC flood, docs/field-stories.md)."))
		case strings.HasPrefix(s.Metric, "system.network."):
			return append(out, para("Check the interface's state and what feeds it (ip -s link; the switch port): a down interface",
				"still receiving is traffic the kernel handles and then drops."))
		case strings.HasPrefix(s.Metric, "system.disk."), strings.HasPrefix(s.Metric, "spikehunt.disk."):
			return append(out, para("Add ftrace block_rq_issue/block_rq_complete on the same hosts: it tells the device's time from",
				"time spent above it, in a filter layer."))
		}
	}
	return out
}

// budgetOutcome says what the budgets are, and what they let through.
func budgetOutcome(d policy.Decision) (head, outcome string) {
	var bait, alert int
	for _, a := range d.Create {
		if a.Reason == policy.ReasonAlert {
			alert++
		} else {
			bait++
		}
	}
	b := demoBudgets
	head = fmt.Sprintf("Budgets (%d at once in the fleet, %s between captures on a node, %d per pattern per hour):",
		b.MaxConcurrentPerFleet, query.SpokenDuration(b.PerNodeCooldown), b.MaxPerPatternPerHour)
	armed := fmt.Sprintf("%d bait and %d for the pattern", bait, alert)
	if len(d.Refused) == 0 {
		return head, fmt.Sprintf("all %d admitted, %s.", len(d.Create), armed)
	}
	type key struct {
		reason policy.Reason
		why    policy.RefusalReason
	}
	counts := map[key]int{}
	var order []key
	for _, r := range d.Refused {
		k := key{r.Request.Reason, r.Reason}
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	var parts []string
	for _, k := range order {
		what := "bait"
		if k.reason == policy.ReasonAlert {
			what = "for the pattern"
		}
		parts = append(parts, fmt.Sprintf("%d %s (%s)", counts[k], what, refusalText(k.why)))
	}
	return head, fmt.Sprintf("%d admitted, %s; refused %s.", len(d.Create), armed, query.AndList(parts))
}

func refusalText(r policy.RefusalReason) string {
	switch r {
	case policy.RefusedFleetConcurrency:
		return "the fleet's limit at once"
	case policy.RefusedPatternPerHour:
		return "the pattern's hourly limit"
	case policy.RefusedNodeCooldown:
		return "node in cooldown"
	case policy.RefusedNodeBusy:
		return "node busy"
	case policy.RefusedDuplicate:
		return "armed already"
	}
	return string(r)
}

// affectedArmed is how many of the admitted armings are on hosts the
// pattern affects: those it names for an isolated host, else the armings
// in proportion to the share of hosts affected (at least one).
func affectedArmed(p query.Pattern, d policy.Decision) int {
	if len(d.Create) == 0 {
		return 0
	}
	if p.Class == vocab.ClassIsolatedHost {
		n := 0
		for _, a := range d.Create {
			if slices.Contains(p.TopHosts, a.Node) {
				n++
			}
		}
		return n
	}
	return max(1, int(float64(len(d.Create))*p.HostsAffectedShare+0.5))
}

// nameSample lists up to n names, then how many more.
func nameSample(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// classLabel names a hardware class; "" is the class of nodes without one.
func classLabel(c string) string {
	if c == "" {
		return "no hw class"
	}
	return c
}

// everyText says "every hour" rather than "every 60 min".
func everyText(d time.Duration) string {
	if d == time.Hour {
		return "every hour"
	}
	return "every " + query.SpokenDuration(d)
}
