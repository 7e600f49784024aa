package helm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// reportCase is examples/full.yaml (an S3 bucket, two report users, a
// publicURL, the report port open to the ingress controller's namespace
// alone) with the chart's Grafana and TLS.
func reportCase(t testing.TB) valuesCase {
	return valuesCase{name: "report", files: []string{filepath.Join(chartDir, "examples", "full.yaml")},
		sets: []string{"grafana.enabled=true", "operator.reportServer.tls.secretName=report-tls"}}
}

// The operator serves capture reports when the chart has a bucket and
// users: on every replica, on its port, behind a Service, with its users
// from a Secret of hashes, its spool on an emptyDir, TLS when given; the
// NetworkPolicy lets in the ingress controller and the chart's Grafana.
func TestTheOperatorServesCaptureReportsWithABucketAndUsers(t *testing.T) {
	m := render(t, "spikehunt", reportCase(t))
	op := m.workload(t, fullname()+"-operator")
	c := op.template.Spec.Containers[0]
	for _, want := range []string{"--report.address=:8090", "--report.mode=proxy", "--report.presign-ttl=5m",
		"--report.users-file=/etc/spikehunt-operator/report-users/users.yaml", "--report.max-file-bytes=67108864",
		"--report.spool-dir=/var/spool/spikehunt-report", "--report.tls-cert-file=/etc/spikehunt-operator/report-tls/tls.crt",
		"--report.tls-key-file=/etc/spikehunt-operator/report-tls/tls.key", "--artifacts.config=/etc/spikehunt-operator/artifacts.yaml"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("the operator's arguments lack %s: %v", want, c.Args)
		}
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "report" && p.ContainerPort == 8090 }) {
		t.Errorf("no report port 8090: %v", c.Ports)
	}
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm.MountPath
	}
	vols := map[string]corev1.Volume{}
	for _, v := range op.template.Spec.Volumes {
		vols[v.Name] = v
	}
	if v := vols["report-users"]; v.Secret == nil || v.Secret.SecretName != fullname()+"-report-users" || mounts["report-users"] != "/etc/spikehunt-operator/report-users" {
		t.Errorf("the users volume %+v mounted at %q", v, mounts["report-users"])
	}
	if v := vols["report-spool"]; v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || mounts["report-spool"] != "/var/spool/spikehunt-report" {
		t.Errorf("the spool volume %+v mounted at %q: want a bounded emptyDir (the root filesystem is read-only)", v, mounts["report-spool"])
	}
	if v := vols["report-tls"]; v.Secret == nil || v.Secret.SecretName != "report-tls" || mounts["report-tls"] != "/etc/spikehunt-operator/report-tls" {
		t.Errorf("the TLS volume %+v mounted at %q", v, mounts["report-tls"])
	}

	var svc corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.mustFind(t, "Service", fullname()+"-operator-report").Object, &svc); err != nil {
		t.Fatal(err)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(op.template.Labels)) || len(svc.Spec.Ports) != 1 ||
		svc.Spec.Ports[0].TargetPort.String() != "report" || svc.Spec.Ports[0].Name != "https" {
		t.Errorf("the report Service %+v does not send https to every operator pod's report port", svc.Spec)
	}

	var np networkingv1.NetworkPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.mustFind(t, "NetworkPolicy", fullname()+"-operator").Object, &np); err != nil {
		t.Fatal(err)
	}
	grafana := m.workload(t, fullname()+"-grafana").template.Labels
	ingress := map[string]string{"kubernetes.io/metadata.name": "ingress-nginx"}
	var grafanaIn, ingressIn, elseIn bool
	for _, rule := range np.Spec.Ingress {
		if !slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port.IntValue() == 8090 }) {
			continue
		}
		for _, peer := range rule.From {
			switch {
			case peer.PodSelector != nil && peer.NamespaceSelector == nil:
				sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
				grafanaIn = grafanaIn || (err == nil && sel.Matches(labels.Set(grafana)))
			case peer.NamespaceSelector != nil:
				sel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
				ingressIn = ingressIn || (err == nil && sel.Matches(labels.Set(ingress)))
				elseIn = elseIn || (err == nil && sel.Matches(labels.Set{"kubernetes.io/metadata.name": "default"}))
			}
		}
	}
	if !grafanaIn || !ingressIn || elseIn {
		t.Errorf("the report port lets in Grafana %v, the ingress controller %v, another namespace %v: want Grafana and the ingress controller alone", grafanaIn, ingressIn, elseIn)
	}

	var users struct {
		Users []struct {
			Name         string   `yaml:"name"`
			PasswordHash string   `yaml:"password_hash"`
			Namespaces   []string `yaml:"namespaces"`
		} `yaml:"users"`
	}
	dec := yaml.NewDecoder(strings.NewReader(secretData(t, m, fullname()+"-report-users")["users.yaml"]))
	dec.KnownFields(true)
	if err := dec.Decode(&users); err != nil {
		t.Fatal(err)
	}
	if len(users.Users) != 2 || users.Users[0].Name != "oncall" || !strings.HasPrefix(users.Users[0].PasswordHash, "$2y$10$") ||
		!slices.Equal(users.Users[0].Namespaces, []string{"*"}) || users.Users[1].Name != "shop-team" ||
		!strings.HasPrefix(users.Users[1].PasswordHash, "sha256:") || !slices.Equal(users.Users[1].Namespaces, []string{"shop"}) {
		t.Errorf("the users file (operator/internal/report/users.go's format) %+v", users)
	}
	if op.template.Annotations["checksum/report-users"] == "" {
		t.Error("no checksum of the users on the pods: a changed user would not roll them (the server reads its users at start)")
	}
}

// The dashboards' report_base is operator.reportServer.publicURL, so that
// their artifact links open the reports where browsers reach them; the
// rest of each dashboard is the file, byte for byte.
func TestGrafanaProvisioningSetsReportBase(t *testing.T) {
	m := render(t, "spikehunt", reportCase(t))
	const public = "https://spikehunt-reports.example.com"
	for _, board := range []string{"captures", "host-drilldown"} {
		got := configMapData(t, m, fullname()+"-dashboard-"+board)[board+".json"]
		var d struct {
			Templating struct {
				List []struct {
					Name    string         `json:"name"`
					Query   string         `json:"query"`
					Current map[string]any `json:"current"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal([]byte(got), &d); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, v := range d.Templating.List {
			if v.Name == "report_base" {
				found = true
				if v.Query != public || v.Current["value"] != public || v.Current["text"] != public {
					t.Errorf("%s: report_base %+v, want %s", board, v, public)
				}
			}
		}
		if !found {
			t.Errorf("%s: no report_base variable", board)
		}
		file, err := os.ReadFile(filepath.Join(chartDir, "files", "dashboards", board+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(file), strings.ReplaceAll(got, `"`+public+`"`, `"http://localhost:8090"`)); diff != "" {
			t.Errorf("%s differs from its file beyond report_base:\n%s", board, diff)
		}
	}
}

// Without a bucket to read, or without users, the chart runs no report
// server: the server refuses to start without users, and a local store is
// on the nodes, out of the operator's reach.
func TestTheReportServerNeedsABucketAndUsers(t *testing.T) {
	users := []string{"operator.reportServer.users[0].name=a", "operator.reportServer.users[0].passwordHash=sha256:" + strings.Repeat("ab", 32),
		"operator.reportServer.users[0].namespaces[0]=shop"}
	for _, vc := range []valuesCase{
		{name: "default"},
		{name: "report-users-no-bucket", sets: users},
		{name: "report-bucket-no-users", sets: []string{"s3.bucket=captures", "s3.endpoint=minio:9000", "s3.accessKeyId=a", "s3.secretAccessKey=b"}},
		{name: "report-off", files: []string{filepath.Join(chartDir, "examples", "full.yaml")}, sets: []string{"operator.reportServer.enabled=false"}},
	} {
		t.Run(vc.name, func(t *testing.T) {
			m := render(t, "spikehunt", vc)
			args := strings.Join(m.workload(t, fullname()+"-operator").template.Spec.Containers[0].Args, " ")
			if strings.Contains(args, "--report.") || m.find("Service", fullname()+"-operator-report") != nil || m.find("Secret", fullname()+"-report-users") != nil {
				t.Errorf("a report server without a bucket and users: %s", args)
			}
		})
	}
	// Retention off, the report server still reads the bucket: the store
	// config is given, its deletes are not.
	m := render(t, "spikehunt", valuesCase{name: "report-keep-artifacts", files: []string{filepath.Join(chartDir, "examples", "full.yaml")}, sets: []string{"operator.deleteArtifacts=false"}})
	args := m.workload(t, fullname()+"-operator").template.Spec.Containers[0].Args
	if !slices.Contains(args, "--artifacts.config=/etc/spikehunt-operator/artifacts.yaml") || !slices.Contains(args, "--artifacts.delete=false") {
		t.Errorf("deleteArtifacts=false with the report server: %v", args)
	}
}

func TestTheReportServerValuesRejectMistakes(t *testing.T) {
	for _, tt := range []struct {
		name string
		sets []string
		want string
	}{
		{"a password in clear", []string{"operator.reportServer.users[0].name=a", "operator.reportServer.users[0].passwordHash=hunter2", "operator.reportServer.users[0].namespaces[0]=shop"}, "passwordHash"},
		{"a user without namespaces", []string{"operator.reportServer.users[0].name=a", "operator.reportServer.users[0].passwordHash=sha256:" + strings.Repeat("ab", 32)}, "namespaces"},
		{"an unknown mode", []string{"operator.reportServer.mode=presign"}, "mode"},
		{"a public URL without a scheme", []string{"operator.reportServer.publicURL=reports.example.com"}, "publicURL"},
		{"a public URL ending in a slash", []string{"operator.reportServer.publicURL=https://reports.example.com/"}, "publicURL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tryRender(t, "spikehunt", valuesCase{name: tt.name, sets: tt.sets})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("--set %s: %v, want an error naming %q", strings.Join(tt.sets, " "), err, tt.want)
			}
		})
	}
}
