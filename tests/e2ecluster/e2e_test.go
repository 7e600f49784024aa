//go:build linux

package e2ecluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/cluster"
)

// The whole loop on a real node, every part in a pod of the
// chart's own images, with the chart's own security contexts, capabilities
// and probes:
//
//  1. helm installs the chart with the local images into the node; Kafka
//     and s3proxy run on the host, on the node's address. Every workload
//     becomes Ready.
//  2. The app ("shop", in a pod of its own) sends its requests over
//     OTLP/HTTP to the agent on its node (HOST_IP); one of them stalls for
//     a second. The ingest pod stores the requests, and the detect pod
//     finds the spike and alerts.
//  3. The operator pod takes the alert and creates a Capture on the node.
//     The agent pod, with only the capabilities the chart grants, arms
//     perf, and the app's next stall fires it through the agent's own
//     latency trigger. The artifact lands in S3.
//  4. The detect pod finds the second spike; the operator indexes the
//     capture: Indexed, with that spike's id, in the Capture's status.
func TestTheChartOnARealNodeCatchesAStallWithPerfAndIndexesIt(t *testing.T) {
	if twoNodes {
		t.Log("the two-node run (" + cluster.TwoNodesEnv + "=1) has no NetworkPolicy engine; make e2e-cluster runs this test")
		return
	}
	began := time.Now()
	ctx := context.Background()
	e := setUp(t)
	t.Logf("node, images, Kafka, s3proxy and the release ready after %v", time.Since(began).Round(time.Second))
	t.Run("NetworkPolicies", e.checkNetworkPolicies)

	const (
		service = "shop"
		pre     = 3 * time.Second
		post    = time.Second
		trigger = 500 * time.Millisecond
	)
	shop := e.startShop(t, service, "")
	e.checkTheIntakeAsksForItsToken(t)

	// The policy: no bait, only alerts of the service arm, one node each.
	pol := stallsPolicy(service, map[string]string{"kubernetes.io/hostname": e.node}, pre, post, trigger)
	if err := e.client.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}

	// Stall 1: stored, detected, alerted, armed.
	time.Sleep(10 * time.Second) // the host's typical latency
	stall1From, stall1To := shop.stall(t)
	t.Logf("stall 1 [%s, %s]", stamp(stall1From), stamp(stall1To))
	var c v1alpha1.Capture
	// The detect pod's passes share two cores with the rest of make test
	// (the eval above all): minutes, not seconds, on a loaded machine.
	eventually(t, 5*time.Minute, "the detect pod alerts and the operator pod arms a Capture", func() error {
		var caps v1alpha1.CaptureList
		if err := e.client.List(ctx, &caps, client.InNamespace(shopNamespace)); err != nil {
			return err
		}
		if len(caps.Items) == 0 {
			return fmt.Errorf("no Capture in %s", shopNamespace)
		}
		if len(caps.Items) > 1 {
			t.Fatalf("%d Captures for one alert on one node", len(caps.Items))
		}
		c = caps.Items[0]
		return nil
	})
	if s := c.Spec; s.NodeName != e.node || s.Reason != v1alpha1.ReasonAlert || s.Profile.Backend != v1alpha1.BackendPerf {
		t.Fatalf("capture %s: spec %+v; want node %s, reason alert, perf", c.Name, s, e.node)
	}
	key := client.ObjectKeyFromObject(&c)
	eventually(t, 90*time.Second, "the agent pod arms perf", e.reached(t, key, v1alpha1.PhaseArmed, &c))
	t.Logf("capture %s armed at %s (alert %s), %v in", c.Name, stamp(c.Status.ArmedAt.Time), c.Spec.AlertID, time.Since(began).Round(time.Second))

	// Stall 2: the agent's own trigger fires the armed recorder.
	time.Sleep(pre + 2*time.Second)
	stall2From, stall2To := shop.stall(t)
	t.Logf("stall 2 [%s, %s]", stamp(stall2From), stamp(stall2To))
	// Fired, dumped at the idle IO class, analysed on the node (up to
	// capture.analyze_timeout) and uploaded: minutes on a loaded machine.
	eventually(t, 4*time.Minute, "the capture is fired and uploaded to S3", e.reached(t, key, v1alpha1.PhaseUploaded, &c))
	st := c.Status
	if st.FiredBy != v1alpha1.FiredByLatency || st.FiredAt == nil || st.Artifact == nil {
		t.Fatalf("uploaded capture: firedBy %q, firedAt %v, artifact %+v", st.FiredBy, st.FiredAt, st.Artifact)
	}
	if fired := st.FiredAt.Time; fired.Before(stall2From.Add(trigger)) || fired.After(stall2To.Add(2*time.Second)) {
		t.Errorf("fired at %s; stall 2 was [%s, %s]", stamp(fired), stamp(stall2From), stamp(stall2To))
	}
	wantURI := "s3://" + e.s3.Bucket + "/captures/" + c.Spec.ArmingID + ".json"
	if st.Artifact.URI != wantURI {
		t.Errorf("artifact uri %q, want %q", st.Artifact.URI, wantURI)
	}
	s3c, err := e.s3.Client()
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s3c.StatObject(ctx, e.s3.Bucket, "captures/"+c.Spec.ArmingID+".json", minio.StatObjectOptions{}); err != nil || info.Size == 0 {
		t.Errorf("the capture's record in the bucket: %v (size %d)", err, info.Size)
	}

	// The detect pod finds stall 2; the operator pod links the capture.
	eventually(t, 3*time.Minute, "the operator pod indexes the capture against stall 2's spike", e.reached(t, key, v1alpha1.PhaseIndexed, &c))
	if len(c.Status.SpikeIDs) == 0 {
		t.Fatalf("indexed capture links no spike: %+v", c.Status)
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionIndexed); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("Indexed condition %+v, want True", cond)
	}
	spikes := e.spikesOverlapping(t, e.node, stall2From, stall2To)
	if len(spikes) == 0 {
		t.Fatalf("the store has no spike window of %s overlapping stall 2 [%s, %s]", e.node, stamp(stall2From), stamp(stall2To))
	}
	if !slices.ContainsFunc(c.Status.SpikeIDs, func(id string) bool { return slices.Contains(spikes, id) }) {
		t.Errorf("status.spikeIDs = %v, want one of stall 2's spikes %v", c.Status.SpikeIDs, spikes)
	}
	t.Logf("capture %s indexed with spikes %v; the loop closed in %v", c.Name, c.Status.SpikeIDs, time.Since(began).Round(time.Second))
}

const shopNamespace = "shop"

// stallsPolicy captures the app's stalls with perf on the nodes with the
// labels: no bait, only the service's alerts arm, one node an alert (its
// host first), fired by the agent's own latency trigger.
func stallsPolicy(service string, nodeLabels map[string]string, pre, post, trigger time.Duration) *v1alpha1.CapturePolicy {
	return &v1alpha1.CapturePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-stalls", Namespace: shopNamespace},
		Spec: v1alpha1.CapturePolicySpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: nodeLabels},
			Service:      service,
			Sampling:     v1alpha1.Sampling{Count: ptr[int32](0)},
			Profile:      v1alpha1.CaptureProfile{Backend: v1alpha1.BackendPerf, Pre: dur(pre), Post: dur(post)},
			Triggers: &v1alpha1.Triggers{
				Local:       &v1alpha1.LocalTrigger{Latency: dur(trigger)},
				FleetAlerts: &v1alpha1.FleetAlertTrigger{Services: []string{service}, WidenBy: ptr[int32](1)},
			},
			Budgets: v1alpha1.Budgets{MaxConcurrentPerFleet: 10, PerNodeCooldown: dur(30 * time.Minute), MaxPerPatternPerHour: 6},
		},
	}
}

// checkTheIntakeAsksForItsToken posts a span to the agent's OTLP/HTTP
// port on the node's address without the chart's token, as any host
// that reaches the node could: the agent must refuse it.
func (e *env) checkTheIntakeAsksForItsToken(t *testing.T) {
	t.Helper()
	var node corev1.Node
	if err := e.client.Get(context.Background(), client.ObjectKey{Name: e.node}, &node); err != nil {
		t.Fatal(err)
	}
	var ip string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = a.Address
		}
	}
	if ip == "" {
		t.Fatalf("node %s has no InternalIP: %+v", e.node, node.Status.Addresses)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post("http://"+net.JoinHostPort(ip, "4318")+"/v1/traces", "application/x-protobuf", strings.NewReader(""))
	if err != nil {
		t.Fatalf("the agent's OTLP/HTTP on the node's address: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a span without the token: the agent answered %s, want 401", resp.Status)
	}
}

// shopApp is the app's pod, reached on its IP from the host.
type shopApp struct {
	url    string
	client *http.Client
}

// startShop runs the app on node, or wherever the scheduler puts it when
// node is empty.
func (e *env) startShop(t *testing.T, service, node string) *shopApp {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shopNamespace}}
	if err := e.client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// The agent asks OTLP senders for the chart's token: the app's
	// namespace gets a copy of the Secret, as the install notes say.
	var token corev1.Secret
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release + "-intake-token"}, &token); err != nil {
		t.Fatalf("the chart's intake token: %v", err)
	}
	if err := e.client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "agent-token", Namespace: shopNamespace},
		Data: map[string][]byte{"token": token.Data["token"]}}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "shop", sendsRequestsLabel: "yes"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: shopNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: onNode(node),
					Containers: []corev1.Container{{
						Name:            "shop",
						Image:           e.shopImage,
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"-service=" + service, "-rate=200"},
						Env: []corev1.EnvVar{
							{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
							{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://$(HOST_IP):4318"},
							{Name: "SPIKEHUNT_AGENT_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
								LocalObjectReference: corev1.LocalObjectReference{Name: "agent-token"}, Key: "token"}}},
							{Name: "OTEL_EXPORTER_OTLP_HEADERS", Value: "authorization=Bearer%20$(SPIKEHUNT_AGENT_TOKEN)"},
						},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/healthz", Port: intstr.FromString("http")}}, PeriodSeconds: 2},
						SecurityContext: &corev1.SecurityContext{
							RunAsNonRoot: ptr(true), RunAsUser: ptr[int64](65532), AllowPrivilegeEscalation: ptr(false),
							ReadOnlyRootFilesystem: ptr(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						},
					}},
				},
			},
		},
	}
	if err := e.client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	var ip string
	eventually(t, 2*time.Minute, "the shop pod is Ready", func() error {
		var pods corev1.PodList
		if err := e.client.List(ctx, &pods, client.InNamespace(shopNamespace), client.MatchingLabels(labels)); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if podReady(&p) && p.Status.PodIP != "" {
				ip = p.Status.PodIP
				return nil
			}
		}
		return fmt.Errorf("%d shop pods, none Ready", len(pods.Items))
	})
	return &shopApp{url: "http://" + ip + ":8080", client: &http.Client{Timeout: 30 * time.Second}}
}

// stall sends one /stall request and returns when it was sent and when
// its answer came.
func (s *shopApp) stall(t *testing.T) (from, to time.Time) {
	t.Helper()
	from = time.Now()
	resp, err := s.client.Get(s.url + "/stall")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return from, time.Now()
}

// onNode is a nodeSelector for node, nil for none.
func onNode(node string) map[string]string {
	if node == "" {
		return nil
	}
	return map[string]string{"kubernetes.io/hostname": node}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// reached polls the Capture until it is in phase want, failing the test
// at once if it ends in another final phase.
func (e *env) reached(t *testing.T, key client.ObjectKey, want v1alpha1.CapturePhase, c *v1alpha1.Capture) func() error {
	return func() error {
		if err := e.client.Get(context.Background(), key, c); err != nil {
			return err
		}
		if c.Status.Phase == want || (want != v1alpha1.PhaseIndexed && c.Status.Phase == v1alpha1.PhaseIndexed) {
			return nil
		}
		if c.Status.Phase.Final() {
			t.Fatalf("capture %s ended %s (%s), want %s", c.Name, c.Status.Phase, c.Status.Message, want)
		}
		return fmt.Errorf("capture %s is %q: %s", c.Name, c.Status.Phase, c.Status.Message)
	}
}

// stoppedAt is the wait the test failed on, said again after the dump
// (whose pod logs would bury it: CI shows a failure's last lines).
var stoppedAt string

// eventually retries f every second until it returns nil, failing t with
// its last error after limit.
func eventually(t *testing.T, limit time.Duration, what string, f func() error) {
	t.Helper()
	eventuallyEvery(t, limit, time.Second, what, f)
}

// eventuallyEvery is eventually, trying every period.
func eventuallyEvery(t *testing.T, limit, period time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			stoppedAt = fmt.Sprintf("%s: not within %v: %v", what, limit, err)
			t.Fatal(stoppedAt)
		}
		time.Sleep(period)
	}
}

func ptr[T any](v T) *T { return &v }

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// helm runs the chart's helm binary with the cluster's kubeconfig.
func (e *env) helm(t *testing.T, args ...string) string {
	t.Helper()
	bin := os.Getenv("SPIKEHUNT_HELM")
	if bin == "" {
		t.Fatal("SPIKEHUNT_HELM is not set: run through make test (deps/install.sh env)")
	}
	cmd := exec.Command(bin, append(args, "--kubeconfig", e.kubeconfig)...)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
