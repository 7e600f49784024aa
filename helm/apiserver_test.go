package helm_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// apiServer returns the shared API server with the chart's CRDs installed
// (for real: dry-run objects of a kind need the kind to exist) and an
// admin client that knows the capture types.
func apiServer(t *testing.T) (*rest.Config, client.Client, *runtime.Scheme) {
	t.Helper()
	cfg, _ := testenv.SharedAPIServer(t)
	// The chart's own CRDs, and the Prometheus Operator's PodMonitor, cut
	// down to what the chart writes (testdata/monitoring-crds), which the
	// optional PodMonitors need.
	testenv.InstallCRDs(t, cfg, filepath.Join(chartDir, "crds"), filepath.Join("testdata", "monitoring-crds"))
	s, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := capturev1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, c, s
}

// createNamespace makes a namespace for real with labels.
func createNamespace(ctx context.Context, t *testing.T, c client.Client, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// envtest runs no controller-manager, which would make each
	// namespace's default ServiceAccount; pods without one need it.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// podSecurityLabels are the namespace labels the chart recommends
// (namespace.podSecurityLabels).
func podSecurityLabels(t testing.TB, m manifest) map[string]string {
	t.Helper()
	if ns := m.ofKind("Namespace"); len(ns) == 1 {
		return ns[0].GetLabels()
	}
	// Rendered only with namespace.create; read the default from a render that has it.
	withNS := render(t, "spikehunt", valuesCase{name: "namespace", sets: []string{"namespace.create=true"}})
	labels := map[string]string{}
	for k, v := range withNS.ofKind("Namespace")[0].GetLabels() {
		if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
			labels[k] = v
		}
	}
	return labels
}

// TestTheAPIServerAcceptsTheChart installs the chart's CRDs, checks that
// they are established, and applies every object of each render with
// server-side dry-run (hooks included): validation, defaulting and
// admission all run, nothing is stored. The operator's sample
// CapturePolicy and Capture are valid against the chart's CRDs.
func TestTheAPIServerAcceptsTheChart(t *testing.T) {
	_, c, s := apiServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, name := range []string{"capturepolicies.capture.spikehunt.io", "captures.capture.spikehunt.io"} {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			t.Fatalf("CRD %s: %v", name, err)
		}
		established := false
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		if !established {
			t.Errorf("CRD %s is not established: %+v", name, crd.Status.Conditions)
		}
	}

	cases := append(valuesCases(t),
		valuesCase{name: "grafana", sets: []string{"grafana.enabled=true", "agent.sink=otlp"}},
		// CAP_SYS_ADMIN: the API server refuses it with allowPrivilegeEscalation: false.
		valuesCase{name: "legacy-kernel", sets: []string{"agent.legacyKernelCapabilities=true"}},
		valuesCase{name: "privileged", sets: []string{"agent.privileged=true"}},
		valuesCase{name: "everything-extra", files: []string{extrasValues(t)}},
	)
	for _, vc := range cases {
		t.Run(vc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ns := "dry-" + vc.name
			m := render(t, ns, vc)
			createNamespace(ctx, t, c, ns, podSecurityLabels(t, m))
			n := 0
			for _, o := range m.objs {
				obj := o.DeepCopy()
				if obj.GetKind() == "Namespace" {
					continue // created above, with the same labels
				}
				if namespaced(t, c.RESTMapper(), obj) {
					obj.SetNamespace(ns)
				}
				// Strict: a field the API server does not know is an error,
				// not a warning (a PodMonitor's is checked here, and only
				// here: it is no Kubernetes type for decodeTyped).
				if err := c.Create(ctx, obj, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
					t.Errorf("%s/%s: %v", obj.GetKind(), obj.GetName(), err)
				}
				n++
			}
			if n < 15 {
				t.Errorf("only %d objects applied", n)
			}
			for _, sample := range testenv.Manifests(t, s, filepath.Join("..", "operator", "config", "samples")) {
				sample.SetNamespace(ns)
				if err := c.Create(ctx, sample, client.DryRunAll); err != nil {
					t.Errorf("sample %s %s: %v", sample.GetObjectKind().GroupVersionKind().Kind, sample.GetName(), err)
				}
			}
		})
	}
}

func namespaced(t *testing.T, mapper meta.RESTMapper, o *unstructured.Unstructured) bool {
	t.Helper()
	gvk := o.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s: %v", gvk, err)
	}
	return mapping.Scope.Name() == meta.RESTScopeNameNamespace
}

// TestPodsMeetTheirPodSecurityLevel creates a Pod from each template with
// server-side dry-run, so that the API server's PodSecurity admission
// judges it: every pod but the agent's meets the restricted standard; the
// agent's is admitted under the labels the chart recommends and refused
// under baseline (which is why the namespace needs them).
func TestPodsMeetTheirPodSecurityLevel(t *testing.T) {
	_, c, _ := apiServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vc := valuesCase{name: "full+grafana", files: []string{filepath.Join(chartDir, "examples", "full.yaml")}, sets: []string{"grafana.enabled=true"}}
	m := render(t, "spikehunt", vc)

	levels := map[string]map[string]string{
		"psa-restricted":  {"pod-security.kubernetes.io/enforce": "restricted"},
		"psa-baseline":    {"pod-security.kubernetes.io/enforce": "baseline"},
		"psa-recommended": podSecurityLabels(t, m),
	}
	for ns, labels := range levels {
		createNamespace(ctx, t, c, ns, labels)
		for _, sa := range m.ofKind("ServiceAccount") {
			obj := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa.GetName(), Namespace: ns}}
			if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	}
	admitted := func(w workload, ns string) error {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "from-" + strings.ToLower(w.kind) + "-" + w.name, Namespace: ns, Labels: w.template.Labels},
			Spec: *w.template.Spec.DeepCopy()}
		return c.Create(ctx, pod, client.DryRunAll)
	}
	n := 0
	// The full example names a ClickHouse; the embedded store's pod is the
	// default install's.
	store := render(t, "spikehunt", valuesCase{name: "default"}).workload(t, fullname()+"-clickhouse")
	for _, w := range append(m.workloads(t), store) {
		if w.name == fullname()+"-agent" {
			if err := admitted(w, "psa-recommended"); err != nil {
				t.Errorf("the agent's pod is refused under the recommended labels %v: %v", levels["psa-recommended"], err)
			}
			if err := admitted(w, "psa-baseline"); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
				t.Errorf("the agent's pod under baseline: %v; want a PodSecurity refusal (else the chart could recommend baseline)", err)
			}
			continue
		}
		n++
		if err := admitted(w, "psa-restricted"); err != nil {
			t.Errorf("%s: refused in a restricted namespace: %v", w, err)
		}
	}
	if n < 7 {
		t.Errorf("only %d non-agent pods checked", n)
	}
}

// TestEachServiceAccountHasWhatItNeedsAndNoMore applies the chart's RBAC
// for real and acts as the agent's and the operator's ServiceAccounts.
func TestEachServiceAccountHasWhatItNeedsAndNoMore(t *testing.T) {
	cfg, c, s := apiServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns, other = "rbac", "rbac-other"
	createNamespace(ctx, t, c, ns, nil)
	createNamespace(ctx, t, c, other, nil)
	m := render(t, ns, valuesCase{name: "default"})
	for _, o := range m.objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		default:
			continue
		}
		obj := o.DeepCopy()
		if namespaced(t, c.RESTMapper(), obj) {
			obj.SetNamespace(ns)
		}
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("%s/%s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"spikehunt.io/hw-class": "gen5"}}}
	if err := c.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	policy := &capturev1alpha1.CapturePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "checkout", Namespace: other},
		Spec: capturev1alpha1.CapturePolicySpec{
			Service:  "checkout",
			Sampling: capturev1alpha1.Sampling{Count: new(int32(3))},
			Profile:  capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendPerf},
		},
	}
	if err := c.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	newCapture := func(name, node string) *capturev1alpha1.Capture {
		return &capturev1alpha1.Capture{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: other},
			Spec: capturev1alpha1.CaptureSpec{
				NodeName: node, PolicyRef: capturev1alpha1.PolicyReference{Name: "checkout"},
				ArmingID: name, Reason: capturev1alpha1.ReasonBait,
				Profile: capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendPerf},
			},
		}
	}
	armed := newCapture("armed-on-node-a", "node-a")
	if err := c.Create(ctx, armed); err != nil {
		t.Fatal(err)
	}
	as := func(sa string) client.WithWatch {
		cl, err := client.NewWithWatch(testenv.AsServiceAccount(cfg, ns, fullname()+"-"+sa), client.Options{Scheme: s})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	agent, operator := as("agent"), as("operator")
	testenv.CheckAccess(t, []testenv.Access{
		testenv.Attempt("the agent lists the Captures of its node, in any namespace", func() error {
			return agent.List(ctx, &capturev1alpha1.CaptureList{}, client.MatchingFields{"spec.nodeName": "node-a"})
		}, true),
		testenv.Attempt("the agent watches the Captures of its node", func() error {
			w, err := agent.Watch(ctx, &capturev1alpha1.CaptureList{}, client.MatchingFields{"spec.nodeName": "node-a"})
			if err == nil {
				w.Stop()
			}
			return err
		}, true),
		testenv.Attempt("the agent reports a Capture's status", func() error {
			cp := armed.DeepCopy()
			patch := client.MergeFrom(cp.DeepCopy())
			cp.Status.Phase = capturev1alpha1.PhaseArmed
			return agent.Status().Patch(ctx, cp, patch)
		}, true),
		testenv.Attempt("the agent reads its Node's labels", func() error {
			return agent.Get(ctx, client.ObjectKey{Name: "node-a"}, &corev1.Node{})
		}, true),
		testenv.Attempt("the agent cannot list Nodes", func() error { return agent.List(ctx, &corev1.NodeList{}) }, false),
		testenv.Attempt("the agent cannot change a Node", func() error {
			n := node.DeepCopy()
			patch := client.MergeFrom(n.DeepCopy())
			n.Labels["by"] = "agent"
			return agent.Patch(ctx, n, patch)
		}, false),
		testenv.Attempt("the agent cannot create a Capture", func() error { return agent.Create(ctx, newCapture("by-the-agent", "node-a")) }, false),
		testenv.Attempt("the agent cannot change a Capture's spec", func() error {
			cp := armed.DeepCopy()
			patch := client.MergeFrom(cp.DeepCopy())
			cp.Labels = map[string]string{"by": "agent"}
			return agent.Patch(ctx, cp, patch)
		}, false),
		testenv.Attempt("the agent cannot delete a Capture", func() error { return agent.Delete(ctx, armed.DeepCopy()) }, false),
		testenv.Attempt("the agent cannot read CapturePolicies", func() error { return agent.List(ctx, &capturev1alpha1.CapturePolicyList{}) }, false),
		testenv.Attempt("the agent cannot read Secrets", func() error { return agent.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)) }, false),
		// The pod watch (agents/podwatch) makes exactly these two requests.
		testenv.Attempt("the agent lists the Pods of its node, in every namespace", func() error {
			return agent.List(ctx, &corev1.PodList{}, client.MatchingFields{"spec.nodeName": "node-a"})
		}, true),
		testenv.Attempt("the agent watches the Pods of its node", func() error {
			w, err := agent.Watch(ctx, &corev1.PodList{}, client.MatchingFields{"spec.nodeName": "node-a"})
			if err == nil {
				w.Stop()
			}
			return err
		}, true),
		testenv.Attempt("the agent cannot create a Pod", func() error {
			return agent.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "by-the-agent", Namespace: other},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}})
		}, false),
		testenv.Attempt("the agent cannot delete Pods", func() error {
			return agent.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(other))
		}, false),
		testenv.Attempt("the operator lists Nodes", func() error { return operator.List(ctx, &corev1.NodeList{}) }, true),
		testenv.Attempt("the operator creates a Capture", func() error { return operator.Create(ctx, newCapture("by-the-operator", "node-b")) }, true),
		testenv.Attempt("the operator writes a CapturePolicy's status", func() error {
			p := policy.DeepCopy()
			patch := client.MergeFrom(p.DeepCopy())
			p.Status.Epoch = 7
			return operator.Status().Patch(ctx, p, patch)
		}, true),
		testenv.Attempt("the operator takes the leader Lease in the release namespace", func() error {
			return operator.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "operator.spikehunt.io", Namespace: ns}})
		}, true),
		testenv.Attempt("the operator cannot take a Lease elsewhere", func() error {
			return operator.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "operator.spikehunt.io", Namespace: other}})
		}, false),
		testenv.Attempt("the operator cannot read Secrets", func() error {
			return operator.List(ctx, &corev1.SecretList{}, client.InNamespace(ns))
		}, false),
		testenv.Attempt("the operator cannot create a CapturePolicy", func() error {
			p := policy.DeepCopy()
			p.ResourceVersion, p.Name = "", "by-the-operator"
			return operator.Create(ctx, p)
		}, false),
	})
}
