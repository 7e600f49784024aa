package controller

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/growth"
	"github.com/spikehunt/spikehunt/tests/testenv"
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
	f := measurePolicy(b, 5000)
	b.ReportMetric(f.perPolicy.Seconds()*1000, "operator.policy_5000_nodes_ms:ms")
}

// BenchmarkScaleOperator is `make bench-scale`'s operator stage at one
// fleet size: BenchmarkPolicy5000Nodes with SPIKEHUNT_BENCH_NODES nodes
// (default 5,000), so a tenth of them sampled. It reports the time from
// creating the policy to its last Capture existing, and this process's
// peak resident memory (VmHWM, reset by tests/growth.ResetPeak once the
// Nodes exist, so it is the operator's: its cache of the Nodes' metadata,
// its listing of the Captures, the decision; the API server and etcd are
// processes of their own, and the test's admin client is small beside
// the operator). One size per process.
func BenchmarkScaleOperator(b *testing.B) {
	n := 5000
	if v, err := strconv.Atoi(os.Getenv("SPIKEHUNT_BENCH_NODES")); err == nil && v > 0 {
		n = v
	}
	f := measurePolicy(b, n)
	b.ReportMetric(f.perPolicy.Seconds(), fmt.Sprintf("scale.operator_s_%d:s", n))
	b.ReportMetric(f.peakMiB, fmt.Sprintf("scale.operator_peak_mib_%d:MiB", n))
	b.ReportMetric(f.rssBeforeMiB, fmt.Sprintf("scale.operator_rss_before_mib_%d:MiB", n))
	b.ReportMetric(f.cacheSync.Seconds(), fmt.Sprintf("scale.operator_cache_sync_s_%d:s", n))
	b.ReportMetric(f.cpuS, fmt.Sprintf("scale.operator_cpu_s_%d:s", n))
	b.ReportMetric(f.apiCPUS, fmt.Sprintf("scale.operator_apiserver_cpu_s_%d:s", n))
}

// policyFigures are measurePolicy's: the mean time from creating a policy
// to all its Captures existing, the time the operator's cache took to hold
// every Node, the process's peak RSS from starting the operator, and the
// CPU seconds per policy of this process (the operator; the test's watch
// is small beside it) and of the API server and etcd (envtest's children)
// while the policies were measured.
type policyFigures struct {
	perPolicy, cacheSync  time.Duration
	peakMiB, rssBeforeMiB float64
	cpuS, apiCPUS         float64
}

// writeHeapProfile saves the live heap, the operator still running, to
// path (SPIKEHUNT_BENCH_HEAPPROFILE; go tool pprof -sample_index=inuse_space).
func writeHeapProfile(b *testing.B, path string) {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// cpuOf is the CPU seconds pids have used so far.
func cpuOf(pids ...int) float64 {
	var sum float64
	for _, p := range pids {
		u, s := testenv.ProcCPU(p)
		sum += u + s
	}
	return sum
}

// measurePolicy creates n labelled Nodes in four classes on envtest, starts
// the operator with its default client rate, and times b.N policies that
// sample 10% of them, each from its creation to every chosen Capture
// existing, as a watch on the API server sees them. Each policy's
// Captures and the policy are deleted afterwards, off the clock.
func measurePolicy(b *testing.B, n int) policyFigures {
	e := newEnv(b)
	api, err := growth.Children(0)
	if err != nil {
		b.Fatal(err)
	}
	self := os.Getpid()
	nodes := fleet("n", n, "gen4", "gen5", "arm", "gpu")
	e.createNodes(b, nodes)
	runtime.GC()
	before, err := growth.RSSMiB(0)
	if err != nil {
		b.Fatal(err)
	}
	if err := growth.ResetPeak(0); err != nil {
		b.Fatal(err)
	}
	// SPIKEHUNT_BENCH_MEMLIMIT_MIB gives this process (the operator) a Go
	// memory limit, as internal/memlimit gives the operator's pod; not
	// GOMEMLIMIT, which envtest's API server and etcd would inherit.
	if mib, err := strconv.Atoi(os.Getenv("SPIKEHUNT_BENCH_MEMLIMIT_MIB")); err == nil && mib > 0 {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(mib) << 20))
	}
	began := time.Now()
	op := e.startOperator(b, operatorOptions{})
	eventually(b, max(time.Minute, time.Duration(n)*2*time.Millisecond), "the operator's cache holding the nodes", func() error {
		list := nodeMetadataList()
		if err := op.client.List(context.Background(), list); err != nil {
			return err
		}
		if len(list.Items) != len(nodes) {
			return fmt.Errorf("%d nodes", len(list.Items))
		}
		return nil
	})

	cacheSync := time.Since(began)
	// The controller's workers start once all its watches have synced,
	// which may be after the Nodes' cache holds them: a policy that
	// selects no Node, decided and gone, is the sign they run, so the
	// clock below does not count the operator's start.
	warm := e.basePolicy("warm-up", "no-such-fleet")
	e.create(b, warm)
	eventually(b, time.Minute, "the policy controller deciding a first policy", func() error {
		if p := e.policy(b, warm.Name); p.Status.ObservedGeneration != p.Generation {
			return fmt.Errorf("status of generation %d, policy at %d", p.Status.ObservedGeneration, p.Generation)
		}
		return nil
	})
	e.clearPolicy(b, warm)

	var total time.Duration
	var cpu, apiCPU float64
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		// A generous bound: the operator creates at 500 a second.
		ctx, cancel := context.WithTimeout(context.Background(), max(2*time.Minute, time.Duration(n)*10*time.Millisecond))
		w, err := e.admin.Watch(ctx, &v1alpha1.CaptureList{}, client.InNamespace(e.ns))
		if err != nil {
			b.Fatal(err)
		}
		pol := e.basePolicy(fmt.Sprintf("bench-%d", i), "n")
		pol.Spec.Sampling.Percent = ptr[int32](10)
		pol.Spec.Budgets = v1alpha1.Budgets{MaxConcurrentPerFleet: 10000, PerNodeCooldown: dur(0), MaxPerPatternPerHour: 1000}
		b.StartTimer()

		start := time.Now()
		cpu0, api0 := cpuOf(self), cpuOf(api...)
		e.create(b, pol)
		want := (n + 9) / 10
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
		cpu += cpuOf(self) - cpu0
		apiCPU += cpuOf(api...) - api0

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
	b.StopTimer()
	peak, err := growth.PeakMiB(0)
	if err != nil {
		b.Fatal(err)
	}
	if path := os.Getenv("SPIKEHUNT_BENCH_HEAPPROFILE"); path != "" {
		writeHeapProfile(b, path)
	}
	return policyFigures{rssBeforeMiB: before, perPolicy: total / time.Duration(b.N), cacheSync: cacheSync, peakMiB: peak,
		cpuS: cpu / float64(b.N), apiCPUS: apiCPU / float64(b.N)}
}

// clearPolicy deletes a policy and its Captures (the running operator lets
// them go) and waits until they are gone.
func (e *env) clearPolicy(t testing.TB, pol *v1alpha1.CapturePolicy) {
	t.Helper()
	ctx := context.Background()
	if err := e.admin.Delete(ctx, pol); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Minute, "the captures gone", func() error {
		cs := e.captures(t)
		if len(cs) == 0 {
			return nil
		}
		undeleted := 0
		for _, c := range cs {
			if c.DeletionTimestamp.IsZero() {
				undeleted++
			}
		}
		// Deleting thousands in one request can outlast the API server's
		// request timeout (the stream is reset); what it deleted stays
		// deleted, so ask again for the rest. The deleted ones wait for
		// the operator to release their finalizer.
		if undeleted > 0 {
			if err := e.admin.DeleteAllOf(ctx, &v1alpha1.Capture{}, client.InNamespace(e.ns)); err != nil {
				return fmt.Errorf("%d captures left, %d not deleted: %w", len(cs), undeleted, err)
			}
		}
		return fmt.Errorf("%d captures left", len(cs))
	})
}
