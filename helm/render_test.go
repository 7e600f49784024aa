package helm_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

const (
	chartDir = "spikehunt"
	// The API server version envtest runs (deps/versions.env).
	kubeVersion = "1.33.4"
	release     = "sh"
)

// helmBinary is the helm CLI from `make deps` (SPIKEHUNT_HELM).
func helmBinary(t testing.TB) string {
	t.Helper()
	paths, err := testenv.Paths()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := paths.HelmBinary()
	if err != nil {
		t.Fatalf("%v (the chart tests exec helm; `make test` installs it and exports SPIKEHUNT_HELM)", err)
	}
	return bin
}

// runHelm runs helm with its homes in a temporary folder and returns its
// stdout; the error carries stderr.
func runHelm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(helmHome, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(helmHome, "config"),
		"HELM_DATA_HOME="+filepath.Join(helmHome, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// valuesCase is a way to install the chart: its values files (relative to
// helm/) and --set flags.
type valuesCase struct {
	name  string
	files []string
	sets  []string
}

// valuesCases are the default values and every example values file.
func valuesCases(t testing.TB) []valuesCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("%d example values files in %s/examples, want at least minimal, full, clickhouse-cluster, agent-no-bpftrace, strimzi and altinity", len(files), chartDir)
	}
	cases := []valuesCase{{name: "default"}}
	for _, f := range files {
		cases = append(cases, valuesCase{name: strings.TrimSuffix(filepath.Base(f), ".yaml"), files: []string{f}})
	}
	return cases
}

// manifest is one rendered chart: its objects in render order.
type manifest struct {
	namespace string
	objs      []*unstructured.Unstructured
}

var renders sync.Map // key → *renderResult

type renderResult struct {
	once sync.Once
	m    manifest
	err  error
}

// render renders the chart for vc into namespace (memoized: several tests
// look at the same render).
func render(t testing.TB, namespace string, vc valuesCase) manifest {
	t.Helper()
	m, err := tryRender(t, namespace, vc)
	if err != nil {
		t.Fatalf("render %s: %v", vc.name, err)
	}
	return m
}

func tryRender(t testing.TB, namespace string, vc valuesCase) (manifest, error) {
	t.Helper()
	key := namespace + "\x00" + strings.Join(vc.files, "\x00") + "\x00\x00" + strings.Join(vc.sets, "\x00")
	v, _ := renders.LoadOrStore(key, &renderResult{})
	r := v.(*renderResult)
	r.once.Do(func() {
		args := []string{"template", release, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}
		for _, f := range vc.files {
			args = append(args, "--values", f)
		}
		for _, s := range vc.sets {
			args = append(args, "--set", s)
		}
		out, err := runHelm(t, args...)
		if err != nil {
			r.err = err
			return
		}
		objs, err := decodeObjects([]byte(out))
		r.m, r.err = manifest{namespace: namespace, objs: objs}, err
	})
	return r.m, r.err
}

// decodeObjects splits a multi-document YAML stream into objects.
func decodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

func (m manifest) ofKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range m.objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func (m manifest) find(kind, name string) *unstructured.Unstructured {
	for _, o := range m.objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func (m manifest) mustFind(t testing.TB, kind, name string) *unstructured.Unstructured {
	t.Helper()
	o := m.find(kind, name)
	if o == nil {
		t.Fatalf("the render has no %s %s; it has %s", kind, name, strings.Join(m.names(), ", "))
	}
	return o
}

func (m manifest) names() []string {
	var out []string
	for _, o := range m.objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	sort.Strings(out)
	return out
}

// workload is an object that runs pods, with its pod template.
type workload struct {
	kind, name string
	replicas   int32 // 0 for a DaemonSet or a Job
	template   corev1.PodTemplateSpec
	hook       bool // a Helm hook (runs to completion before the release)
	obj        *unstructured.Unstructured
}

func (w workload) String() string { return w.kind + "/" + w.name }

// longRunning says whether the workload's containers run until stopped.
func (w workload) longRunning() bool {
	return w.kind == "Deployment" || w.kind == "DaemonSet" || w.kind == "StatefulSet"
}

func (m manifest) workloads(t testing.TB) []workload {
	t.Helper()
	var out []workload
	for _, o := range m.objs {
		w := workload{kind: o.GetKind(), name: o.GetName(), obj: o, hook: o.GetAnnotations()["helm.sh/hook"] != ""}
		var err error
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d)
			w.template = d.Spec.Template
			w.replicas = 1
			if d.Spec.Replicas != nil {
				w.replicas = *d.Spec.Replicas
			}
		case "StatefulSet":
			var s appsv1.StatefulSet
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &s)
			w.template = s.Spec.Template
			w.replicas = 1
			if s.Spec.Replicas != nil {
				w.replicas = *s.Spec.Replicas
			}
			// The pod as the StatefulSet controller makes it: a volume of each
			// claim template, bound to the claim of pod 0.
			for _, pvc := range s.Spec.VolumeClaimTemplates {
				w.template.Spec.Volumes = append(w.template.Spec.Volumes, corev1.Volume{Name: pvc.Name, VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name + "-" + s.Name + "-0"}}})
			}
		case "DaemonSet":
			var d appsv1.DaemonSet
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d)
			w.template = d.Spec.Template
		case "Job":
			var j batchv1.Job
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &j)
			w.template = j.Spec.Template
		case "CronJob":
			var c batchv1.CronJob
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &c)
			w.template = c.Spec.JobTemplate.Spec.Template
		case "Pod":
			var p corev1.Pod
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &p)
			w.template = corev1.PodTemplateSpec{ObjectMeta: p.ObjectMeta, Spec: p.Spec}
		default:
			continue
		}
		if err != nil {
			t.Fatalf("%s/%s: %v", o.GetKind(), o.GetName(), err)
		}
		out = append(out, w)
	}
	return out
}

// containers returns every container of a pod spec, init containers first.
func containers(spec corev1.PodSpec) []corev1.Container {
	return append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
}

func fullname() string { return release + "-spikehunt" }

// embedded says whether the render runs the chart's own ClickHouse store
// (values clickhouse.embedded: no host and no Secret of the user's).
func embedded(m manifest) bool {
	return m.find("StatefulSet", fullname()+"-clickhouse") != nil
}

// TestHelmLint lints the chart, strictly, with its default values and with
// each example values file.
func TestHelmLint(t *testing.T) {
	for _, vc := range valuesCases(t) {
		t.Run(vc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"lint", "--strict", chartDir}
			for _, f := range vc.files {
				args = append(args, "--values", f)
			}
			if out, err := runHelm(t, args...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// TestChartRenders renders the default values and every example, and
// checks that each has the parts of a fleet install it asks for.
func TestChartRenders(t *testing.T) {
	for _, vc := range valuesCases(t) {
		t.Run(vc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, "spikehunt", vc)
			if len(m.objs) < 15 {
				t.Fatalf("%d objects: %s", len(m.objs), strings.Join(m.names(), ", "))
			}
			fn := fullname()
			// Without a ClickHouse of the user's, the chart runs its own
			// store, which migrates itself; with one, the migration Job.
			store := struct{ kind, name string }{"Job", fn + "-migrate"}
			if embedded(m) {
				store = struct{ kind, name string }{"StatefulSet", fn + "-clickhouse"}
			}
			for _, want := range []struct{ kind, name string }{
				{"DaemonSet", fn + "-agent"},
				{"Deployment", fn + "-operator"},
				{"Deployment", fn + "-ingest"},
				{"Deployment", fn + "-detect"},
				store,
				{"ConfigMap", fn + "-grafana-datasource"},
				{"ServiceAccount", fn + "-agent"},
				{"ServiceAccount", fn + "-operator"},
				{"ClusterRole", fn + "-agent"},
				{"ClusterRole", fn + "-operator"},
			} {
				m.mustFind(t, want.kind, want.name)
			}
		})
	}
}

// TestValuesSchemaRejectsMistakes: values.schema.json refuses unknown keys
// and values out of range, and the templates refuse combinations that
// cannot work, each with a message that says what to change.
func TestValuesSchemaRejectsMistakes(t *testing.T) {
	tests := []struct {
		name string
		sets []string
		want string
	}{
		{"a misspelt backend", []string{"agent.capture.backends.bpftracee=true"}, "bpftracee"},
		{"a misspelt section", []string{"agent.capture.backend.perf=true"}, "backend"},
		{"an unknown top-level key", []string{"clickhous.host=x"}, "clickhous"},
		{"a container without limits", []string{"ingest.resources.limits=null"}, "limits"},
		{"an unknown sink", []string{"agent.sink=http"}, "sink"},
		{"an unknown protocol", []string{"clickhouse.protocol=grpc"}, "protocol"},
		{"a DSN parameter the store does not know", []string{"clickhouse.params.secure_mode=true"}, "secure_mode"},
		{"a database name the schema refuses", []string{"clickhouse.database=spike-hunt"}, "database"},
		{"no brokers", []string{"kafka.brokers=null"}, "brokers"},
		{"a TTL past ten years", []string{"clickhouse.ttlDays.requests=4000"}, "requests"},
		{"a bucket without an endpoint", []string{"s3.bucket=captures", "s3.accessKeyId=a", "s3.secretAccessKey=b"}, "s3.endpoint"},
		{"a bucket without keys", []string{"s3.bucket=captures", "s3.endpoint=minio:9000"}, "s3.accessKeyId"},
		{"SASL without credentials", []string{"kafka.sasl.enabled=true"}, "kafka.sasl.username"},
		{"MSK IAM, which the clients do not speak", []string{"kafka.sasl.mechanism=AWS_MSK_IAM"}, "mechanism"},
		{"a misspelt Kafka CA key", []string{"kafka.tls.caSecrets.name=ca"}, "caSecrets"},
		{"a client certificate without TLS", []string{"kafka.tls.clientCertSecret.name=user"}, "kafka.tls.enabled"},
		{"skip-verify beside a CA", []string{"kafka.tls.enabled=true", "kafka.tls.caSecret.name=ca", "kafka.tls.dangerousSkipVerify=true"}, "dangerousSkipVerify"},
		{"the otlp sink without the gateway", []string{"agent.sink=otlp", "otelGateway.enabled=false"}, "otelGateway.enabled"},
		{"the webhook without TLS", []string{"operator.webhook.enabled=true", "operator.webhook.grafana.hmacSecret=x", "operator.webhook.alertmanager.token=y"}, "tlsSecretName"},
		{"an agent without a receiver", []string{"agent.intake.otlpGrpc.enabled=false", "agent.intake.otlpHttp.enabled=false", "agent.intake.lineUdp.enabled=false", "agent.intake.lineUnix.enabled=false"}, "agent.intake"},
		{"two operators without leader election", []string{"operator.leaderElection=false"}, "leaderElection"},
		{"the webhook without its secret", []string{"operator.webhook.enabled=true", "operator.webhook.tlsSecretName=tls"}, "hmacSecret"},
		{"a signing key the generated Secret does not hold", []string{"alertSigning.currentKeyId=k2"}, "alertSigning.currentKeyId"},
		{"a key id that is no file name", []string{"alertSigning.keyIds={../k1}", "alertSigning.currentKeyId=../k1"}, "keyIds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tryRender(t, "spikehunt", valuesCase{name: tt.name, sets: tt.sets})
			if err == nil {
				t.Fatalf("--set %s rendered; want an error naming %q", strings.Join(tt.sets, " --set "), tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error does not name %q:\n%v", tt.want, err)
			}
		})
	}
}
