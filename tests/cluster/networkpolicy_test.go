//go:build linux

package cluster_test

import (
	"context"
	"errors"
	"os/exec"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The shared node runs the NetworkPolicy engine (TestMain): a policy on
// one server admits the pods it names, and a peer it does not name gets no
// answer from that server while another server, without a policy, answers
// the same peer.
func TestANetworkPolicyAdmitsThePodsItNamesAndNoOtherPeer(t *testing.T) {
	_, cs, ns := node(t)
	ctx := context.Background()
	create(t, cs, serverPod(ns, "guarded"))
	create(t, cs, serverPod(ns, "open"))
	port := intstr.FromInt32(8080)
	tcp := corev1.ProtocolTCP
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "friend"}}}},
			}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	guarded := waitPod(t, cs, ns, "guarded", "Running and Ready", runningAndReady)
	open := waitPod(t, cs, ns, "open", "Running and Ready", runningAndReady)

	// A pod the policy names gets through (and shows the server listens).
	friend := clientPod(ns, "friend", "get", "http://"+guarded.Status.PodIP+":8080/", "podapp guarded")
	friend.Labels = map[string]string{"role": "friend"}
	create(t, cs, friend)
	waitPod(t, cs, ns, "friend", "Succeeded (GET the guarded server as a pod the policy names)", succeeded)

	// A peer the policy does not name: a process of the host that is not
	// root (the engine lets the node's root traffic through, as the
	// kubelet's probes need).
	if got := dialAsNobody(t, open.Status.PodIP+"/8080"); got != "connected" {
		t.Fatalf("the host's uid 65534 to the server without a policy: %s, want connected", got)
	}
	if got := dialAsNobody(t, guarded.Status.PodIP+"/8080"); got != "timeout" {
		t.Errorf("the host's uid 65534 to the server whose policy names role=friend only: %s, want timeout (the engine drops it)", got)
	}
}

// dialAsNobody opens a TCP connection to hostPort ("IP/port") from the
// host as uid and gid 65534, waiting 4 s: "connected", "timeout" or
// the error.
func dialAsNobody(t *testing.T, hostPort string) string {
	t.Helper()
	cmd := exec.Command("timeout", "4", "bash", "-c", "exec 3<>/dev/tcp/"+hostPort)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return "connected"
	case errors.As(err, &exit) && exit.ExitCode() == 124:
		return "timeout"
	default:
		return err.Error() + ": " + string(out)
	}
}
