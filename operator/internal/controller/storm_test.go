package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// budgetWatch replays every change to the fleet's Captures, in the API
// server's order, and checks the budgets after each: the state after an
// event is a state the cluster was in, so nothing between two polls is
// missed.
type budgetWatch struct {
	budgets policy.Budgets

	mu         sync.Mutex
	captures   map[string]*v1alpha1.Capture // namespace/name
	maxActive  int
	events     int
	violations []string
}

func (w *budgetWatch) apply(typ watch.EventType, c *v1alpha1.Capture) {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := c.Namespace + "/" + c.Name
	if typ == watch.Deleted {
		delete(w.captures, key)
	} else {
		w.captures[key] = c
	}
	w.events++
	nActive := 0
	activeOn := map[string]int{}
	starts := map[string][]time.Time{}
	perPattern := map[string]int{}
	for _, x := range w.captures {
		if active(x.Status.Phase) {
			nActive++
			activeOn[x.Spec.NodeName]++
		}
		starts[x.Spec.NodeName] = append(starts[x.Spec.NodeName], startedAt(x))
		if x.Spec.PatternID != "" {
			perPattern[x.Spec.PatternID]++ // the test lasts less than the hour
		}
	}
	w.maxActive = max(w.maxActive, nActive)
	fail := func(format string, args ...any) {
		if len(w.violations) < 20 {
			w.violations = append(w.violations, fmt.Sprintf("after event %d (%s %s): ", w.events, typ, c.Name)+fmt.Sprintf(format, args...))
		}
	}
	if nActive > w.budgets.MaxConcurrentPerFleet {
		fail("%d captures active, budget %d", nActive, w.budgets.MaxConcurrentPerFleet)
	}
	for node, n := range activeOn {
		if n > 1 {
			fail("%d captures active on node %s", n, node)
		}
	}
	for node, ts := range starts {
		for i := range ts {
			for j := range i {
				if d := ts[i].Sub(ts[j]).Abs(); d < w.budgets.PerNodeCooldown {
					fail("two captures started on node %s %s apart, cooldown %s", node, d, w.budgets.PerNodeCooldown)
				}
			}
		}
	}
	for p, n := range perPattern {
		if n > w.budgets.MaxPerPatternPerHour {
			fail("%d captures of pattern %s in the hour, budget %d", n, p, w.budgets.MaxPerPatternPerHour)
		}
	}
}

// watchBudgets lists and then watches every Capture in the cluster until
// ctx ends.
func (e *env) watchBudgets(t *testing.T, ctx context.Context, b policy.Budgets) (*budgetWatch, <-chan struct{}) {
	t.Helper()
	w := &budgetWatch{budgets: b, captures: map[string]*v1alpha1.Capture{}}
	var list v1alpha1.CaptureList
	if err := e.admin.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		w.apply(watch.Added, &list.Items[i])
	}
	wi, err := e.admin.Watch(ctx, &v1alpha1.CaptureList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer wi.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-wi.ResultChan():
				if !ok {
					w.mu.Lock()
					w.violations = append(w.violations, "the watch ended early")
					w.mu.Unlock()
					return
				}
				if c, ok := ev.Object.(*v1alpha1.Capture); ok {
					w.apply(ev.Type, c)
				}
			}
		}
	}()
	return w, done
}

// TestAlertStormNeverExceedsABudget pushes 1,000 alerts a second for 10 s
// into the operator's alert source, for two policies that both match them,
// over 200 nodes, while a test agent arms what is created and ends it
// (Failed or Uploaded) a little later so that the budgets fill and empty.
// A watch replays every change to the Captures and checks after each one:
// never more than maxConcurrentPerFleet active, never two active on a
// node, never two started on a node within the cooldown, never more than
// maxPerPatternPerHour for a pattern. The storm does arm captures.
func TestAlertStormNeverExceedsABudget(t *testing.T) {
	runAlertStorm(t, "st", func(t *testing.T, op *operator) stormSource {
		return stormSource{send: func(batch []policy.Alert) { op.offer(t, batch...) }}
	})
}

// stormSource is how the storm's alerts reach the operator: send hands on
// one batch; drain, when set, waits until all that was sent was offered.
type stormSource struct {
	send  func([]policy.Alert)
	drain func()
	// slack is how much longer than the storm's 10 s its sending may
	// take for reasons of the source itself: a source that produces to a
	// real broker waits for its acknowledgements, which a busy machine
	// delays; what the bar catches is a source the operator blocks.
	slack time.Duration
}

// runAlertStorm is the storm of TestAlertStormNeverExceedsABudget over
// the nodes <prefix>-<i>, through the source connect makes once the
// operator runs. It returns the Captures at the end.
func runAlertStorm(t *testing.T, prefix string, connect func(*testing.T, *operator) stormSource) map[string]*v1alpha1.Capture {
	e := newEnv(t)
	nodes := fleet(prefix, 200, "gen4", "gen5", "arm", "gpu")
	e.createNodes(t, nodes)
	budgets := v1alpha1.Budgets{MaxConcurrentPerFleet: 12, PerNodeCooldown: dur(30 * time.Minute), MaxPerPatternPerHour: 6}
	op := e.startOperator(t, operatorOptions{})
	src := connect(t, op)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bw, watchDone := e.watchBudgets(t, ctx, budgetsOf(budgets))

	for _, name := range []string{"billy", "billy-canary"} {
		pol := e.basePolicy(name, prefix)
		pol.Spec.Sampling = v1alpha1.Sampling{Count: ptr[int32](4), RotationPeriod: dur(time.Hour)}
		pol.Spec.Triggers.FleetAlerts.WidenBy = ptr[int32](3)
		pol.Spec.Budgets = budgets
		e.create(t, pol)
	}

	// The test agent: arm what appears, end it 300–800 ms later.
	var agentWG sync.WaitGroup
	agentWG.Go(func() { e.stormAgent(t, ctx) })

	// The storm: 10 alerts every 10 ms, each a new alert id, about 20
	// patterns, naming 3 hosts and sometimes hardware classes.
	rng := rand.New(rand.NewPCG(1, 2))
	classes := []string{"gen4", "gen5", "arm", "gpu"}
	start := time.Now()
	offered := 0
	for tick := range 1000 {
		if d := time.Until(start.Add(time.Duration(tick) * 10 * time.Millisecond)); d > 0 {
			time.Sleep(d)
		}
		batch := make([]policy.Alert, 10)
		for i := range batch {
			a := policy.Alert{
				ID:           fmt.Sprintf("kafka/storm-%d", offered+i),
				Service:      "billy",
				PatternClass: "fleet-recurrent",
				PatternKey:   fmt.Sprintf("billy/p%d", rng.IntN(20)),
				Hosts:        []string{nodes[rng.IntN(len(nodes))].name, nodes[rng.IntN(len(nodes))].name, nodes[rng.IntN(len(nodes))].name},
			}
			if rng.IntN(2) == 0 {
				a.HWClasses = []string{classes[rng.IntN(len(classes))]}
			}
			batch[i] = a
		}
		src.send(batch)
		offered += len(batch)
	}
	elapsed := time.Since(start)
	t.Logf("offered %d alerts in %s (%.0f/s)", offered, elapsed.Round(time.Millisecond), float64(offered)/elapsed.Seconds())
	if elapsed > 11*time.Second+src.slack {
		t.Errorf("the storm took %s, want about 10 s: the alert source held it back", elapsed)
	}
	if src.drain != nil {
		src.drain()
	}

	time.Sleep(2 * time.Second) // the decisions after the last alert
	cancel()
	agentWG.Wait()
	<-watchDone

	bw.mu.Lock()
	defer bw.mu.Unlock()
	for _, v := range bw.violations {
		t.Error(v)
	}
	alerted := 0
	for _, c := range bw.captures {
		if c.Spec.Reason == v1alpha1.ReasonAlert {
			alerted++
		}
	}
	t.Logf("%d watch events, %d captures (%d for alerts), at most %d active at once", bw.events, len(bw.captures), alerted, bw.maxActive)
	if alerted == 0 {
		t.Error("the storm armed no capture")
	}
	if bw.maxActive != int(budgets.MaxConcurrentPerFleet) {
		t.Errorf("at most %d captures were active at once: the storm never filled the fleet's budget of %d", bw.maxActive, budgets.MaxConcurrentPerFleet)
	}
	limited := false
	for _, name := range []string{"billy", "billy-canary"} {
		limited = limited || meta.IsStatusConditionTrue(e.policy(t, name).Status.Conditions, v1alpha1.ConditionBudgetLimited)
	}
	if !limited {
		t.Error("no policy says BudgetLimited")
	}
	return bw.captures
}

// stormAgent arms new Captures and ends armed ones after a while, until
// ctx ends.
func (e *env) stormAgent(t *testing.T, ctx context.Context) {
	armedAt := map[string]time.Time{}
	rng := rand.New(rand.NewPCG(3, 4))
	for ctx.Err() == nil {
		var list v1alpha1.CaptureList
		if err := e.admin.List(ctx, &list); err != nil {
			if ctx.Err() == nil {
				t.Errorf("agent: %v", err)
			}
			return
		}
		now := time.Now()
		for i := range list.Items {
			c := &list.Items[i]
			switch c.Status.Phase {
			case "", v1alpha1.PhasePending:
				c.Status.Phase = v1alpha1.PhaseArmed
				armedAt[c.Name] = now.Add(time.Duration(300+rng.IntN(500)) * time.Millisecond)
			case v1alpha1.PhaseArmed:
				if now.Before(armedAt[c.Name]) {
					continue
				}
				if rng.IntN(2) == 0 {
					c.Status.Phase = v1alpha1.PhaseFailed
					c.Status.Message = "storm agent: gave up"
				} else {
					upload(c.Spec.ArmingID, now.Add(-2*time.Second), now, 0, 0)(&c.Status)
				}
			default:
				continue
			}
			// A conflict (the operator expired it) is fine: next round.
			_ = e.admin.Status().Update(ctx, c)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
