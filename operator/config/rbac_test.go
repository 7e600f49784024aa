package config_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

const systemNamespace = "spikehunt-system"

// TestEachIdentityHasWhatItNeedsAndNoMore applies config/rbac to a real API
// server (RBAC authorization, as envtest runs it) and acts as the agent's
// and the operator's ServiceAccounts.
func TestEachIdentityHasWhatItNeedsAndNoMore(t *testing.T) {
	cfg, _ := testenv.SharedAPIServer(t)
	testenv.InstallCRDs(t, cfg, filepath.Join("crd", "bases"))
	s, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := capturev1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, ns := range []string{systemNamespace, "payments"} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, obj := range rbacObjects(t, s) {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatalf("apply %s %s: %v", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
	policy := &capturev1alpha1.CapturePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "checkout", Namespace: "payments"},
		Spec: capturev1alpha1.CapturePolicySpec{
			Service:  "checkout",
			Sampling: capturev1alpha1.Sampling{Count: new(int32(3))},
			Profile:  capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendPerf},
		},
	}
	if err := admin.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	newCapture := func(name, node string) *capturev1alpha1.Capture {
		return &capturev1alpha1.Capture{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "payments"},
			Spec: capturev1alpha1.CaptureSpec{
				NodeName: node, PolicyRef: capturev1alpha1.PolicyReference{Name: "checkout"},
				ArmingID: name, Reason: capturev1alpha1.ReasonBait,
				Profile: capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendPerf},
			},
		}
	}
	armed := newCapture("armed-on-node-a", "node-a")
	if err := admin.Create(ctx, armed); err != nil {
		t.Fatal(err)
	}

	agent := impersonate(t, cfg, s, "spikehunt-agent")
	operator := impersonate(t, cfg, s, "spikehunt-operator")
	testenv.CheckAccess(t, []testenv.Access{
		testenv.Attempt("the agent lists the Captures of its node", func() error {
			return agent.List(ctx, &capturev1alpha1.CaptureList{}, client.MatchingFields{"spec.nodeName": "node-a"})
		}, true),
		testenv.Attempt("the agent watches the Captures of its node", func() error {
			w, err := agent.Watch(ctx, &capturev1alpha1.CaptureList{}, client.MatchingFields{"spec.nodeName": "node-a"})
			if err == nil {
				w.Stop()
			}
			return err
		}, true),
		testenv.Attempt("the agent gets a Capture", func() error {
			return agent.Get(ctx, client.ObjectKeyFromObject(armed), &capturev1alpha1.Capture{})
		}, true),
		testenv.Attempt("the agent reports a Capture's status", func() error {
			c := armed.DeepCopy()
			patch := client.MergeFrom(c.DeepCopy())
			c.Status.Phase = capturev1alpha1.PhaseArmed
			return agent.Status().Patch(ctx, c, patch)
		}, true),
		testenv.Attempt("the agent cannot create a Capture", func() error {
			return agent.Create(ctx, newCapture("by-the-agent", "node-a"))
		}, false),
		testenv.Attempt("the agent cannot change a Capture's spec", func() error {
			c := armed.DeepCopy()
			patch := client.MergeFrom(c.DeepCopy())
			c.Labels = map[string]string{"by": "agent"}
			return agent.Patch(ctx, c, patch)
		}, false),
		testenv.Attempt("the agent cannot delete a Capture", func() error {
			return agent.Delete(ctx, armed.DeepCopy())
		}, false),
		testenv.Attempt("the agent cannot read CapturePolicies", func() error {
			return agent.List(ctx, &capturev1alpha1.CapturePolicyList{})
		}, false),
		testenv.Attempt("the agent cannot read Secrets", func() error {
			return agent.List(ctx, &corev1.SecretList{}, client.InNamespace(systemNamespace))
		}, false),
		testenv.Attempt("the agent cannot list Nodes", func() error {
			return agent.List(ctx, &corev1.NodeList{})
		}, false),
		testenv.Attempt("the operator lists Nodes", func() error {
			return operator.List(ctx, &corev1.NodeList{})
		}, true),
		testenv.Attempt("the operator creates a Capture", func() error {
			return operator.Create(ctx, newCapture("by-the-operator", "node-b"))
		}, true),
		testenv.Attempt("the operator deletes a Capture", func() error {
			return operator.Delete(ctx, newCapture("by-the-operator", "node-b"))
		}, true),
		testenv.Attempt("the operator writes a CapturePolicy's status", func() error {
			p := policy.DeepCopy()
			patch := client.MergeFrom(p.DeepCopy())
			p.Status.Epoch = 7
			return operator.Status().Patch(ctx, p, patch)
		}, true),
		testenv.Attempt("the operator takes the leader Lease in its namespace", func() error {
			return operator.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "operator.spikehunt.io", Namespace: systemNamespace}})
		}, true),
		testenv.Attempt("the operator cannot take a Lease in another namespace", func() error {
			return operator.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "operator.spikehunt.io", Namespace: "payments"}})
		}, false),
		testenv.Attempt("the operator cannot read Secrets", func() error {
			return operator.List(ctx, &corev1.SecretList{}, client.InNamespace(systemNamespace))
		}, false),
		testenv.Attempt("the operator cannot create a CapturePolicy", func() error {
			p := policy.DeepCopy()
			p.ResourceVersion, p.Name = "", "by-the-operator"
			return operator.Create(ctx, p)
		}, false),
	})
}

// rbacObjects decodes every object in config/rbac.
func rbacObjects(t *testing.T, s *runtime.Scheme) []client.Object {
	t.Helper()
	objs := testenv.Manifests(t, s, "rbac")
	if len(objs) < 8 {
		t.Fatalf("config/rbac has %d objects; want both ServiceAccounts, their roles and bindings", len(objs))
	}
	return objs
}

// impersonate returns a client acting as the ServiceAccount sa in
// spikehunt-system, with the groups a real token of it would carry.
func impersonate(t *testing.T, cfg *rest.Config, s *runtime.Scheme, sa string) client.WithWatch {
	t.Helper()
	c, err := client.NewWithWatch(testenv.AsServiceAccount(cfg, systemNamespace, sa), client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
