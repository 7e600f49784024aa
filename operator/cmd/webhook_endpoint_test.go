package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// TestOnlyTheLeaderIsAnEndpointOfTheWebhookService runs two replicas with
// the webhook as the chart does, against a real API server: the webhook
// Service's EndpointSlice names the leader and never the standby (which
// is Ready for its probes but does not serve the webhook), and after the
// leader stops it names the new leader. Before, the Service selected
// every operator pod, and one request in two went to a standby's closed
// port.
func TestOnlyTheLeaderIsAnEndpointOfTheWebhookService(t *testing.T) {
	cfg, admin := testenv.SharedAPIServer(t)
	testenv.InstallCRDs(t, cfg, filepath.Join("..", "config", "crd", "bases"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const ns = "webhook-endpoint"
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// As the chart makes it: empty, for a selector-less Service.
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "operator-webhook", Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: "operator-webhook", discoveryv1.LabelManagedBy: "spikehunt-operator"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	if err := admin.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	ca, err := testenv.NewTestCA("webhook-test")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("operator-webhook", "localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "token": []byte("alertmanager-token-of-the-test")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	type replica struct {
		ip, webhook string
		cancel      context.CancelFunc
		done        chan error
		leads       <-chan struct{}
	}
	start := func(ip string) *replica {
		webhook := freeAddr(t)
		o, err := parseFlags([]string{"--leader-elect", "--leader-election-namespace=" + ns,
			"--metrics-bind-address=0", "--health-probe-bind-address=" + freeAddr(t),
			"--webhook.address=" + webhook, "--webhook.tls-cert-file=" + filepath.Join(dir, "tls.crt"),
			"--webhook.tls-key-file=" + filepath.Join(dir, "tls.key"), "--webhook.alertmanager-token-file=" + filepath.Join(dir, "token"),
			"--webhook.endpointslice=operator-webhook", "--webhook.endpointslice-namespace=" + ns, "--webhook.advertise-address=" + ip})
		if err != nil {
			t.Fatal(err)
		}
		o.skipNameValidation = true
		o.registry = prometheus.NewRegistry()
		mgr, err := newManager(cfg, o)
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(context.Background())
		r := &replica{ip: ip, webhook: webhook, cancel: rcancel, done: make(chan error, 1), leads: mgr.Elected()}
		go func() { r.done <- mgr.Start(rctx) }()
		t.Cleanup(func() {
			rcancel()
			if err := <-r.done; err != nil {
				t.Errorf("replica %s: %v", ip, err)
			}
		})
		return r
	}
	a, b := start("10.0.0.1"), start("10.0.0.2")

	var leader, standby *replica
	select {
	case <-a.leads:
		leader, standby = a, b
	case <-b.leads:
		leader, standby = b, a
	case <-time.After(30 * time.Second):
		t.Fatal("no replica became the leader in 30 s")
	}
	endpoints := func() (string, error) {
		var s discoveryv1.EndpointSlice
		if err := admin.Get(ctx, client.ObjectKeyFromObject(slice), &s); err != nil {
			return "", err
		}
		var out []string
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				out = append(out, a)
			}
		}
		for _, p := range s.Ports {
			if p.Port != nil {
				out = append(out, fmt.Sprintf("port %d", *p.Port))
			}
		}
		return strings.Join(out, ","), nil
	}
	port := func(r *replica) string { _, p, _ := net.SplitHostPort(r.webhook); return "port " + p }
	waitFor := func(want string) {
		t.Helper()
		var got string
		var err error
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if got, err = endpoints(); err == nil && got == want {
				return
			}
		}
		t.Fatalf("the webhook's endpoints are %q (%v), want %q", got, err, want)
	}

	waitFor(leader.ip + "," + port(leader))
	// The standby never becomes an endpoint while the leader leads, and
	// does not listen on the webhook's port.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got, err := endpoints(); err != nil || strings.Contains(got, standby.ip) {
			t.Fatalf("the webhook's endpoints are %q (%v) while %s leads: the standby %s is one", got, err, leader.ip, standby.ip)
		}
	}
	if c, err := net.Dial("tcp", standby.webhook); err == nil {
		c.Close()
		t.Errorf("the standby listens on its webhook port %s", standby.webhook)
	}

	leader.cancel()
	select {
	case <-standby.leads:
	case <-time.After(20 * time.Second):
		t.Fatal("the standby did not take over within 20 s")
	}
	waitFor(standby.ip + "," + port(standby))
}

// The slice's flags are checked with the others: the chart's downward-API
// values missing or wrong stop the operator at start, saying which.
func TestParseFlagsOfTheWebhookEndpoint(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--webhook.endpointslice=s", "--webhook.advertise-address=10.0.0.1"}, "--webhook.endpointslice-namespace"},
		{[]string{"--webhook.endpointslice=s", "--webhook.endpointslice-namespace=ns"}, "--webhook.advertise-address"},
		{[]string{"--webhook.endpointslice=s", "--webhook.endpointslice-namespace=ns", "--webhook.advertise-address=$(POD_IP)"}, "status.podIP"},
		{[]string{"--webhook.endpointslice=s", "--webhook.endpointslice-namespace=ns", "--webhook.advertise-address=10.0.0.1", "--webhook.address=localhost"}, "--webhook.address"},
	} {
		if _, err := parseFlags(tt.args); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error naming %s", tt.args, err, tt.want)
		}
	}
	if _, err := parseFlags([]string{"--webhook.endpointslice=s", "--webhook.endpointslice-namespace=ns", "--webhook.advertise-address=fd00::7"}); err != nil {
		t.Errorf("an IPv6 pod: %v", err)
	}
}
