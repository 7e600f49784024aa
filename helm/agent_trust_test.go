package helm_test

import (
	"path"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// The agent's NetworkPolicy selects the agent's pods and names every port
// the agent opens, with its protocol, and lets nothing in from outside
// the cluster by default.
func TestAgentNetworkPolicyCoversEveryPortTheAgentOpens(t *testing.T) {
	for _, vc := range valuesCases(t) {
		t.Run(vc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, "spikehunt", vc)
			var agent *workload
			for _, w := range m.workloads(t) {
				if w.kind == "DaemonSet" && w.name == fullname()+"-agent" {
					agent = &w
				}
			}
			if agent == nil {
				// No agent, no ports: the policy for them must not be
				// rendered either.
				if m.find("NetworkPolicy", fullname()+"-agent") != nil {
					t.Fatal("an agent NetworkPolicy is rendered without the agent")
				}
				return
			}
			var np networkingv1.NetworkPolicy
			o := m.mustFind(t, "NetworkPolicy", fullname()+"-agent")
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &np); err != nil {
				t.Fatal(err)
			}
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil || !sel.Matches(labels.Set(agent.template.Labels)) {
				t.Fatalf("the policy's selector %v does not select the agent's pods %v (%v)", np.Spec.PodSelector, agent.template.Labels, err)
			}
			allowed := map[string]bool{}
			for _, rule := range np.Spec.Ingress {
				for _, p := range rule.Ports {
					allowed[string(*p.Protocol)+"/"+p.Port.String()] = true
				}
				if vc.name == "default" {
					if len(rule.From) == 0 {
						t.Errorf("rule for %v lets in every address", rule.Ports)
					}
					for _, peer := range rule.From {
						if peer.IPBlock != nil {
							t.Errorf("rule for %v lets in %v by default", rule.Ports, peer.IPBlock)
						}
					}
				}
			}
			for _, c := range agent.template.Spec.Containers {
				for _, p := range c.Ports {
					proto := p.Protocol
					if proto == "" {
						proto = corev1.ProtocolTCP
					}
					if key := string(proto) + "/" + strconv.Itoa(int(p.ContainerPort)); !allowed[key] {
						t.Errorf("port %s (%s) is not in the policy (it names %v)", key, p.Name, allowed)
					}
				}
			}
		})
	}
}

// With the chart's paths the line socket's folder is the hostPath the
// node's apps mount, and the control socket is in the agent's own volume,
// never inside it: a shared folder made the 0666 line socket unreachable
// (the control socket's folder is 0700) or the control socket reachable.
// Who may fire a capture and how often reach the agent's configuration.
func TestAgentSocketsLiveInSeparateFolders(t *testing.T) {
	m := render(t, "spikehunt", valuesCase{name: "trigger", sets: []string{
		"agent.trigger.uids={1000,1001}", "agent.trigger.cidrs={10.244.0.0/16}", "agent.trigger.fireBurst=3"}})
	var cfg struct {
		Intake struct {
			Trigger struct {
				UIDs  []uint32 `json:"uids"`
				CIDRs []string `json:"cidrs"`
			} `json:"trigger"`
		} `json:"intake"`
		Capture struct {
			Socket    string `json:"socket"`
			FireBurst int    `json:"fire_burst"`
			FireEvery string `json:"fire_every"`
		} `json:"capture"`
	}
	if err := yaml.Unmarshal([]byte(configMapData(t, m, fullname()+"-agent")["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Intake.Trigger.UIDs) != 2 || cfg.Intake.Trigger.CIDRs[0] != "10.244.0.0/16" || cfg.Capture.FireBurst != 3 || cfg.Capture.FireEvery != "30s" {
		t.Errorf("agent config %+v does not carry agent.trigger", cfg)
	}
	var ds *workload
	for _, w := range m.workloads(t) {
		if w.name == fullname()+"-agent" {
			ds = &w
		}
	}
	c := ds.template.Spec.Containers[0]
	var lineSock string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--intake.line-unix="); ok {
			lineSock = v
		}
	}
	lineDir, ctlDir := path.Dir(lineSock), path.Dir(cfg.Capture.Socket)
	if lineSock == "" || lineDir == ctlDir || strings.HasPrefix(ctlDir+"/", lineDir+"/") {
		t.Fatalf("line socket %q and control socket %q share a folder", lineSock, cfg.Capture.Socket)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range ds.template.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, vm := range c.VolumeMounts {
		switch vm.MountPath {
		case lineDir:
			if v := vols[vm.Name]; v.HostPath == nil {
				t.Errorf("the line socket's folder %s is not the node's (%+v)", lineDir, v)
			}
		case ctlDir:
			if v := vols[vm.Name]; v.HostPath != nil || v.EmptyDir == nil {
				t.Errorf("the control socket's folder %s is not the agent's own volume (%+v)", ctlDir, v)
			}
		}
	}
}

// The schema refuses a trigger allow-list the agent would refuse.
func TestValuesSchemaRefusesABadTrigger(t *testing.T) {
	for _, tt := range []struct {
		name string
		sets []string
		want string
	}{
		{"a negative uid", []string{"agent.trigger.uids={-1}"}, "uids"},
		{"a name for a network", []string{"agent.trigger.cidrs={pods}"}, "cidrs"},
		{"a burst of none", []string{"agent.trigger.fireBurst=0"}, "fireBurst"},
		{"a misspelt key", []string{"agent.trigger.uid={1}"}, "uid"},
		{"a misspelt policy key", []string{"agent.networkPolicy.from={}"}, "from"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tryRender(t, "spikehunt", valuesCase{name: tt.name, sets: tt.sets})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("--set %v: %v, want an error naming %q", tt.sets, err, tt.want)
			}
		})
	}
}

// The operator arms Captures on a node and links them to the spike windows
// whose host is that node, so the agent must name its host after the node
// (a hostname that differs, as on the test node, left every capture
// unlinked).
func TestTheAgentNamesItsHostAfterItsNode(t *testing.T) {
	hostArg := func(m manifest) (string, bool) {
		for _, w := range m.workloads(t) {
			if w.name == fullname()+"-agent" {
				for _, a := range w.template.Spec.Containers[0].Args {
					if v, ok := strings.CutPrefix(a, "--host-name="); ok {
						return v, true
					}
				}
			}
		}
		return "", false
	}
	if v, ok := hostArg(render(t, "spikehunt", valuesCase{name: "default"})); !ok || v != "$(NODE_NAME)" {
		t.Errorf("default values: --host-name=%q (given %v), want $(NODE_NAME)", v, ok)
	}
	if v, ok := hostArg(render(t, "spikehunt", valuesCase{name: "hostname", sets: []string{"agent.hostName=hostname"}})); ok {
		t.Errorf("agent.hostName=hostname: --host-name=%q, want none (the kernel's hostname)", v)
	}
}
