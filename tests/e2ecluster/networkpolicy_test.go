//go:build linux

package e2ecluster

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The labels of the test's peers that the release's NetworkPolicies are
// narrowed to (values in setup_test.go): agent.networkPolicy.intakeFrom,
// operator.networkPolicy.webhookFrom and reportFrom.
const (
	sendsRequestsLabel = "e2e.spikehunt.io/sends-requests"
	sendsAlertsLabel   = "e2e.spikehunt.io/sends-alerts"
	readsReportsLabel  = "e2e.spikehunt.io/reads-reports"
	// probeNamespace holds the probes from outside the release.
	probeNamespace = "netpol-probe"
)

// checkNetworkPolicies runs on the node's NetworkPolicy engine
// (kube-network-policies, main_test.go): real TCP connections from probe
// pods to the release's Services, each probe with the labels of a peer a
// policy admits or of none. A connection a policy refuses gets no answer
// (the engine drops its packets): the probe reports "timeout". Each
// refused target is also shown listening, by a probe that the same policy
// admits connecting to it. The rest of the e2e (the ingest writing the
// store, the detector and the operator reading it) runs under the same
// engine: the chart's own flows keep working.
func (e *env) checkNetworkPolicies(t *testing.T) {
	began := time.Now()
	ctx := context.Background()
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probeNamespace}}); err != nil {
		t.Fatal(err)
	}
	chart := func(component string) map[string]string {
		return map[string]string{"app.kubernetes.io/name": "spikehunt", "app.kubernetes.io/instance": release, "app.kubernetes.io/component": component}
	}
	with := func(m map[string]string, kv ...string) map[string]string {
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	probes := map[string]*probePod{
		// No label of the chart's or the test's, in another namespace.
		"stranger": {namespace: probeNamespace, labels: map[string]string{"probe": "stranger"}},
		// In the release's namespace, without the chart's labels.
		"neighbour": {namespace: namespace, labels: map[string]string{"probe": "neighbour"}},
		// The peers the operator's policy is narrowed to.
		"alert-sender":  {namespace: probeNamespace, labels: map[string]string{"probe": "alert-sender", sendsAlertsLabel: "yes"}},
		"report-reader": {namespace: probeNamespace, labels: map[string]string{"probe": "report-reader", readsReportsLabel: "yes"}},
		// One of the store's clients as the chart labels them (the
		// migrate Job's component: no controller of the release owns
		// such a pod with the embedded store).
		"store-client": {namespace: namespace, labels: with(chart("migrate"), "probe", "store-client")},
	}
	for name, p := range probes {
		e.createProbe(t, name, p)
	}
	for name, p := range probes {
		e.waitForProbe(t, name, p)
	}
	t.Logf("%d probe pods Ready after %v", len(probes), time.Since(began).Round(time.Second))

	e.checkAgentPolicyNamesOnly(t, sendsRequestsLabel)
	store := e.serviceAddr(t, release+"-clickhouse", 8123)
	webhook := e.serviceAddr(t, release+"-operator-webhook", 443)
	report := e.serviceAddr(t, release+"-operator-report", 8090)
	agentOTLP := net.JoinHostPort(e.cluster.NodeIP(), "4318")
	const connected, refused = "connected", "timeout"
	for _, c := range []struct {
		probe, target, addr, want string
	}{
		// Admitted: each target listens, and its policy lets these in.
		{"store-client", "the store", store, connected},
		{"alert-sender", "the operator's webhook", webhook, connected},
		{"report-reader", "the report server", report, connected},
		// Refused: no label a policy names.
		{"stranger", "the store", store, refused},
		{"stranger", "the operator's webhook", webhook, refused},
		{"stranger", "the report server", report, refused},
		{"neighbour", "the store", store, refused},
		// Each policy admits its own peers only.
		{"alert-sender", "the store", store, refused},
		{"alert-sender", "the report server", report, refused},
		{"report-reader", "the operator's webhook", webhook, refused},
		{"store-client", "the operator's webhook", webhook, refused},
		// The agent is on the host's network: its NetworkPolicy, narrowed
		// to sendsRequestsLabel, does not apply (the chart's README says
		// what protects it instead).
		{"stranger", "the agent's OTLP/HTTP port on the node", agentOTLP, connected},
	} {
		p := probes[c.probe]
		what := fmt.Sprintf("the %s probe (%s) to %s at %s", c.probe, p.describe(), c.target, c.addr)
		// A pod the engine has not seen yet is judged as an address
		// outside the cluster: retry until the answer holds, at most 30 s.
		deadline := time.Now().Add(30 * time.Second)
		var got string
		for {
			got = p.dial(t, c.addr)
			if got == c.want || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		if got != c.want {
			t.Errorf("%s: %s, want %s", what, got, c.want)
			continue
		}
		t.Logf("%s: %s", what, got)
	}
	t.Logf("NetworkPolicy checks done in %v", time.Since(began).Round(time.Second))
}

// checkAgentPolicyNamesOnly fails t unless the agent's NetworkPolicy
// admits the intake ports from pods with label only: then a probe without
// it that reaches the intake shows the policy not applied, not a policy
// that lets it in.
func (e *env) checkAgentPolicyNamesOnly(t *testing.T, label string) {
	t.Helper()
	var np networkingv1.NetworkPolicy
	if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: release + "-agent"}, &np); err != nil {
		t.Fatalf("the agent's NetworkPolicy: %v", err)
	}
	for _, rule := range np.Spec.Ingress {
		for _, port := range rule.Ports {
			if port.Port == nil || port.Port.IntValue() != 4318 {
				continue
			}
			if len(rule.From) != 1 || rule.From[0].PodSelector == nil || rule.From[0].PodSelector.MatchLabels[label] != "yes" {
				t.Fatalf("the agent's NetworkPolicy admits port 4318 from %+v, want only pods labelled %s=yes", rule.From, label)
			}
			return
		}
	}
	t.Fatalf("the agent's NetworkPolicy has no rule for port 4318: %+v", np.Spec.Ingress)
}

// probeToken is the bearer token the probes' /dial wants, one per test
// binary.
var probeToken = rand.Text()

// probePod is one probe: its namespace, its labels, and its IP once Ready.
type probePod struct {
	namespace string
	labels    map[string]string
	ip        string
}

func (p *probePod) describe() string {
	var kv []string
	for k, v := range p.labels {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return "namespace " + p.namespace + ", labels " + strings.Join(kv, ",")
}

func (e *env) createProbe(t *testing.T, name string, p *probePod) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe-" + name, Namespace: p.namespace, Labels: p.labels},
		Spec: corev1.PodSpec{
			NodeName:                     e.node,
			AutomountServiceAccountToken: ptr(false),
			Containers: []corev1.Container{{
				Name:            "probe",
				Image:           probeImageName,
				ImagePullPolicy: corev1.PullNever,
				Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Env:             []corev1.EnvVar{{Name: "PROBE_TOKEN", Value: probeToken}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/healthz", Port: intstr.FromString("http")}}, PeriodSeconds: 1},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: ptr(true), RunAsUser: ptr[int64](65532), AllowPrivilegeEscalation: ptr(false),
					ReadOnlyRootFilesystem: ptr(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		},
	}
	if err := e.client.Create(context.Background(), pod); err != nil {
		t.Fatalf("probe %s: %v", name, err)
	}
}

func (e *env) waitForProbe(t *testing.T, name string, p *probePod) {
	t.Helper()
	eventually(t, 2*time.Minute, "the "+name+" probe pod is Ready", func() error {
		var pod corev1.Pod
		if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: p.namespace, Name: "probe-" + name}, &pod); err != nil {
			return err
		}
		if !podReady(&pod) || pod.Status.PodIP == "" {
			return fmt.Errorf("probe %s is %s", name, pod.Status.Phase)
		}
		p.ip = pod.Status.PodIP
		return nil
	})
}

// dial asks the probe to open a TCP connection to addr and returns its
// answer: "connected", "timeout" or "error: ...". The test reaches the
// probe from the host, as root: the engine lets the node's root traffic
// through.
func (p *probePod) dial(t *testing.T, addr string) string {
	t.Helper()
	u := "http://" + net.JoinHostPort(p.ip, "8080") + "/dial?timeout=3s&addr=" + url.QueryEscape(addr)
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+probeToken)
	resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("the probe at %s: %v", p.ip, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the probe at %s: %s %q %v", p.ip, resp.Status, b, err)
	}
	return string(b)
}

// serviceAddr is the ClusterIP:port of the release's Service name, which
// must have port.
func (e *env) serviceAddr(t *testing.T, name string, port int32) string {
	t.Helper()
	var svc corev1.Service
	if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &svc); err != nil {
		t.Fatalf("Service %s: %v", name, err)
	}
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			return net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(port)))
		}
	}
	t.Fatalf("Service %s has no port %d: %+v", name, port, svc.Spec.Ports)
	return ""
}
