package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/operator/policy"
)

// BenchmarkPolicy5000Nodes is `make bench-operator`: 5,000 labelled Nodes in
// four hardware classes on envtest, the operator running with its default
// client rate; from creating a policy that samples 10% of them (budgets
// wide enough for all) to every one of the 500 chosen Captures existing,
// as a watch on the API server sees them. Each iteration deletes its
// Captures and its policy afterwards, off the clock.
//
// Reports operator.policy_5000_nodes_ms (ms, mean per policy).
func BenchmarkPolicy5000Nodes(b *testing.B) {
	e := newEnv(b)
	nodes := fleet("n", 5000, "gen4", "gen5", "arm", "gpu")
	e.createNodes(b, nodes)
	op := e.startOperator(b, operatorOptions{})
	eventually(b, 60*time.Second, "the operator's cache holding the nodes", func() error {
		list := nodeMetadataList()
		if err := op.client.List(context.Background(), list); err != nil {
			return err
		}
		if len(list.Items) != len(nodes) {
			return fmt.Errorf("%d nodes", len(list.Items))
		}
		return nil
	})

	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		w, err := e.admin.Watch(ctx, &v1alpha1.CaptureList{}, client.InNamespace(e.ns))
		if err != nil {
			b.Fatal(err)
		}
		pol := e.basePolicy(fmt.Sprintf("bench-%d", i), "n")
		pol.Spec.Sampling.Percent = ptr[int32](10)
		pol.Spec.Budgets = v1alpha1.Budgets{MaxConcurrentPerFleet: 10000, PerNodeCooldown: dur(0), MaxPerPatternPerHour: 1000}
		b.StartTimer()

		start := time.Now()
		e.create(b, pol)
		const want = 500
		seen := map[string]string{}
		for len(seen) < want {
			if w == nil {
				// The API server ends a watch that falls behind a burst of
				// events; list what exists and watch on from there.
				var list v1alpha1.CaptureList
				if err := e.admin.List(ctx, &list, client.InNamespace(e.ns)); err != nil {
					b.Fatal(err)
				}
				for _, c := range list.Items {
					if c.Spec.PolicyRef.Name == pol.Name {
						seen[c.Name] = c.Spec.NodeName
					}
				}
				if w, err = e.admin.Watch(ctx, &v1alpha1.CaptureList{}, client.InNamespace(e.ns),
					&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}}); err != nil {
					b.Fatal(err)
				}
				continue
			}
			ev, ok := <-w.ResultChan()
			if !ok {
				w = nil
				continue
			}
			if c, ok := ev.Object.(*v1alpha1.Capture); ok && ev.Type == watch.Added && c.Spec.PolicyRef.Name == pol.Name {
				seen[c.Name] = c.Spec.NodeName
			}
		}
		elapsed := time.Since(start)
		total += elapsed

		b.StopTimer()
		if w != nil {
			w.Stop()
		}
		cancel()
		sel := policy.Sample(string(pol.UID), policyNodes(nodes), samplingOf(pol.Spec.Sampling), e.clock.Now())
		var got []string
		for _, n := range seen {
			got = append(got, n)
		}
		slices.Sort(got)
		if !slices.Equal(got, sel.Nodes) {
			b.Fatalf("captures on %d nodes, not the %d sampled", len(got), len(sel.Nodes))
		}
		b.Logf("policy %d: %d captures in %s", i, len(seen), elapsed.Round(time.Millisecond))
		e.clearPolicy(b, pol)
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "operator.policy_5000_nodes_ms:ms")
}

// clearPolicy deletes a policy and its Captures (the running operator lets
// them go) and waits until they are gone.
func (e *env) clearPolicy(t testing.TB, pol *v1alpha1.CapturePolicy) {
	t.Helper()
	ctx := context.Background()
	if err := e.admin.Delete(ctx, pol); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.DeleteAllOf(ctx, &v1alpha1.Capture{}, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the captures gone", func() error {
		if n := len(e.captures(t)); n > 0 {
			return fmt.Errorf("%d captures left", n)
		}
		return nil
	})
}
