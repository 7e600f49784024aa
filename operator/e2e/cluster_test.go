package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/nodecapture"
	"github.com/spikehunt/spikehunt/internal/alertsig"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/operator/internal/alertintake"
	"github.com/spikehunt/spikehunt/operator/internal/controller"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

var (
	configDir = filepath.Join("..", "config")
	crdDir    = filepath.Join(configDir, "crd", "bases")
	rbacDir   = filepath.Join(configDir, "rbac")
)

// systemNamespace is where operator/config/rbac puts both ServiceAccounts.
const systemNamespace = "spikehunt-system"

// cluster is the API server with the CRDs and operator/config/rbac
// applied: an admin client that plays kubectl, and the operator's and the
// agent's identities, each its ServiceAccount, so that the loop closes
// only if the manifests' least-privilege RBAC is enough for it.
type cluster struct {
	admin    client.Client
	operator *rest.Config
	agent    *rest.Config
	scheme   *runtime.Scheme
}

// alertKey is the detector's alert signing key shared by the pipeline's
// publisher and the operator's intake, as the chart's Secret shares it.
var alertKey = alertsig.Key{ID: "e2e", Secret: []byte("e2e-alert-signing-key-0123456789abcdef")}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	cfg, _ := testenv.SharedAPIServer(t)
	testenv.InstallCRDs(t, cfg, crdDir)
	s, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	objs := append([]client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}}, testenv.Manifests(t, s, rbacDir)...)
	for _, obj := range objs {
		if err := admin.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("apply %T %s: %v", obj, obj.GetName(), err)
		}
	}
	return &cluster{admin: admin, scheme: s,
		operator: testenv.AsServiceAccount(cfg, systemNamespace, "spikehunt-operator"), agent: testenv.AsServiceAccount(cfg, systemNamespace, "spikehunt-agent")}
}

// operatorConfig is what the test's operator runs with.
type operatorConfig struct {
	store      store.Store
	brokers    []string
	alertTopic string
	group      string
	log        *slog.Logger
}

// startOperator runs the operator as cmd/main.go would once it registers
// its controllers: one manager, as the operator's ServiceAccount, with the
// CapturePolicy controller fed by the alert inbox, the Capture controller
// indexing into the store, and the Kafka alert intake as a Runnable that
// needs the leader's lease (the intake package's "Lifecycle hazards"). It
// stops when the test ends.
func (c *cluster) startOperator(t *testing.T, o operatorConfig) {
	t.Helper()
	skip := true
	mgr, err := ctrl.NewManager(c.operator, ctrl.Options{
		Scheme:                 c.scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// -count=2 runs a second manager in the process: controller
		// names are unique per process otherwise.
		Controller: config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		t.Fatal(err)
	}
	inbox := controller.NewAlertInbox(mgr.GetClient(), controller.AlertInboxConfig{})
	if err := (&controller.CapturePolicyReconciler{Alerts: inbox}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	// Index retries every second (default 30 s) so that the test sees the
	// detector's pass linked within one; it gives up well after the test's
	// own deadlines.
	if err := (&controller.CaptureReconciler{Store: o.store, IndexRetry: time.Second, IndexWait: 5 * time.Minute}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	consumer, err := alertintake.NewKafkaConsumer(alertintake.KafkaConfig{
		Brokers: o.brokers, Topic: o.alertTopic, Group: o.group, SessionTimeout: 6 * time.Second,
		Keys: []alertsig.Key{alertKey},
	}, alertintake.PolicySink(inbox.Offer), o.log.With("component", "intake"))
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(manager.RunnableFunc(consumer.Run)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("operator: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("the operator did not stop within 30 s")
		}
	})
}

// startAgent runs the node's Capture watcher over eng as the agent's
// ServiceAccount; it stops (disarming what it armed) when the test ends,
// before eng is closed.
func (c *cluster) startAgent(t *testing.T, node string, eng *capture.Engine, log *slog.Logger) {
	t.Helper()
	w, err := nodecapture.New(nodecapture.Config{Node: node, REST: c.agent, Engine: eng, Log: log.With("component", "nodecapture")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("the agent's watcher did not stop within 30 s")
		}
	})
}

// captures lists ns's Captures from the API server.
func (c *cluster) captures(t *testing.T, ns string) []v1alpha1.Capture {
	t.Helper()
	var list v1alpha1.CaptureList
	if err := c.admin.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// dumpOnFailure logs ns's CapturePolicies and Captures, status and
// conditions included, if t fails.
func (c *cluster) dumpOnFailure(t *testing.T, ns string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx := context.Background()
		var pols v1alpha1.CapturePolicyList
		var caps v1alpha1.CaptureList
		for _, l := range []client.ObjectList{&pols, &caps} {
			if err := c.admin.List(ctx, l, client.InNamespace(ns)); err != nil {
				t.Logf("list %T: %v", l, err)
				return
			}
		}
		for _, p := range pols.Items {
			b, _ := json.MarshalIndent(p.Status, "", "  ")
			t.Logf("CapturePolicy %s/%s status:\n%s", p.Namespace, p.Name, b)
		}
		for _, c := range caps.Items {
			b, _ := json.MarshalIndent(struct {
				Spec   v1alpha1.CaptureSpec   `json:"spec"`
				Status v1alpha1.CaptureStatus `json:"status"`
			}{c.Spec, c.Status}, "", "  ")
			t.Logf("Capture %s/%s:\n%s", c.Namespace, c.Name, b)
		}
		if len(caps.Items) == 0 {
			t.Logf("no Capture in namespace %s", ns)
		}
	})
}

// eventually polls cond every 100 ms until it returns nil, and fails t
// with cond's last error after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// consistently fails t if cond returns an error within d (checked every
// 100 ms).
func consistently(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := cond(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// phaseOrder ranks the phases a capture goes through on the way to
// Indexed; Failed and Expired are not on it.
var phaseOrder = map[v1alpha1.CapturePhase]int{"": 0, v1alpha1.PhasePending: 0, v1alpha1.PhaseArmed: 1,
	v1alpha1.PhaseFired: 2, v1alpha1.PhaseUploaded: 3, v1alpha1.PhaseIndexed: 4}

// reached is a condition for eventually: the Capture key is in phase or
// past it (into out), failing t at once when it failed or expired.
func (c *cluster) reached(t *testing.T, key client.ObjectKey, phase v1alpha1.CapturePhase, out *v1alpha1.Capture) func() error {
	return func() error {
		var got v1alpha1.Capture
		if err := c.admin.Get(context.Background(), key, &got); err != nil {
			return err
		}
		*out = got
		rank, ok := phaseOrder[got.Status.Phase]
		if !ok {
			t.Fatalf("capture %s ended %s on the way to %s: %s", key, got.Status.Phase, phase, got.Status.Message)
		}
		if rank >= phaseOrder[phase] {
			return nil
		}
		return fmt.Errorf("capture %s is %q: %s", key, got.Status.Phase, got.Status.Message)
	}
}
