package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/agents/capture/perf"
	"github.com/spikehunt/spikehunt/agents/client"
	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The agent binary, pointed at an API server with --capture.kube.kubeconfig,
// arms its node's Capture, fires it on an app's slow request that reaches
// it through the line protocol, reports it Uploaded, and on SIGINT
// disarms the one still armed and says so. (agents/nodecapture's tests
// run the same as the agent's least-privilege ServiceAccount.)
func TestTheAgentArmsItsNodesCapturesFromTheAPIServer(t *testing.T) {
	if err := perf.New(perf.Config{}).Check(); err != nil || os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "perf as root", err)
	}
	cfg, _ := testenv.SharedAPIServer(t)
	testenv.InstallCRDs(t, cfg, filepath.Join("..", "..", "..", "operator", "config", "crd", "bases"))
	s, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := capturev1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	admin, err := ctrlclient.New(cfg, ctrlclient.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "shop"
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	p := startAgent(t, []string{"127.0.0.1:1"}, t.TempDir(), "--capture.backends", "perf",
		"--capture.kube.kubeconfig", writeKubeconfig(t, cfg))
	newCapture := func(name string, trigger *capturev1alpha1.LocalTrigger) {
		t.Helper()
		c := &capturev1alpha1.Capture{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: capturev1alpha1.CaptureSpec{NodeName: "test-node", // --host-name test-node, no $NODE_NAME
				PolicyRef: capturev1alpha1.PolicyReference{Name: "checkout"}, ArmingID: name, Reason: capturev1alpha1.ReasonBait,
				Profile: capturev1alpha1.CaptureProfile{Backend: capturev1alpha1.BackendPerf,
					Pre: &metav1.Duration{Duration: 2 * time.Second}, Post: &metav1.Duration{Duration: time.Second}},
				Trigger: trigger}}
		if err := admin.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	waitPhase := func(name string, phase capturev1alpha1.CapturePhase) *capturev1alpha1.Capture {
		t.Helper()
		c := &capturev1alpha1.Capture{}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if err := admin.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
				t.Fatal(err)
			}
			if c.Status.Phase == phase {
				return c
			}
			if time.Now().After(deadline) {
				t.Fatalf("capture %s is %q (%s), not %s, after 30s:\n%s", name, c.Status.Phase, c.Status.Message, phase, tail(p.out.String(), 20))
			}
		}
	}

	newCapture("bait", &capturev1alpha1.LocalTrigger{Service: "shop", Latency: &metav1.Duration{Duration: 500 * time.Millisecond}})
	waitPhase("bait", capturev1alpha1.PhaseArmed)
	cl, err := client.New(client.Config{Addr: "unixgram://" + p.sock, Service: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	url, _ := serveApp(t, cl)
	for range 20 {
		get(t, url+"/fast")
	}
	get(t, url+"/slow")
	c := waitPhase("bait", capturev1alpha1.PhaseUploaded)
	a := c.Status.Artifact
	if c.Status.FiredBy != capturev1alpha1.FiredByLatency || a == nil || a.Bytes == 0 || !strings.HasPrefix(a.URI, "file://") {
		t.Fatalf("uploaded status %+v", c.Status)
	}
	// The node's CLI knows it by the id the Capture maps to.
	if out, err := captureCLI(t, p, "get", "bait"); err != nil || !strings.Contains(out, "Collected") {
		t.Errorf("capture get: %v\n%s", err, out)
	}

	newCapture("at-stop", nil)
	waitPhase("at-stop", capturev1alpha1.PhaseArmed)
	p.stop(t)
	c = waitPhase("at-stop", capturev1alpha1.PhaseFailed)
	if !strings.Contains(c.Status.Message, "stopped") {
		t.Errorf("message %q", c.Status.Message)
	}
}

func get(t *testing.T, url string) {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
}

// writeKubeconfig writes cfg (envtest's admin) as a kubeconfig file.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(fmt.Errorf("kubeconfig: %w", err))
	}
	return path
}
