package helm_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// configMapData returns a rendered ConfigMap's data.
func configMapData(t testing.TB, m manifest, name string) map[string]string {
	t.Helper()
	data, _, err := unstructured.NestedStringMap(m.mustFind(t, "ConfigMap", name).Object, "data")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// secretData returns a rendered Secret's stringData.
func secretData(t testing.TB, m manifest, name string) map[string]string {
	t.Helper()
	data, _, err := unstructured.NestedStringMap(m.mustFind(t, "Secret", name).Object, "stringData")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestConfigMapsCarryTheFilesByteForByte: the gateway's config, the
// dashboards and their provider reach the pods exactly as in the chart's
// files (which TestChartCopiesAreByteIdentical ties to their sources).
func TestConfigMapsCarryTheFilesByteForByte(t *testing.T) {
	m := render(t, "spikehunt", valuesCase{name: "grafana", sets: []string{"grafana.enabled=true"}})
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join(chartDir, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := configMapData(t, m, fullname()+"-otel-gateway")["config.yaml"]; got != read("files/otel/config.yaml") {
		t.Errorf("the gateway ConfigMap's config.yaml is not files/otel/config.yaml:\n%s", cmp.Diff(read("files/otel/config.yaml"), got))
	}
	if got := configMapData(t, m, fullname()+"-grafana-dashboard-provider")["spikehunt-dashboards.yaml"]; got != read("files/provisioning/dashboards/spikehunt.yaml") {
		t.Errorf("the dashboard provider differs from files/provisioning/dashboards/spikehunt.yaml:\n%s", got)
	}
	files := globNames(t, filepath.Join(chartDir, "files", "dashboards", "*.json"))
	seen := 0
	for _, cm := range m.ofKind("ConfigMap") {
		if cm.GetLabels()["grafana_dashboard"] != "1" {
			continue
		}
		for key, got := range configMapData(t, m, cm.GetName()) {
			seen++
			if got != read(filepath.Join("files", "dashboards", key)) {
				t.Errorf("ConfigMap %s key %s is not files/dashboards/%s", cm.GetName(), key, key)
			}
		}
	}
	if seen != len(files) {
		t.Errorf("%d dashboards in ConfigMaps labelled grafana_dashboard=1, %d files", seen, len(files))
	}
}

// TestGrafanaDataSourceIsTheDashboardsOwn: the chart provisions the data
// source of dashboards/provisioning (uid spikehunt-clickhouse, which every
// dashboard names), with the server filled in from the values; Grafana
// expands the same variables in both.
func TestGrafanaDataSourceIsTheDashboardsOwn(t *testing.T) {
	for _, tt := range []struct {
		name, file, host string
		sets             []string
	}{
		{"native", "clickhouse-native.yaml", "clickhouse", []string{"clickhouse.host=clickhouse", "clickhouse.protocol=native"}},
		{"http", "clickhouse-http.yaml", "clickhouse", []string{"clickhouse.host=clickhouse", "clickhouse.protocol=http"}},
		// The embedded store speaks HTTP only, whatever clickhouse.protocol says.
		{"embedded", "clickhouse-http.yaml", fullname() + "-clickhouse.spikehunt.svc", []string{"clickhouse.protocol=native"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"SPIKEHUNT_CLICKHOUSE_HOST": tt.host, "SPIKEHUNT_CLICKHOUSE_USER": "grafana", "SPIKEHUNT_CLICKHOUSE_PASSWORD": "pw"}
			parse := func(text string) map[string]any {
				var v map[string]any
				if err := yaml.Unmarshal([]byte(os.Expand(text, func(k string) string { return env[k] })), &v); err != nil {
					t.Fatal(err)
				}
				return v
			}
			want, err := os.ReadFile(filepath.Join("..", "dashboards", "provisioning", "datasources", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			m := render(t, "spikehunt", valuesCase{name: tt.name, sets: tt.sets})
			got := configMapData(t, m, fullname()+"-grafana-datasource")["spikehunt-datasource.yaml"]
			if diff := cmp.Diff(parse(string(want)), parse(got)); diff != "" {
				t.Errorf("the chart's data source vs dashboards/provisioning (-dashboards +chart):\n%s", diff)
			}
		})
	}
}

// TestDashboardsNameTheProvisionedDataSource: every data source reference
// in the chart's dashboards is the provisioned uid, Grafana's own, or the
// dashboard's data source variable over the ClickHouse plugin.
func TestDashboardsNameTheProvisionedDataSource(t *testing.T) {
	files := globNames(t, filepath.Join(chartDir, "files", "dashboards", "*.json"))
	for name, path := range files {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var d map[string]any
		if err := yaml.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		variables := map[string]bool{}
		if tmpl, ok := d["templating"].(map[string]any); ok {
			list, _ := tmpl["list"].([]any)
			for _, v := range list {
				v, _ := v.(map[string]any)
				if v["type"] == "datasource" && v["query"] == "grafana-clickhouse-datasource" {
					variables[fmt.Sprint("${", v["name"], "}")] = true
				}
			}
		}
		walk(d, func(key string, v any) {
			ds, ok := v.(map[string]any)
			if key != "datasource" || !ok {
				return
			}
			uid := fmt.Sprint(ds["uid"])
			if uid != "spikehunt-clickhouse" && uid != "-- Grafana --" && !variables[uid] {
				t.Errorf("%s: a panel's data source uid %q is neither spikehunt-clickhouse nor a ClickHouse data source variable", name, uid)
			}
		})
	}
}

func walk(v any, fn func(key string, v any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			fn(k, c)
			walk(c, fn)
		}
	case []any:
		for _, c := range v {
			walk(c, fn)
		}
	}
}

// TestClickHouseDSNSurvivesAnyCredentials: the chart composes the DSN from
// the values with the credentials escaped, and the store's own parser
// reads back the same user, password, server and database; the migration's
// DSN has no database (it creates it).
func TestClickHouseDSNSurvivesAnyCredentials(t *testing.T) {
	tests := []struct {
		name, user, password, protocol string
		secure                         bool
		port                           int
		wantAddr, wantScheme           string
	}{
		{"native", "spikehunt", "plain", "native", false, 0, "clickhouse.data:9000", "clickhouse"},
		{"native TLS", "spikehunt", "p@ss:w/rd?&#% +x", "native", true, 0, "clickhouse.data:9440", "clickhouse"},
		{"HTTP", "user@corp", "a+b=c;d'e\"f\\g", "http", false, 0, "clickhouse.data:8123", "http"},
		{"HTTPS on a port of its own", "ünï", "$(NOT_A_VAR) ${X} ünïcødé", "http", true, 18443, "clickhouse.data:18443", "https"},
		{"no password", "default", "", "native", false, 0, "clickhouse.data:9000", "clickhouse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			values, err := yaml.Marshal(map[string]any{"clickhouse": map[string]any{
				"host": "clickhouse.data", "username": tt.user, "password": tt.password, "protocol": tt.protocol,
				"secure": tt.secure, "port": tt.port, "database": "fleet",
			}})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(path, values, 0o600); err != nil {
				t.Fatal(err)
			}
			m := render(t, "spikehunt", valuesCase{name: tt.name, files: []string{path}})
			for secret, wantDB := range map[string]string{fullname() + "-clickhouse": "fleet", fullname() + "-migrate": ""} {
				raw := secretData(t, m, secret)["dsn"]
				d, err := store.ParseDSN(raw)
				if err != nil {
					t.Fatalf("%s: %v", secret, err)
				}
				got := fmt.Sprintf("%s %q %q %s %q tls=%v", d.Scheme, d.User, d.Password, d.Address, d.Database, d.TLS != nil)
				want := fmt.Sprintf("%s %q %q %s %q tls=%v", tt.wantScheme, tt.user, tt.password, tt.wantAddr, wantDB, tt.secure)
				if got != want {
					t.Errorf("%s dsn %s parses as\n %s, want\n %s", secret, raw, got, want)
				}
			}
		})
	}
}

// expandEnv resolves a container's environment as the kubelet does:
// fieldRefs from the pod, secretKeyRefs from the render (lookup gives
// the value of a Secret the chart does not render), $(VAR) references to
// variables defined earlier in the list.
func expandEnv(t testing.TB, m manifest, c corev1.Container, lookup func(secret, key string) string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expandVars(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = map[string]string{"spec.nodeName": "node-a", "status.hostIP": "127.0.0.1", "status.podIP": "10.244.0.7", "metadata.namespace": "spikehunt"}[e.ValueFrom.FieldRef.FieldPath]
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if s := m.find("Secret", ref.Name); s != nil {
				v, ok := secretData(t, m, ref.Name)[ref.Key]
				if !ok {
					t.Fatalf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
				}
				env[e.Name] = v
			} else {
				env[e.Name] = lookup(ref.Name, ref.Key)
			}
		}
	}
	return env
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandVars replaces $(VAR) of defined variables, as Kubernetes does in
// env values, command and args; undefined references stay as they are.
func expandVars(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := env[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

// TestDSNFromAnExistingSecret: with a Secret of the user's that has no dsn
// key (the Altinity example), the DSN is composed in the pod from the
// Secret's user and password, which precede it in the environment.
func TestDSNFromAnExistingSecret(t *testing.T) {
	m := render(t, "spikehunt", valuesCase{name: "altinity", files: []string{filepath.Join(chartDir, "examples", "altinity.yaml")}})
	secrets := map[string]string{"username": "spikehunt", "password": "pw-From_the.secret~1"}
	n := 0
	for _, w := range m.workloads(t) {
		for _, c := range containers(w.template.Spec) {
			env := expandEnv(t, m, c, func(secret, key string) string { return secrets[key] })
			dsn, ok := env["SPIKEHUNT_DSN"]
			if !ok {
				continue
			}
			n++
			d, err := store.ParseDSN(dsn)
			if err != nil {
				t.Fatalf("%s: %v", w, err)
			}
			wantDB := "spikehunt"
			if w.kind == "Job" {
				wantDB = ""
			}
			if d.User != "spikehunt" || d.Password != secrets["password"] || d.Address != "clickhouse-spikehunt.clickhouse.svc:9000" || d.Database != wantDB {
				t.Errorf("%s: DSN %s parses as %+v", w, dsn, d)
			}
		}
	}
	if n != 4 { // operator, ingest, detect, migrate
		t.Errorf("%d containers have SPIKEHUNT_DSN, want 4", n)
	}
}

// TestArtifactStoreConfigsAreValid: the capture store section of the
// agent's configuration and the operator's --artifacts.config decode
// strictly into the agent's artifact.StoreConfig and pass its Validate,
// and the environment variables they name are set from the S3 Secret.
func TestArtifactStoreConfigsAreValid(t *testing.T) {
	for _, vc := range valuesCases(t) {
		t.Run(vc.name, func(t *testing.T) {
			m := render(t, "spikehunt", vc)
			var agentCfg struct {
				Capture struct {
					Store yaml.Node `yaml:"store"`
				} `yaml:"capture"`
			}
			if err := yaml.Unmarshal([]byte(configMapData(t, m, fullname()+"-agent")["config.yaml"]), &agentCfg); err != nil {
				t.Fatal(err)
			}
			stores := map[string][]byte{}
			b, err := yaml.Marshal(&agentCfg.Capture.Store)
			if err != nil {
				t.Fatal(err)
			}
			stores["agent"] = b
			if cm := m.find("ConfigMap", fullname()+"-operator"); cm != nil {
				stores["operator"] = []byte(configMapData(t, m, cm.GetName())["artifacts.yaml"])
			}
			for who, raw := range stores {
				var cfg artifact.StoreConfig
				dec := yaml.NewDecoder(bytes.NewReader(raw))
				dec.KnownFields(true)
				if err := dec.Decode(&cfg); err != nil {
					t.Fatalf("%s store config: %v\n%s", who, err, raw)
				}
				if err := cfg.Validate(); err != nil {
					t.Errorf("%s store config: %v\n%s", who, err, raw)
				}
				if cfg.S3 == nil || cfg.S3.Credentials == artifact.S3CredentialsAmbient {
					continue // no keys to find (TestAmbientS3CredentialsGiveTheAgentAndTheOperatorNoKeysAndTheirIdentity)
				}
				workload := map[string]string{"agent": fullname() + "-agent", "operator": fullname() + "-operator"}[who]
				for _, w := range m.workloads(t) {
					if w.name != workload {
						continue
					}
					env := expandEnv(t, m, w.template.Spec.Containers[0], func(secret, key string) string { return "from-" + secret })
					for _, name := range []string{cfg.S3.AccessKeyEnv, cfg.S3.SecretKeyEnv} {
						if env[name] == "" {
							t.Errorf("%s: the store reads $%s, which the container does not set", who, name)
						}
					}
				}
			}
		})
	}
}

// TestGatewayConfigIsValidForTheCollector runs the Collector of
// pipelines/services/otel (same release as the chart's image) on the ConfigMap's
// files with the Deployment's environment: `validate` decodes every
// component's configuration strictly.
func TestGatewayConfigIsValidForTheCollector(t *testing.T) {
	paths, err := testenv.Paths()
	if err != nil {
		t.Fatal(err)
	}
	otelcol, err := paths.OtelcolBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, vc := range []valuesCase{{name: "default"}, {name: "full", files: []string{filepath.Join(chartDir, "examples", "full.yaml")}}} {
		t.Run(vc.name, func(t *testing.T) {
			m := render(t, "spikehunt", vc)
			dir := t.TempDir()
			for key, text := range configMapData(t, m, fullname()+"-otel-gateway") {
				if err := os.WriteFile(filepath.Join(dir, key), []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var gw workload
			for _, w := range m.workloads(t) {
				if w.name == fullname()+"-otel-gateway" {
					gw = w
				}
			}
			c := gw.template.Spec.Containers[0]
			mount := ""
			for _, vm := range c.VolumeMounts {
				if vm.Name == "config" {
					mount = vm.MountPath
				}
			}
			env := expandEnv(t, m, c, func(secret, key string) string { return "x" })
			args := []string{"validate"}
			for _, a := range c.Args {
				args = append(args, strings.Replace(a, "file:"+mount+"/", "file:"+dir+"/", 1))
			}
			if vc.name == "full" && !strings.Contains(strings.Join(args, " "), "sasl.yaml") {
				t.Errorf("the full example enables kafka.sasl, the gateway's args %q do not load sasl.yaml", args)
			}
			cmd := exec.Command(otelcol, args...)
			for k, v := range env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", otelcol, strings.Join(args, " "), err, out)
			}
		})
	}
}

// Grafana queries ClickHouse as a read-only user of its own, never with the
// ingest's credentials; a values file that gives it the ingest's user is
// refused.
func TestGrafanaUsesReadOnlyCredentialsApartFromTheIngests(t *testing.T) {
	sets := []string{"grafana.enabled=true", "clickhouse.username=ingest", "clickhouse.password=w", "grafana.datasource.password=r"}
	m := render(t, "spikehunt", valuesCase{name: "grafana read-only", sets: sets})
	var env map[string]string
	for _, w := range m.workloads(t) {
		for _, c := range containers(w.template.Spec) {
			if c.Name == "grafana" {
				env = expandEnv(t, m, c, func(secret, key string) string { t.Fatalf("Secret %s not rendered", secret); return "" })
			}
		}
	}
	if env == nil {
		t.Fatal("no grafana container")
	}
	if env["SPIKEHUNT_CLICKHOUSE_USER"] != "grafana" || env["SPIKEHUNT_CLICKHOUSE_PASSWORD"] != "r" {
		t.Fatalf("Grafana's ClickHouse credentials are %q / %q, want grafana / r", env["SPIKEHUNT_CLICKHOUSE_USER"], env["SPIKEHUNT_CLICKHOUSE_PASSWORD"])
	}
	same := append(sets, "grafana.datasource.username=ingest")
	if _, err := tryRender(t, "spikehunt", valuesCase{name: "grafana as the ingest", sets: same}); err == nil || !strings.Contains(err.Error(), "read-only user of its own") {
		t.Fatalf("Grafana with the ingest's user: err %v, want a refusal", err)
	}
}
