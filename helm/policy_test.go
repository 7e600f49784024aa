package helm_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// TestNoContainerIsPrivilegedUnlessAsked: privileged: true appears only on
// the agent, and only when agent.privileged asks for it.
func TestNoContainerIsPrivilegedUnlessAsked(t *testing.T) {
	cases := append(valuesCases(t), valuesCase{name: "agent.privileged", sets: []string{"agent.privileged=true"}})
	for _, vc := range cases {
		t.Run(vc.name, func(t *testing.T) {
			t.Parallel()
			asked := slices.Contains(vc.sets, "agent.privileged=true")
			for _, w := range render(t, "spikehunt", vc).workloads(t) {
				for _, c := range containers(w.template.Spec) {
					privileged := c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
					want := asked && w.name == fullname()+"-agent"
					if privileged != want {
						t.Errorf("%s container %s: privileged %v, want %v", w, c.Name, privileged, want)
					}
				}
			}
		})
	}
}

// TestEveryContainerHasRequestsAndLimits, init containers and hook Jobs
// included: CPU and memory, both.
func TestEveryContainerHasRequestsAndLimits(t *testing.T) {
	cases := append(valuesCases(t), valuesCase{name: "grafana", sets: []string{"grafana.enabled=true"}})
	for _, vc := range cases {
		t.Run(vc.name, func(t *testing.T) {
			t.Parallel()
			n := 0
			for _, w := range render(t, "spikehunt", vc).workloads(t) {
				for _, c := range containers(w.template.Spec) {
					n++
					for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
						if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
							t.Errorf("%s container %s: no %s request", w, c.Name, r)
						}
						if q, ok := c.Resources.Limits[r]; !ok || q.IsZero() {
							t.Errorf("%s container %s: no %s limit", w, c.Name, r)
						}
					}
				}
			}
			if n < 5 {
				t.Errorf("only %d containers checked", n)
			}
		})
	}
}

// TestLongRunningContainersHaveProbes: readiness and liveness on every
// container of a Deployment or DaemonSet.
func TestLongRunningContainersHaveProbes(t *testing.T) {
	cases := append(valuesCases(t), valuesCase{name: "grafana", sets: []string{"grafana.enabled=true"}})
	for _, vc := range cases {
		t.Run(vc.name, func(t *testing.T) {
			t.Parallel()
			for _, w := range render(t, "spikehunt", vc).workloads(t) {
				if !w.longRunning() {
					continue
				}
				for _, c := range w.template.Spec.Containers {
					if c.ReadinessProbe == nil {
						t.Errorf("%s container %s: no readiness probe", w, c.Name)
					}
					if c.LivenessProbe == nil {
						t.Errorf("%s container %s: no liveness probe", w, c.Name)
					}
				}
			}
		})
	}
}

// TestAgentCapabilitiesFollowTheBackends: the agent gets the capabilities
// of the backends that are on (values.yaml says why each), nothing by
// default, SYS_ADMIN only in place of PERFMON/BPF on old kernels, hostPID
// only for the backends that read other processes, tracefs read-write
// only for ftrace.
func TestAgentCapabilitiesFollowTheBackends(t *testing.T) {
	tests := []struct {
		name     string
		sets     []string
		caps     []string
		hostPID  bool
		tracefs  map[string]bool // mount path → read-only
		scripts  bool
		escalate bool // allowPrivilegeEscalation left to its default
	}{
		{
			name: "every backend",
			caps: []string{"BPF", "IPC_LOCK", "PERFMON", "SYSLOG", "SYS_PTRACE"}, hostPID: true,
			tracefs: map[string]bool{"/sys/kernel/tracing": true, "/host/sys/kernel/tracing": false}, scripts: true,
		},
		{
			name: "perf only",
			sets: []string{"agent.capture.backends.ftrace=false", "agent.capture.backends.bpftrace=false"},
			caps: []string{"IPC_LOCK", "PERFMON", "SYSLOG", "SYS_PTRACE"}, hostPID: true,
			tracefs: map[string]bool{"/sys/kernel/tracing": true},
		},
		{
			name:    "ftrace only: no capability, tracefs writable outside /sys",
			sets:    []string{"agent.capture.backends.perf=false", "agent.capture.backends.bpftrace=false"},
			tracefs: map[string]bool{"/host/sys/kernel/tracing": false},
		},
		{
			name: "bpftrace only",
			sets: []string{"agent.capture.backends.perf=false", "agent.capture.backends.ftrace=false"},
			caps: []string{"BPF", "IPC_LOCK", "PERFMON"}, hostPID: true,
			tracefs: map[string]bool{"/sys/kernel/tracing": true}, scripts: true,
		},
		{
			name: "perf and ftrace",
			sets: []string{"agent.capture.backends.bpftrace=false"},
			caps: []string{"IPC_LOCK", "PERFMON", "SYSLOG", "SYS_PTRACE"}, hostPID: true,
			tracefs: map[string]bool{"/sys/kernel/tracing": true, "/host/sys/kernel/tracing": false},
		},
		{
			name:    "no backend",
			sets:    []string{"agent.capture.backends.perf=false", "agent.capture.backends.ftrace=false", "agent.capture.backends.bpftrace=false"},
			tracefs: map[string]bool{},
		},
		{
			name:    "captures off",
			sets:    []string{"agent.capture.enabled=false"},
			tracefs: map[string]bool{},
		},
		{
			name: "a kernel before 5.8",
			sets: []string{"agent.legacyKernelCapabilities=true"},
			caps: []string{"IPC_LOCK", "SYSLOG", "SYS_ADMIN", "SYS_PTRACE"}, hostPID: true, escalate: true,
			tracefs: map[string]bool{"/sys/kernel/tracing": true, "/host/sys/kernel/tracing": false}, scripts: true,
		},
		{
			name:    "a kernel before 5.8 with ftrace only needs no SYS_ADMIN",
			sets:    []string{"agent.legacyKernelCapabilities=true", "agent.capture.backends.perf=false", "agent.capture.backends.bpftrace=false"},
			tracefs: map[string]bool{"/host/sys/kernel/tracing": false},
		},
		{
			name: "extra capabilities",
			sets: []string{"agent.capture.backends.perf=false", "agent.capture.backends.ftrace=false", "agent.extraCapabilities={SYS_PTRACE,BPF}"},
			caps: []string{"BPF", "IPC_LOCK", "PERFMON", "SYS_PTRACE"}, hostPID: true,
			tracefs: map[string]bool{"/sys/kernel/tracing": true}, scripts: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, "spikehunt", valuesCase{name: tt.name, sets: tt.sets})
			agent := agentWorkload(t, m)
			spec := agent.template.Spec
			c := spec.Containers[0]
			sc := c.SecurityContext
			if sc == nil || sc.Capabilities == nil {
				t.Fatalf("agent container without capabilities: %+v", sc)
			}
			var got []string
			for _, c := range sc.Capabilities.Add {
				got = append(got, string(c))
			}
			sort.Strings(got)
			if diff := cmp.Diff(tt.caps, got); diff != "" {
				t.Errorf("capabilities (-want +got):\n%s", diff)
			}
			if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("drop %v, want [ALL]", sc.Capabilities.Drop)
			}
			if spec.HostPID != tt.hostPID {
				t.Errorf("hostPID %v, want %v", spec.HostPID, tt.hostPID)
			}
			if !spec.HostNetwork {
				t.Error("hostNetwork false: the ethtool ioctl and /proc/net/dev would see the pod's network namespace")
			}
			escalates := sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation
			if escalates != tt.escalate {
				t.Errorf("allowPrivilegeEscalation unset or true: %v, want %v", escalates, tt.escalate)
			}
			tracefs := map[string]bool{}
			scripts := false
			volumes := map[string]corev1.Volume{}
			for _, v := range spec.Volumes {
				volumes[v.Name] = v
			}
			for _, vm := range c.VolumeMounts {
				v := volumes[vm.Name]
				if v.HostPath != nil && v.HostPath.Path == "/sys/kernel/tracing" {
					tracefs[vm.MountPath] = vm.ReadOnly
				}
				if vm.MountPath == "/etc/spikehunt/bpftrace" {
					scripts = true
					if !vm.ReadOnly {
						t.Error("the bpftrace script folder is mounted writable")
					}
				}
			}
			if diff := cmp.Diff(tt.tracefs, tracefs); diff != "" {
				t.Errorf("tracefs mounts, path → read-only (-want +got):\n%s", diff)
			}
			if scripts != tt.scripts {
				t.Errorf("bpftrace scripts mounted %v, want %v", scripts, tt.scripts)
			}
		})
	}
}

func agentWorkload(t testing.TB, m manifest) workload {
	t.Helper()
	for _, w := range m.workloads(t) {
		if w.name == fullname()+"-agent" {
			return w
		}
	}
	t.Fatalf("no agent DaemonSet in %s", strings.Join(m.names(), ", "))
	return workload{}
}

// secretValues are the values of secretsValues.yaml, which gives every
// credential of the chart a value that occurs nowhere else.
var secretValues = []string{
	"ch-user-8d1f", "ch-pass-3b9e", "kafka-user-71ac", "kafka-pass-0f5d", "s3-key-id-c2e7",
	"s3-secret-9a41", "grafana-hmac-5e2b", "am-token-d6f0", "grafana-admin-4c8a",
}

func writeSecretsValues(t testing.TB) string {
	t.Helper()
	v := fmt.Sprintf(`
clickhouse: {username: %s, password: %s}
kafka: {sasl: {enabled: true, username: %s, password: %s}}
s3: {endpoint: "minio:9000", bucket: captures, accessKeyId: %s, secretAccessKey: %s}
operator: {webhook: {enabled: true, tlsSecretName: webhook-tls, grafana: {hmacSecret: %s}, alertmanager: {token: %s}}}
grafana: {enabled: true, adminPassword: %s}
`, secretValues[0], secretValues[1], secretValues[2], secretValues[3], secretValues[4], secretValues[5], secretValues[6], secretValues[7], secretValues[8])
	path := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestNoSecretValueOutsideSecrets: every credential reaches the pods
// through a Secret; none appears in a ConfigMap, an environment value, an
// argument or an annotation (every object but a Secret is searched). With
// the embedded store (the values name no ClickHouse host) the passwords
// serve-clickhouse is given, and the ones the chart generates, included;
// with an external ClickHouse, the migration hook's Secret.
func TestNoSecretValueOutsideSecrets(t *testing.T) {
	for _, vc := range []valuesCase{
		{name: "secrets", files: []string{writeSecretsValues(t)}},
		{name: "secrets+external", files: []string{writeSecretsValues(t)}, sets: []string{"clickhouse.host=clickhouse.data"}},
	} {
		t.Run(vc.name, func(t *testing.T) { checkNoSecretValueOutsideSecrets(t, vc) })
	}
}

func checkNoSecretValueOutsideSecrets(t *testing.T, vc valuesCase) {
	m := render(t, "spikehunt", vc)
	if got, want := embedded(m), len(vc.sets) == 0; got != want {
		t.Fatalf("embedded store rendered: %v, want %v", got, want)
	}
	var inSecrets []string
	for _, s := range m.ofKind("Secret") {
		for _, field := range []string{"data", "stringData"} {
			values, _, _ := unstructured.NestedStringMap(s.Object, field)
			for _, v := range values {
				if field == "data" {
					b, err := base64.StdEncoding.DecodeString(v)
					if err != nil {
						t.Fatal(err)
					}
					v = string(b)
				}
				inSecrets = append(inSecrets, v)
			}
		}
	}
	for _, want := range secretValues {
		if !slices.ContainsFunc(inSecrets, func(v string) bool { return strings.Contains(v, want) }) {
			t.Errorf("%s is in no Secret: the test values do not reach the chart's Secrets", want)
		}
	}
	search := append([]string{}, secretValues...)
	for _, v := range inSecrets {
		if len(v) >= 8 { // shorter ones (a user name like "admin") may occur by chance
			search = append(search, v)
		}
	}
	for _, o := range m.objs {
		if o.GetKind() == "Secret" {
			continue
		}
		js, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range search {
			esc, _ := json.Marshal(v) // as it would appear in js
			if strings.Contains(string(js), v) || strings.Contains(string(js), string(esc[1:len(esc)-1])) {
				t.Errorf("%s/%s contains the secret value %q", o.GetKind(), o.GetName(), v)
			}
		}
	}
	if len(m.ofKind("ConfigMap")) < 3 {
		t.Errorf("only %d ConfigMaps searched", len(m.ofKind("ConfigMap")))
	}
}

// TestPodDisruptionBudgets: every Deployment with more than one replica
// has a budget that selects its pods; one-replica ones (detect, Grafana)
// and the agent (a DaemonSet, which drains leave alone) have none.
func TestPodDisruptionBudgets(t *testing.T) {
	for _, vc := range append(valuesCases(t), valuesCase{name: "grafana", sets: []string{"grafana.enabled=true"}}) {
		t.Run(vc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, "spikehunt", vc)
			pdbs := m.ofKind("PodDisruptionBudget")
			for _, w := range m.workloads(t) {
				var selecting []string
				for _, p := range pdbs {
					sel, _, _ := unstructured.NestedStringMap(p.Object, "spec", "selector", "matchLabels")
					if len(sel) > 0 && matches(sel, w.template.Labels) {
						selecting = append(selecting, p.GetName())
					}
				}
				want := 0
				if w.kind == "Deployment" && w.replicas > 1 {
					want = 1
				}
				if len(selecting) != want {
					t.Errorf("%s (%d replicas): PodDisruptionBudgets %v, want %d", w, w.replicas, selecting, want)
				}
			}
		})
	}
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestDetectRunsAloneAndRecreated: two passes over one service must not
// run at once, so detect has one replica and a Recreate rollout.
func TestDetectRunsAloneAndRecreated(t *testing.T) {
	m := render(t, "spikehunt", valuesCase{name: "default"})
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.mustFind(t, "Deployment", fullname()+"-detect").Object, &d); err != nil {
		t.Fatal(err)
	}
	replicas, strategy := *d.Spec.Replicas, d.Spec.Strategy.Type
	if replicas != 1 || strategy != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("detect: %d replicas, strategy %q; want 1 and Recreate", replicas, strategy)
	}
}

// TestMigrationHookFindsItsSecret: Helm runs the pre-install hook before
// it creates the release's objects, so every Secret the migration Job reads
// is either a hook of the same phase with a lower weight or one the chart
// does not create (an existing Secret the user names).
func TestMigrationHookFindsItsSecret(t *testing.T) {
	for _, vc := range valuesCases(t) {
		t.Run(vc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, "spikehunt", vc)
			var job *workload
			for _, w := range m.workloads(t) {
				if w.kind == "Job" {
					job = &w
				}
			}
			if embedded(m) {
				// The embedded store migrates in its own pod
				// (TestEmbeddedStoreMigratesBeforeItServes).
				if job != nil {
					t.Errorf("a migration Job beside the embedded store: it would run before the store exists")
				}
				return
			}
			if job == nil {
				t.Fatal("no migration Job")
			}
			ann := job.obj.GetAnnotations()
			if ann["helm.sh/hook"] != "pre-install,pre-upgrade" {
				t.Errorf("hook %q, want pre-install,pre-upgrade", ann["helm.sh/hook"])
			}
			if !strings.Contains(ann["helm.sh/hook-delete-policy"], "before-hook-creation") {
				t.Errorf("hook-delete-policy %q: a second upgrade would find the first Job", ann["helm.sh/hook-delete-policy"])
			}
			jobWeight, _ := strconv.Atoi(ann["helm.sh/hook-weight"])
			var refs []string
			for _, c := range containers(job.template.Spec) {
				if !slices.Equal(c.Command, []string{"/spikehunt", "migrate"}) {
					t.Errorf("command %q, want /spikehunt migrate", c.Command)
				}
				for _, e := range c.Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
						refs = append(refs, e.ValueFrom.SecretKeyRef.Name)
					}
				}
			}
			for _, v := range job.template.Spec.Volumes {
				if v.Secret != nil {
					refs = append(refs, v.Secret.SecretName)
				}
			}
			if len(refs) == 0 {
				t.Fatal("the migration Job reads no Secret: where is its DSN from?")
			}
			for _, name := range refs {
				s := m.find("Secret", name)
				if s == nil {
					continue // the user's own, there before the release
				}
				sa := s.GetAnnotations()
				w, _ := strconv.Atoi(sa["helm.sh/hook-weight"])
				if !strings.Contains(sa["helm.sh/hook"], "pre-install") || !strings.Contains(sa["helm.sh/hook"], "pre-upgrade") || w >= jobWeight {
					t.Errorf("the migration Job reads Secret %s, which the release creates after its pre-install hooks (hook %q weight %d, the Job's %d)",
						name, sa["helm.sh/hook"], w, jobWeight)
				}
			}
		})
	}
}

// TestRBACIsTheOperatorsOwn: the chart's ClusterRoles carry the rules of
// operator/config/rbac: the operator's generated role.yaml exactly, the
// agent's agent_role.yaml plus one GET of a Node (the hw_class label).
func TestRBACIsTheOperatorsOwn(t *testing.T) {
	s, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	source := map[string][]rbacv1.PolicyRule{}
	for _, o := range testenv.Manifests(t, s, filepath.Join("..", "operator", "config", "rbac")) {
		if cr, ok := o.(*rbacv1.ClusterRole); ok {
			source[cr.Name] = cr.Rules
		}
	}
	m := render(t, "spikehunt", valuesCase{name: "default"})
	chartRules := func(name string) []rbacv1.PolicyRule {
		var cr rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.mustFind(t, "ClusterRole", name).Object, &cr); err != nil {
			t.Fatal(err)
		}
		return cr.Rules
	}
	if diff := cmp.Diff(flattenRules(source["spikehunt-operator"]), flattenRules(chartRules(fullname()+"-operator"))); diff != "" {
		t.Errorf("operator ClusterRole vs operator/config/rbac/role.yaml (-source +chart):\n%s", diff)
	}
	if diff := cmp.Diff(flattenRules(source["spikehunt-agent"]), flattenRules(chartRules(fullname()+"-agent"))); diff != "" {
		t.Errorf("agent ClusterRole vs operator/config/rbac/agent_role.yaml (-source +chart):\n%s", diff)
	}
	if len(source["spikehunt-operator"]) == 0 || len(source["spikehunt-agent"]) == 0 {
		t.Fatalf("operator/config/rbac has ClusterRoles %v", source)
	}
}

// flattenRules lists "group resource verb" triples, sorted.
func flattenRules(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, fmt.Sprintf("%q %s %s", g, res, v))
				}
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// decodeTyped decodes rendered objects into typed ones, strictly (an
// unknown field fails), as the API server's own types.
func decodeTyped(t testing.TB, m manifest) []runtime.Object {
	t.Helper()
	s, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	dec := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
	var out []runtime.Object
	for _, o := range m.objs {
		if o.GroupVersionKind().Group == "monitoring.coreos.com" {
			continue // the Prometheus Operator's: TestTheAPIServerAcceptsTheChart checks them against its CRD
		}
		js, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := dec.Decode(js, nil, nil)
		if err != nil {
			t.Errorf("%s/%s: %v", o.GetKind(), o.GetName(), err)
			continue
		}
		out = append(out, obj)
	}
	return out
}

// TestRenderHasNoUnknownFields decodes every rendered object strictly into
// the Kubernetes types: a misspelt field in a template fails here, before
// the API server would drop it silently.
func TestRenderHasNoUnknownFields(t *testing.T) {
	for _, vc := range append(valuesCases(t), valuesCase{name: "grafana", sets: []string{"grafana.enabled=true"}}) {
		t.Run(vc.name, func(t *testing.T) {
			t.Parallel()
			decodeTyped(t, render(t, "spikehunt", vc))
		})
	}
}
