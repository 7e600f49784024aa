package helm_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The components whose pods the chart makes, by values key (a dotted
// path) and by the component label (and name suffix) of their objects.
// The migration Job runs with an external ClickHouse, the embedded store
// without one: extrasRender gives each its render.
var components = []struct{ key, name string }{
	{"agent", "agent"}, {"operator", "operator"}, {"ingest", "ingest"}, {"detect", "detect"},
	{"migrate", "migrate"}, {"otelGateway", "otel-gateway"}, {"grafana", "grafana"},
	{"clickhouse.embedded", "clickhouse"},
}

// extrasRender renders extrasValues, with an external ClickHouse for the
// components that run only with one (the migration Job).
func extrasRender(t testing.TB, component string) manifest {
	t.Helper()
	vc := valuesCase{name: "extras", files: []string{extrasValues(t)}}
	if component == "migrate" {
		vc = valuesCase{name: "extras+external", files: vc.files, sets: []string{"clickhouse.host=clickhouse.data"}}
	}
	return render(t, "spikehunt", vc)
}

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

var (
	extrasOnce sync.Once
	extrasPath string
)

// extrasValues is a values file that sets every per-component key the
// chart offers on every component (pod labels and annotations, extra
// environment, volumes and mounts, ServiceAccount annotations, a
// PodMonitor where there is /metrics), with the webhook, the chart's
// Grafana, a registry mirror and a digest.
func extrasValues(t testing.TB) string {
	t.Helper()
	extrasOnce.Do(func() {
		var b strings.Builder
		b.WriteString("global: {imageRegistry: \"mirror.example.com:5000/spikehunt\"}\n")
		own := map[string]string{
			"operator": "  webhook: {enabled: true, tlsSecretName: webhook-tls, grafana: {hmacSecret: h}, alertmanager: {token: a}}\n",
			"grafana": "  enabled: true\n" +
				"  clickhousePlugin: {url: \"https://plugins.example.com/grafana-clickhouse-datasource-4.3.2.linux_amd64.zip\"}\n" +
				"  plugins: [grafana-polystat-panel@2.1.14]\n",
		}
		for _, c := range components {
			// A dotted key is a section within a section.
			keys := strings.Split(c.key, ".")
			indent := strings.Repeat("  ", len(keys))
			for i, k := range keys {
				b.WriteString(strings.Repeat("  ", i) + k + ":\n")
			}
			for _, line := range []string{
				`podLabels: {example.com/team: perf-` + c.name + `}`,
				`podAnnotations: {example.com/note: ` + c.name + `}`,
				`extraEnv: [{name: EXTRA_` + strings.ToUpper(strings.ReplaceAll(c.name, "-", "_")) + `, value: "1"}]`,
				`extraVolumes: [{name: extra-ca, configMap: {name: corp-ca}}]`,
				`extraVolumeMounts: [{name: extra-ca, mountPath: /etc/corp-ca, readOnly: true}]`,
				`serviceAccount: {annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::123456789012:role/` + c.name + `"}}`,
			} {
				b.WriteString(indent + line + "\n")
			}
			b.WriteString(own[c.key])
			if c.key != "migrate" && c.key != "grafana" {
				b.WriteString(indent + "podMonitor: {enabled: true, interval: 15s, labels: {release: prometheus}}\n")
			}
			if c.key == "agent" || c.key == "otelGateway" {
				b.WriteString(indent + "image: {digest: " + testDigest + "}\n")
			}
		}
		extrasPath = filepath.Join(helmHome, "extras.yaml")
		if err := os.WriteFile(extrasPath, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	return extrasPath
}

func (m manifest) workload(t testing.TB, name string) workload {
	t.Helper()
	for _, w := range m.workloads(t) {
		if w.name == name {
			return w
		}
	}
	t.Fatalf("no workload %s in %v", name, m.names())
	return workload{}
}

// Every component's pods take the chart's per-component keys, under the
// same names: labels that do not break the selectors, annotations, an
// environment variable, a volume mounted where asked, and a ServiceAccount
// of their own carrying the annotations a cloud identity needs (IRSA,
// Workload Identity).
func TestEveryComponentTakesLabelsAnnotationsEnvVolumesAndAnIdentity(t *testing.T) {
	for _, c := range components {
		t.Run(c.key, func(t *testing.T) {
			m := extrasRender(t, c.name)
			w := m.workload(t, fullname()+"-"+c.name)
			pod := w.template
			if got := pod.Labels["example.com/team"]; got != "perf-"+c.name {
				t.Errorf("pod label example.com/team = %q, want perf-%s", got, c.name)
			}
			if pod.Labels["app.kubernetes.io/component"] != c.name {
				t.Errorf("the chart's component label is %q: podLabels must not replace it", pod.Labels["app.kubernetes.io/component"])
			}
			if sel, _, _ := unstructuredSelector(w); sel != nil && !sel.Matches(labels.Set(pod.Labels)) {
				t.Errorf("the %s's selector %v no longer selects its pods %v", w.kind, sel, pod.Labels)
			}
			if got := pod.Annotations["example.com/note"]; got != c.name {
				t.Errorf("pod annotation example.com/note = %q, want %s", got, c.name)
			}
			ctr := pod.Spec.Containers[0] // the main container; init containers are the chart's own
			env := "EXTRA_" + strings.ToUpper(strings.ReplaceAll(c.name, "-", "_"))
			if !slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == env && e.Value == "1" }) {
				t.Errorf("container %s has no %s=1: %v", ctr.Name, env, ctr.Env)
			}
			if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
				return v.Name == "extra-ca" && v.ConfigMap != nil && v.ConfigMap.Name == "corp-ca"
			}) {
				t.Errorf("no volume extra-ca from ConfigMap corp-ca: %v", pod.Spec.Volumes)
			}
			if !slices.ContainsFunc(ctr.VolumeMounts, func(vm corev1.VolumeMount) bool {
				return vm.Name == "extra-ca" && vm.MountPath == "/etc/corp-ca" && vm.ReadOnly
			}) {
				t.Errorf("extra-ca is not mounted read-only at /etc/corp-ca: %v", ctr.VolumeMounts)
			}
			saName := pod.Spec.ServiceAccountName
			if saName != fullname()+"-"+c.name {
				t.Fatalf("serviceAccountName %q, want the component's own %s-%s", saName, fullname(), c.name)
			}
			sa := m.mustFind(t, "ServiceAccount", saName)
			if got := sa.GetAnnotations()["eks.amazonaws.com/role-arn"]; !strings.HasSuffix(got, "role/"+c.name) {
				t.Errorf("ServiceAccount %s: role-arn annotation %q", saName, got)
			}
			if w.hook && sa.GetAnnotations()["helm.sh/hook"] == "" {
				t.Errorf("%s is a hook but its ServiceAccount %s is not: it would not exist when the hook runs", w, saName)
			}
		})
	}
}

// unstructuredSelector is the workload's spec.selector.
func unstructuredSelector(w workload) (labels.Selector, bool, error) {
	raw, ok, err := unstructuredMap(w.obj.Object, "spec", "selector")
	if !ok || err != nil {
		return nil, ok, err
	}
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &ls); err != nil {
		return nil, true, err
	}
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	return sel, true, err
}

func unstructuredMap(obj map[string]any, path ...string) (map[string]any, bool, error) {
	cur := obj
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = next
	}
	return cur, true, nil
}

// Images: <registry>/<repository>:<tag> by default; a digest replaces the
// tag (repo@sha256:…); global.imageRegistry replaces every image's
// registry, the Collector's and Grafana's included.
func TestImagesTakeARegistryATagOrADigest(t *testing.T) {
	images := func(m manifest) map[string]string {
		out := map[string]string{}
		for _, w := range m.workloads(t) {
			for _, c := range containers(w.template.Spec) {
				out[w.name] = c.Image
			}
		}
		return out
	}
	fn := fullname()
	def := images(render(t, "spikehunt", valuesCase{name: "default+grafana", sets: []string{"grafana.enabled=true"}}))
	for name, want := range map[string]string{
		fn + "-agent":        "ghcr.io/spikehunt/spikehunt-agent:0.1.0",
		fn + "-operator":     "ghcr.io/spikehunt/spikehunt-operator:0.1.0",
		fn + "-ingest":       "ghcr.io/spikehunt/spikehunt:0.1.0",
		fn + "-otel-gateway": "docker.io/otel/opentelemetry-collector-contrib:0.155.0",
		fn + "-grafana":      "docker.io/grafana/grafana:12.0.0",
	} {
		if def[name] != want {
			t.Errorf("default: %s runs %q, want %q", name, def[name], want)
		}
	}
	ext := images(extrasRender(t, ""))
	maps.Copy(ext, images(extrasRender(t, "migrate")))
	for name, want := range map[string]string{
		fn + "-clickhouse":   "mirror.example.com:5000/spikehunt/spikehunt:0.1.0",
		fn + "-agent":        "mirror.example.com:5000/spikehunt/spikehunt-agent@" + testDigest,
		fn + "-operator":     "mirror.example.com:5000/spikehunt/spikehunt-operator:0.1.0",
		fn + "-migrate":      "mirror.example.com:5000/spikehunt/spikehunt:0.1.0",
		fn + "-otel-gateway": "mirror.example.com:5000/spikehunt/otel/opentelemetry-collector-contrib@" + testDigest,
		fn + "-grafana":      "mirror.example.com:5000/spikehunt/grafana/grafana:12.0.0",
	} {
		if ext[name] != want {
			t.Errorf("with a mirror and digests: %s runs %q, want %q", name, ext[name], want)
		}
	}
	own := images(render(t, "spikehunt", valuesCase{name: "own-registry", sets: []string{"detect.image.registry=registry.example.com/team", "detect.image.tag=0.2.0", "image.tag=0.1.5"}}))
	if got := own[fn+"-detect"]; got != "registry.example.com/team/spikehunt:0.2.0" {
		t.Errorf("detect with its own registry and tag runs %q", got)
	}
	if got := own[fn+"-ingest"]; got != "ghcr.io/spikehunt/spikehunt:0.1.5" {
		t.Errorf("ingest with image.tag 0.1.5 runs %q", got)
	}
}

// Each PodMonitor (off by default) selects exactly its component's pods
// and scrapes a port those pods name.
func TestPodMonitorsScrapeEachComponentsMetricsPort(t *testing.T) {
	if pm := render(t, "spikehunt", valuesCase{name: "default"}).ofKind("PodMonitor"); len(pm) != 0 {
		t.Errorf("the default render has %d PodMonitors; they need the Prometheus Operator and must be asked for", len(pm))
	}
	m := render(t, "spikehunt", valuesCase{name: "extras", files: []string{extrasValues(t)}})
	monitors := m.ofKind("PodMonitor")
	if len(monitors) != 6 {
		t.Errorf("%d PodMonitors, want one each for the agent, operator, ingest, detect, gateway and embedded store: %v", len(monitors), m.names())
	}
	for _, pm := range monitors {
		raw, _, _ := unstructuredMap(pm.Object, "spec", "selector")
		var ls metav1.LabelSelector
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &ls); err != nil {
			t.Fatal(err)
		}
		sel, err := metav1.LabelSelectorAsSelector(&ls)
		if err != nil {
			t.Fatal(err)
		}
		if pm.GetLabels()["release"] != "prometheus" {
			t.Errorf("PodMonitor %s lacks the label podMonitor.labels gave: %v", pm.GetName(), pm.GetLabels())
		}
		endpoints, _ := pm.Object["spec"].(map[string]any)["podMetricsEndpoints"].([]any)
		if len(endpoints) != 1 {
			t.Fatalf("PodMonitor %s: endpoints %v", pm.GetName(), endpoints)
		}
		ep := endpoints[0].(map[string]any)
		if ep["path"] != "/metrics" || ep["interval"] != "15s" {
			t.Errorf("PodMonitor %s scrapes %v every %v", pm.GetName(), ep["path"], ep["interval"])
		}
		var selected []string
		for _, w := range m.workloads(t) {
			if !sel.Matches(labels.Set(w.template.Labels)) {
				continue
			}
			selected = append(selected, w.name)
			hasPort := false
			for _, c := range w.template.Spec.Containers {
				for _, p := range c.Ports {
					hasPort = hasPort || p.Name == ep["port"]
				}
			}
			if !hasPort {
				t.Errorf("PodMonitor %s scrapes port %v, which %s does not name", pm.GetName(), ep["port"], w)
			}
		}
		if len(selected) != 1 || selected[0] != pm.GetName() {
			t.Errorf("PodMonitor %s selects %v, want its own component's pods alone", pm.GetName(), selected)
		}
	}
}

// The operator's NetworkPolicy selects the operator's pods and names every
// port they open (the webhook, /metrics, the probes), and lets nothing in
// from outside the cluster by default.
func TestOperatorNetworkPolicyCoversEveryPortTheOperatorOpens(t *testing.T) {
	for _, vc := range []valuesCase{{name: "default"}, {name: "extras", files: []string{extrasValues(t)}}} {
		t.Run(vc.name, func(t *testing.T) {
			m := render(t, "spikehunt", vc)
			op := m.workload(t, fullname()+"-operator")
			var np networkingv1.NetworkPolicy
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.mustFind(t, "NetworkPolicy", fullname()+"-operator").Object, &np); err != nil {
				t.Fatal(err)
			}
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil || !sel.Matches(labels.Set(op.template.Labels)) {
				t.Fatalf("the policy's selector %v does not select the operator's pods %v (%v)", np.Spec.PodSelector, op.template.Labels, err)
			}
			allowed := map[string]bool{}
			for _, rule := range np.Spec.Ingress {
				for _, p := range rule.Ports {
					allowed[string(*p.Protocol)+"/"+p.Port.String()] = true
				}
				if len(rule.From) == 0 {
					t.Errorf("rule for %v lets in every address", rule.Ports)
				}
				for _, peer := range rule.From {
					if peer.IPBlock != nil {
						t.Errorf("rule for %v lets in %v by default", rule.Ports, peer.IPBlock)
					}
				}
			}
			n := 0
			for _, c := range op.template.Spec.Containers {
				for _, p := range c.Ports {
					n++
					if key := "TCP/" + strconv.Itoa(int(p.ContainerPort)); !allowed[key] {
						t.Errorf("port %s (%s) is not in the policy (it names %v)", key, p.Name, allowed)
					}
				}
			}
			if want := map[string]int{"default": 2, "extras": 3}[vc.name]; n != want {
				t.Errorf("the operator opens %d ports, want %d", n, want)
			}
		})
	}
}

// The webhook Service selects no pod: its EndpointSlice, which the chart
// makes empty, is where the leader writes its own address
// (operator/cmd/webhook_endpoint.go; its test runs two replicas). Before,
// the Service selected every operator pod, so a standby, which does not
// serve the webhook, received requests. The operator is told the slice,
// its namespace and its pod IP, and may get and update that slice alone:
// acting as its ServiceAccount on a real API server, it cannot create a
// slice or change another.
func TestTheWebhookServiceRoutesToTheLeaderAlone(t *testing.T) {
	m := render(t, "whslice", valuesCase{name: "extras", files: []string{extrasValues(t)}})
	name := fullname() + "-operator-webhook"
	svc := m.mustFind(t, "Service", name)
	if sel, ok, _ := unstructuredMap(svc.Object, "spec", "selector"); ok && len(sel) > 0 {
		t.Errorf("the webhook Service selects pods %v: every replica, standbys included, would receive alerts", sel)
	}
	var slice discoveryv1.EndpointSlice
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.mustFind(t, "EndpointSlice", name).Object, &slice); err != nil {
		t.Fatal(err)
	}
	if slice.Labels[discoveryv1.LabelServiceName] != name || len(slice.Endpoints) != 0 {
		t.Errorf("EndpointSlice %s: labels %v, endpoints %v; want the Service's, empty", name, slice.Labels, slice.Endpoints)
	}
	svcPorts, _ := svc.Object["spec"].(map[string]any)["ports"].([]any)
	if len(slice.Ports) != 1 || len(svcPorts) != 1 || *slice.Ports[0].Name != svcPorts[0].(map[string]any)["name"] {
		t.Errorf("the slice's ports %v do not carry the Service's port name (%v)", slice.Ports, svcPorts)
	}
	op := m.workload(t, fullname()+"-operator").template.Spec.Containers[0]
	for _, want := range []string{"--webhook.endpointslice=" + name, "--webhook.endpointslice-namespace=$(POD_NAMESPACE)", "--webhook.advertise-address=$(POD_IP)"} {
		if !slices.Contains(op.Args, want) {
			t.Errorf("the operator's arguments lack %s: %v", want, op.Args)
		}
	}
	if !slices.ContainsFunc(op.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
	}) {
		t.Errorf("POD_IP is not the downward API's status.podIP: %v", op.Env)
	}

	cfg, c, s := apiServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createNamespace(ctx, t, c, m.namespace, nil)
	for _, o := range m.objs {
		switch o.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding", "Service", "EndpointSlice":
		default:
			continue
		}
		if o.GetAnnotations()["helm.sh/hook"] != "" {
			continue
		}
		obj := o.DeepCopy()
		obj.SetNamespace(m.namespace)
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("%s/%s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	other := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "ingest-metrics", Namespace: m.namespace,
		Labels: map[string]string{discoveryv1.LabelServiceName: fullname() + "-ingest-metrics"}}, AddressType: discoveryv1.AddressTypeIPv4}
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	operator, err := client.New(testenv.AsServiceAccount(cfg, m.namespace, fullname()+"-operator"), client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ready := true
	testenv.CheckAccess(t, []testenv.Access{
		testenv.Attempt("the operator writes its address to the webhook's slice", func() error {
			var got discoveryv1.EndpointSlice
			if err := operator.Get(ctx, client.ObjectKey{Namespace: m.namespace, Name: name}, &got); err != nil {
				return err
			}
			got.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.1.2.3"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}
			return operator.Update(ctx, &got)
		}, true),
		testenv.Attempt("the operator cannot create a slice", func() error {
			return operator.Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "hijack", Namespace: m.namespace,
				Labels: map[string]string{discoveryv1.LabelServiceName: fullname() + "-grafana"}}, AddressType: discoveryv1.AddressTypeIPv4})
		}, false),
		testenv.Attempt("the operator cannot change another Service's slice", func() error {
			o := other.DeepCopy()
			o.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.1.2.3"}}}
			return operator.Update(ctx, o)
		}, false),
		testenv.Attempt("the operator cannot list slices", func() error {
			return operator.List(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace(m.namespace))
		}, false),
	})
}

// GF_PLUGINS_PREINSTALL pins the ClickHouse plugin's version (and takes a
// mirror's URL for an air-gapped install).
func TestGrafanaInstallsThePinnedClickHousePlugin(t *testing.T) {
	env := func(vc valuesCase) string {
		m := render(t, "spikehunt", vc)
		for _, e := range m.workload(t, fullname()+"-grafana").template.Spec.Containers[0].Env {
			if e.Name == "GF_PLUGINS_PREINSTALL" {
				return e.Value
			}
		}
		return ""
	}
	if got := env(valuesCase{name: "grafana", sets: []string{"grafana.enabled=true"}}); got != "grafana-clickhouse-datasource@4.3.2" {
		t.Errorf("default GF_PLUGINS_PREINSTALL %q, want the pinned grafana-clickhouse-datasource@4.3.2", got)
	}
	want := "grafana-clickhouse-datasource@4.3.2@https://plugins.example.com/grafana-clickhouse-datasource-4.3.2.linux_amd64.zip,grafana-polystat-panel@2.1.14"
	if got := env(valuesCase{name: "extras", files: []string{extrasValues(t)}}); got != want {
		t.Errorf("air-gapped GF_PLUGINS_PREINSTALL %q, want %q", got, want)
	}
	if got := env(valuesCase{name: "grafana-baked", sets: []string{"grafana.enabled=true", "grafana.clickhousePlugin.install=false"}}); got != "" {
		t.Errorf("with install: false GF_PLUGINS_PREINSTALL is %q", got)
	}
}

// The schema refuses the new keys' mistakes.
func TestValuesSchemaRefusesBadCompletenessKeys(t *testing.T) {
	for _, tt := range []struct {
		name string
		sets []string
		want string
	}{
		{"a tag for a digest", []string{"agent.image.digest=latest"}, "digest"},
		{"a short digest", []string{"ingest.image.digest=sha256:abc"}, "digest"},
		{"a URL for a registry", []string{"global.imageRegistry=https://mirror"}, "imageRegistry"},
		{"a misspelt ServiceAccount key", []string{"ingest.serviceAccount.annotation.a=b"}, "annotation"},
		{"a pod label Kubernetes refuses", []string{"detect.podLabels.team=perf team"}, "podLabels"},
		{"a mount without a path", []string{"operator.extraVolumeMounts[0].name=x"}, "mountPath"},
		{"a volume without a name", []string{"otelGateway.extraVolumes[0].emptyDir.medium=Memory"}, "name"},
		{"an interval Prometheus refuses", []string{"agent.podMonitor.interval=soon"}, "interval"},
		{"a PodMonitor for the migration", []string{"migrate.podMonitor.enabled=true"}, "podMonitor"},
		{"the plugin's latest version", []string{"grafana.clickhousePlugin.version=latest"}, "version"},
		{"a misspelt network policy key", []string{"operator.networkPolicy.from[0].podSelector.a=b"}, "from"},
		{"an unknown address family", []string{"operator.webhook.ipFamily=dual"}, "ipFamily"},
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

// The cut-down PodMonitor CRD is a real check under strict field
// validation: the chart's PodMonitor is accepted, the same with a
// misspelt field is refused.
func TestTheCutDownPodMonitorCRDRefusesAMisspeltField(t *testing.T) {
	_, c, _ := apiServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := render(t, "podmonitor", valuesCase{name: "extras", files: []string{extrasValues(t)}})
	createNamespace(ctx, t, c, m.namespace, nil)
	pm := m.mustFind(t, "PodMonitor", fullname()+"-ingest").DeepCopy()
	pm.SetNamespace(m.namespace)
	if err := c.Create(ctx, pm.DeepCopy(), client.DryRunAll, client.FieldValidation("Strict")); err != nil {
		t.Fatalf("the chart's PodMonitor: %v", err)
	}
	ep := pm.Object["spec"].(map[string]any)["podMetricsEndpoints"].([]any)[0].(map[string]any)
	ep["intervall"] = ep["interval"]
	delete(ep, "interval")
	if err := c.Create(ctx, pm, client.DryRunAll, client.FieldValidation("Strict")); err == nil || !strings.Contains(err.Error(), "intervall") {
		t.Errorf("a PodMonitor with spec.podMetricsEndpoints[0].intervall: %v, want a refusal naming it", err)
	}
}
