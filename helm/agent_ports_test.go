package helm_test

import (
	"slices"
	"strconv"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The agent runs on the host's network, so on a node that already runs an
// OpenTelemetry Collector DaemonSet with host ports 4317/4318 it must
// listen elsewhere: agent.intake.otlpGrpc.port and otlpHttp.port move the
// agent's listen addresses, its container ports and its NetworkPolicy
// together, and nothing of the agent's is left on 4317 or 4318.
func TestAgentBesideACollectorDaemonSetListensOnTheOverriddenOTLPPorts(t *testing.T) {
	m := render(t, "spikehunt", valuesCase{name: "beside-collector", sets: []string{
		"agent.intake.otlpGrpc.port=14317", "agent.intake.otlpHttp.port=14318"}})
	var ds *workload
	for _, w := range m.workloads(t) {
		if w.kind == "DaemonSet" && w.name == fullname()+"-agent" {
			ds = &w
		}
	}
	if ds == nil {
		t.Fatal("no agent DaemonSet rendered")
	}
	if !ds.template.Spec.HostNetwork {
		t.Fatal("the agent is not on the host network; this test's premise (a port clash with a Collector's host ports) is gone")
	}
	c := ds.template.Spec.Containers[0]
	for _, want := range []string{"--intake.otlp-grpc=$(HOST_IP):14317", "--intake.otlp-http=$(HOST_IP):14318"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("agent args %q lack %s", c.Args, want)
		}
	}
	var ports []int32
	for _, p := range c.Ports {
		ports = append(ports, p.ContainerPort, p.HostPort)
	}
	for _, clash := range []int32{4317, 4318} {
		if slices.Contains(ports, clash) {
			t.Errorf("the agent still declares port %d: %+v", clash, c.Ports)
		}
	}
	for _, want := range []int32{14317, 14318} {
		if !slices.Contains(ports, want) {
			t.Errorf("the agent does not declare port %d: %+v", want, c.Ports)
		}
	}

	var np networkingv1.NetworkPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.mustFind(t, "NetworkPolicy", fullname()+"-agent").Object, &np); err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			allowed[string(*p.Protocol)+"/"+p.Port.String()] = true
		}
	}
	for _, port := range []int{14317, 14318} {
		if !allowed["TCP/"+strconv.Itoa(port)] {
			t.Errorf("the agent NetworkPolicy does not let in TCP/%d (it names %v)", port, allowed)
		}
	}
	for _, port := range []int{4317, 4318} {
		if allowed["TCP/"+strconv.Itoa(port)] {
			t.Errorf("the agent NetworkPolicy still opens TCP/%d", port)
		}
	}
}
