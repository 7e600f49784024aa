//go:build linux

package cluster_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/spikehunt/spikehunt/tests/cluster"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// A second node in its own network namespace: Ready under its own name and
// address, its pods on its own range, reachable from the first node's pods
// and the host and reaching them, through Services and cluster DNS both
// ways; and Stop takes it all away.
func TestASecondNodeRunsPodsThatReachTheFirstNodesPodsAndServices(t *testing.T) {
	if os.Getenv(cluster.TwoNodesEnv) != "1" {
		// Opt-in, as make causes and make soak are: not a missing feature.
		t.Log(cluster.TwoNodesEnv + "=1 runs the two-node tests (make e2e-cluster-2)")
		return
	}
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "a two-node Kubernetes", cluster.ErrNotPrivileged)
	}
	ctx := context.Background()
	opts := cluster.DefaultOptions()
	opts.Nodes = []cluster.NodeOptions{cluster.SecondNode()}
	opts.KeepLogs = os.Getenv(cluster.KeepLogsEnv) == "1"
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	if err := importPodApp(c); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nodes := c.Nodes()
	if len(nodes) != 2 {
		t.Fatalf("Nodes() = %+v, want two", nodes)
	}
	a, b := nodes[0], nodes[1]
	if b.IP != "10.245.0.2" || b.PodCIDR != "10.244.1.0/24" {
		t.Errorf("the second node: %+v, want IP 10.245.0.2 and pods in 10.244.1.0/24", b)
	}
	nb, err := cs.CoreV1().Nodes().Get(ctx, b.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := internalIP(nb); got != b.IP {
		t.Errorf("node %s's InternalIP = %q, want %s", b.Name, got, b.IP)
	}

	const ns = "two-nodes"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpNamespace(t, cs, ns)
		}
	})
	on := func(p *corev1.Pod, node string) *corev1.Pod { p.Spec.NodeName = node; return p }
	create(t, cs, on(serverPod(ns, "web-a"), a.Name))
	create(t, cs, on(serverPod(ns, "web-b"), b.Name))
	for _, name := range []string{"web-a", "web-b"} {
		if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pa := waitPod(t, cs, ns, "web-a", "Running and Ready", runningAndReady)
	pb := waitPod(t, cs, ns, "web-b", "Running and Ready", runningAndReady)
	if _, pods, _ := net.ParseCIDR(b.PodCIDR); !pods.Contains(net.ParseIP(pb.Status.PodIP)) || pb.Status.HostIP != b.IP {
		t.Errorf("pod web-b: IP %s, hostIP %s; want one of %s on %s", pb.Status.PodIP, pb.Status.HostIP, b.PodCIDR, b.IP)
	}
	waitReadyEndpoint(t, cs, ns, "web-a")
	waitReadyEndpoint(t, cs, ns, "web-b")

	// Each node's pods reach the other's by pod IP and by Service name
	// (cluster DNS on the host, a Service whose endpoint is on the other
	// node), and the other node's host-network address.
	checks := []struct{ name, node, url, want string }{
		{"a-to-b-pod", a.Name, "http://" + net.JoinHostPort(pb.Status.PodIP, "8080") + "/", "podapp web-b"},
		{"b-to-a-pod", b.Name, "http://" + net.JoinHostPort(pa.Status.PodIP, "8080") + "/", "podapp web-a"},
		{"a-to-b-svc", a.Name, "http://web-b." + ns + ".svc." + cluster.ClusterDomain + "/", "podapp web-b"},
		{"b-to-a-svc", b.Name, "http://web-a." + ns + ".svc." + cluster.ClusterDomain + "/", "podapp web-a"},
		{"b-to-b-svc", b.Name, "http://web-b." + ns + ".svc." + cluster.ClusterDomain + "/", "podapp web-b"},
	}
	for _, ck := range checks {
		create(t, cs, on(clientPod(ns, ck.name, "get", ck.url, ck.want), ck.node))
	}
	for _, ck := range checks {
		waitPod(t, cs, ns, ck.name, "Succeeded (GET "+ck.url+" from "+ck.node+")", succeeded)
	}
	// The host reaches the second node's pods by their IP (its route).
	getFromHost(t, "http://"+net.JoinHostPort(pb.Status.PodIP, "8080")+"/", "podapp web-b")

	t0 := time.Now()
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("stopped in %v", time.Since(t0).Round(time.Millisecond))
	if _, err := os.Stat("/run/netns/spikehunt-" + b.Name); err == nil {
		t.Errorf("the second node's network namespace is left after Stop")
	}
	if _, err := os.Stat("/sys/class/net/spikehunt-v1"); err == nil {
		t.Errorf("the second node's veth is left after Stop")
	}
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
