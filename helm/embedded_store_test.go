package helm_test

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/spikehunt/spikehunt/internal/store"
)

// storeSet is the embedded store's StatefulSet of a render.
func storeSet(t testing.TB, m manifest) appsv1.StatefulSet {
	t.Helper()
	var s appsv1.StatefulSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.mustFind(t, "StatefulSet", fullname()+"-clickhouse").Object, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func container(t testing.TB, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range containers(spec) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// noSecrets fails a test that reads a Secret the render does not have.
func noSecrets(t testing.TB) func(secret, key string) string {
	return func(secret, key string) string {
		t.Fatalf("Secret %s is not rendered", secret)
		return ""
	}
}

// A default install (no ClickHouse given) runs the embedded store as one
// StatefulSet pod on a PersistentVolume with authentication on, and every
// client reaches it over HTTP with credentials from the Secrets: ingest,
// detect and the operator as the read-write user, Grafana as the read-only
// one, each with the password serve-clickhouse is given.
func TestADefaultInstallRunsTheEmbeddedStoreAndEveryClientUsesIt(t *testing.T) {
	m := render(t, "spikehunt", valuesCase{name: "default+grafana+class", sets: []string{"grafana.enabled=true",
		"clickhouse.embedded.persistence.storageClassName=fast-ssd", "clickhouse.embedded.persistence.size=20Gi"}})
	s := storeSet(t, m)
	if *s.Spec.Replicas != 1 {
		t.Errorf("%d replicas: the engine owns its data directory alone", *s.Spec.Replicas)
	}
	if len(s.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("volumeClaimTemplates %v, want one for the data", s.Spec.VolumeClaimTemplates)
	}
	pvc := s.Spec.VolumeClaimTemplates[0]
	if pvc.Name != "data" || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "fast-ssd" || pvc.Spec.Resources.Requests.Storage().String() != "20Gi" {
		t.Errorf("volume claim %s: class %v, size %v; want data, fast-ssd, 20Gi", pvc.Name, pvc.Spec.StorageClassName, pvc.Spec.Resources.Requests.Storage())
	}
	serve := container(t, s.Spec.Template.Spec, "clickhouse")
	if !slices.Equal(serve.Command, []string{"/spikehunt", "serve-clickhouse"}) {
		t.Fatalf("the store runs %q", serve.Command)
	}
	// The data directory is on the volume; the root file system is read-only.
	dsnArg := ""
	for _, a := range serve.Args {
		if v, ok := strings.CutPrefix(a, "--dsn="); ok {
			dsnArg = v
		}
	}
	d, err := store.ParseDSN(dsnArg)
	if err != nil || d.Scheme != "chdb" {
		t.Fatalf("--dsn=%s: %v, want an embedded store", dsnArg, err)
	}
	onVolume := slices.ContainsFunc(serve.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return vm.Name == "data" && strings.HasPrefix(d.Dir, vm.MountPath+"/") && !vm.ReadOnly
	})
	if !onVolume {
		t.Errorf("the data directory %s is not on the volume data: %v", d.Dir, serve.VolumeMounts)
	}
	sc := serve.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("security context %+v: want a read-only root and every capability dropped", sc)
	}
	if ps := s.Spec.Template.Spec.SecurityContext; ps == nil || ps.RunAsUser == nil || *ps.RunAsUser != 65532 || ps.FSGroup == nil || *ps.FSGroup != 65532 {
		t.Errorf("pod security context %+v: want uid 65532 and fsGroup 65532 (the volume writable by it)", ps)
	}
	for _, p := range []*corev1.Probe{serve.ReadinessProbe, serve.LivenessProbe, serve.StartupProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
			t.Errorf("probe %+v: want /healthz", p)
		}
	}

	senv := expandEnv(t, m, serve, noSecrets(t))
	rwUser, rwPass := senv["SPIKEHUNT_CLICKHOUSE_USER"], senv["SPIKEHUNT_CLICKHOUSE_PASSWORD"]
	roUser, roPass := senv["SPIKEHUNT_CLICKHOUSE_READONLY_USER"], senv["SPIKEHUNT_CLICKHOUSE_READONLY_PASSWORD"]
	if rwUser == "" || len(rwPass) < 16 || roUser == "" || len(roPass) < 16 || rwUser == roUser {
		t.Fatalf("serve-clickhouse's users: %q (password of %d bytes), read-only %q (%d bytes); want two users with generated passwords", rwUser, len(rwPass), roUser, len(roPass))
	}

	svc := m.mustFind(t, "Service", fullname()+"-clickhouse")
	want := fullname() + "-clickhouse:8123"
	clients := map[string]bool{}
	for _, w := range m.workloads(t) {
		for _, c := range containers(w.template.Spec) {
			env := expandEnv(t, m, c, noSecrets(t))
			component := w.template.Labels["app.kubernetes.io/component"]
			if dsn, ok := env["SPIKEHUNT_DSN"]; ok {
				d, err := store.ParseDSN(dsn)
				if err != nil {
					t.Fatalf("%s: %v", w, err)
				}
				if d.Scheme != "http" || d.Address != want || d.Database != "spikehunt" || d.User != rwUser || d.Password != rwPass {
					t.Errorf("%s reaches %s://%s/%s as %q: want http://%s/spikehunt as the store's read-write user", w, d.Scheme, d.Address, d.Database, d.User, want)
				}
				clients[component] = true
			}
			if c.Name == "grafana" {
				if env["SPIKEHUNT_CLICKHOUSE_USER"] != roUser || env["SPIKEHUNT_CLICKHOUSE_PASSWORD"] != roPass {
					t.Errorf("Grafana queries as %q: want the store's read-only user %q with its password", env["SPIKEHUNT_CLICKHOUSE_USER"], roUser)
				}
				clients[component] = true
			}
		}
	}
	if got := slices.Sorted(maps.Keys(clients)); !slices.Equal(got, []string{"detect", "grafana", "ingest", "operator"}) {
		t.Errorf("clients of the store: %v, want detect, grafana, ingest, operator", got)
	}
	if !strings.Contains(configMapData(t, m, fullname()+"-grafana-datasource")["spikehunt-datasource.yaml"], "host: \""+svc.GetName()+".spikehunt.svc\"") {
		t.Errorf("Grafana's data source does not name the store's Service %s", svc.GetName())
	}
	if m.find("Job", fullname()+"-migrate") != nil {
		t.Error("a migration Job beside the embedded store: as a pre-install hook it runs before the store exists")
	}
}

// The embedded store applies the schema in an init container, with the
// options the migration Job would use, before serve-clickhouse opens the
// same data directory: no client sees a store without its tables.
func TestEmbeddedStoreMigratesBeforeItServes(t *testing.T) {
	sets := []string{"clickhouse.ttlDays.requests=3", "clickhouse.database=fleet"}
	m := render(t, "spikehunt", valuesCase{name: "ttl", sets: sets})
	s := storeSet(t, m)
	if len(s.Spec.Template.Spec.InitContainers) != 1 {
		t.Fatalf("init containers %v, want the migration", s.Spec.Template.Spec.InitContainers)
	}
	mig, serve := s.Spec.Template.Spec.InitContainers[0], container(t, s.Spec.Template.Spec, "clickhouse")
	if !slices.Equal(mig.Command, []string{"/spikehunt", "migrate"}) {
		t.Fatalf("init container runs %q", mig.Command)
	}
	// serve-clickhouse's DSN also names the database it serves
	// (?database=…); its folder must be the migration's.
	serveDSN, _, _ := strings.Cut(serve.Args[slices.IndexFunc(serve.Args, func(a string) bool { return strings.HasPrefix(a, "--dsn=") })], "?")
	if !slices.Contains(mig.Args, serveDSN) || !slices.Contains(serve.Args, serveDSN+"?database=fleet") {
		t.Errorf("the migration %q and serve-clickhouse %q open different data directories", mig.Args, serve.Args)
	}
	ext := render(t, "spikehunt", valuesCase{name: "ttl+external", sets: append(sets, "clickhouse.host=clickhouse.data")})
	job := ext.workload(t, fullname()+"-migrate").template.Spec.Containers[0]
	if got, want := slices.DeleteFunc(slices.Clone(mig.Args), func(a string) bool { return strings.HasPrefix(a, "--dsn=") }), job.Args; !slices.Equal(got, want) {
		t.Errorf("the init container migrates with %q, the Job with %q", got, want)
	}

	off := render(t, "spikehunt", valuesCase{name: "no-migrate", sets: []string{"migrate.enabled=false"}})
	if n := len(storeSet(t, off).Spec.Template.Spec.InitContainers); n != 0 {
		t.Errorf("migrate.enabled=false: %d init containers, want none", n)
	}
}

// persistence.enabled=false (a cluster without a StorageClass, for tests
// and evaluation) keeps the data in an emptyDir and asks for no volume.
func TestEmbeddedStoreWithoutPersistenceKeepsItsDataInAnEmptyDir(t *testing.T) {
	m := render(t, "spikehunt", valuesCase{name: "ephemeral", sets: []string{"clickhouse.embedded.persistence.enabled=false", "clickhouse.embedded.persistence.size=5Gi"}})
	s := storeSet(t, m)
	if len(s.Spec.VolumeClaimTemplates) != 0 {
		t.Errorf("volumeClaimTemplates %v with persistence off", s.Spec.VolumeClaimTemplates)
	}
	i := slices.IndexFunc(s.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "data" })
	if i < 0 || s.Spec.Template.Spec.Volumes[i].EmptyDir == nil || s.Spec.Template.Spec.Volumes[i].EmptyDir.SizeLimit.String() != "5Gi" {
		t.Errorf("volumes %v: want data as an emptyDir of 5Gi", s.Spec.Template.Spec.Volumes)
	}
}

// A ClickHouse of the user's (a host, or a Secret with the DSN, as in every
// example but small.yaml) renders no embedded store, and the clients use it.
func TestAnExternalClickHouseRendersNoEmbeddedStore(t *testing.T) {
	cases := []valuesCase{
		{name: "host", sets: []string{"clickhouse.host=clickhouse.data"}},
		{name: "existing-secret", sets: []string{"clickhouse.existingSecret=my-clickhouse"}},
	}
	for _, vc := range valuesCases(t) {
		if vc.name != "default" && vc.name != "small" {
			cases = append(cases, vc)
		}
	}
	for _, vc := range cases {
		t.Run(vc.name, func(t *testing.T) {
			m := render(t, "spikehunt", vc)
			for _, kind := range []string{"StatefulSet", "Service", "NetworkPolicy", "ServiceAccount"} {
				if m.find(kind, fullname()+"-clickhouse") != nil {
					t.Errorf("%s %s-clickhouse rendered beside an external ClickHouse", kind, fullname())
				}
			}
			for _, w := range m.workloads(t) {
				for _, c := range containers(w.template.Spec) {
					env := expandEnv(t, m, c, func(secret, key string) string { return "from-" + secret })
					if dsn := env["SPIKEHUNT_DSN"]; strings.Contains(dsn, fullname()+"-clickhouse") {
						t.Errorf("%s uses the embedded store's address: %s", w, dsn)
					}
				}
			}
			m.mustFind(t, "Job", fullname()+"-migrate")
		})
	}
}

// The store's NetworkPolicy lets in the chart's own clients (ingest,
// detect, the migration, the operator, Grafana) of this release and no
// other pod: not the agent, the gateway, nor another release's clients.
func TestEmbeddedStoreNetworkPolicyAdmitsOnlyItsClients(t *testing.T) {
	m := render(t, "spikehunt", valuesCase{name: "grafana", sets: []string{"grafana.enabled=true", "agent.sink=otlp"}})
	var np networkingv1.NetworkPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.mustFind(t, "NetworkPolicy", fullname()+"-clickhouse").Object, &np); err != nil {
		t.Fatal(err)
	}
	selects := func(ls metav1.LabelSelector, l map[string]string) bool {
		sel, err := metav1.LabelSelectorAsSelector(&ls)
		if err != nil {
			t.Fatal(err)
		}
		return sel.Matches(labels.Set(l))
	}
	s := storeSet(t, m)
	if !selects(np.Spec.PodSelector, s.Spec.Template.Labels) {
		t.Fatalf("the policy %v does not select the store's pods %v", np.Spec.PodSelector, s.Spec.Template.Labels)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.IntValue() != 8123 {
		t.Fatalf("ingress %+v: want one rule for port 8123", np.Spec.Ingress)
	}
	admitted := func(podLabels map[string]string) bool {
		for _, peer := range np.Spec.Ingress[0].From {
			if peer.PodSelector != nil && peer.NamespaceSelector == nil && peer.IPBlock == nil && selects(*peer.PodSelector, podLabels) {
				return true
			}
		}
		return false
	}
	got := map[string]bool{}
	for _, w := range m.workloads(t) {
		got[w.template.Labels["app.kubernetes.io/component"]] = admitted(w.template.Labels)
	}
	want := map[string]bool{"agent": false, "otel-gateway": false, "clickhouse": false, "ingest": true, "detect": true, "operator": true, "grafana": true}
	for c, w := range want {
		if got[c] != w {
			t.Errorf("%s admitted: %v, want %v", c, got[c], w)
		}
	}
	other := map[string]string{"app.kubernetes.io/name": "spikehunt", "app.kubernetes.io/instance": "other", "app.kubernetes.io/component": "ingest"}
	if admitted(other) {
		t.Error("another release's ingest is admitted")
	}
	mig := map[string]string{"app.kubernetes.io/name": "spikehunt", "app.kubernetes.io/instance": release, "app.kubernetes.io/component": "migrate"}
	if !admitted(mig) {
		t.Error("a migration pod of this release (spikehunt migrate run by hand, or a Job) is refused")
	}
}

// The schema and the templates refuse an embedded store with cluster
// options or misspelt persistence keys.
func TestValuesRefuseAnEmbeddedStoreTheyCannotRun(t *testing.T) {
	for _, tt := range []struct {
		name string
		sets []string
		want string
	}{
		{"a cluster without a host", []string{"clickhouse.cluster=prod"}, "clickhouse.host"},
		{"a misspelt persistence key", []string{"clickhouse.embedded.persistence.storageClass=fast"}, "storageClass"},
		{"an access mode Kubernetes does not know", []string{"clickhouse.embedded.persistence.accessModes={ReadWriteSome}"}, "accessModes"},
		{"a Secret of the user's without a DSN and no host", []string{"clickhouse.existingSecret=s", "clickhouse.existingSecretKeys.dsn="}, "clickhouse.host"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tryRender(t, "spikehunt", valuesCase{name: tt.name, sets: tt.sets})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("--set %s: %v, want an error naming %q", strings.Join(tt.sets, " --set "), err, tt.want)
			}
		})
	}
}

// The small-install example lints strictly and runs the embedded store.
func TestSmallExampleRunsTheEmbeddedStore(t *testing.T) {
	m := render(t, "spikehunt", valuesCase{name: "small", files: []string{filepath.Join(chartDir, "examples", "small.yaml")}})
	if !embedded(m) {
		t.Fatalf("examples/small.yaml renders no embedded store: %v", m.names())
	}
}

// With clickhouse.embedded.existingSecret the read-write user's
// credentials are the user's Secret's, for serve-clickhouse and every
// client alike (the DSN composed in the pod), and the chart makes no
// ClickHouse Secret of its own.
func TestEmbeddedStoreTakesTheUsersSecret(t *testing.T) {
	m := render(t, "spikehunt", valuesCase{name: "embedded-existing-secret", sets: []string{
		"clickhouse.embedded.existingSecret=my-clickhouse", "clickhouse.embedded.existingSecretKeys.username=user",
		"clickhouse.embedded.existingSecretKeys.password=pass"}})
	if !embedded(m) {
		t.Fatal("no embedded store")
	}
	if m.find("Secret", fullname()+"-clickhouse") != nil {
		t.Error("the chart's ClickHouse Secret is rendered beside the user's")
	}
	// URL-safe: the DSN is composed in the pod, unescaped (values.yaml says so).
	theirs := map[string]string{"user": "ingest-from-secret", "pass": "pass-From_the.secret~1"}
	lookup := func(secret, key string) string {
		if secret != "my-clickhouse" {
			t.Fatalf("reads Secret %s, not the user's", secret)
		}
		return theirs[key]
	}
	senv := expandEnv(t, m, container(t, storeSet(t, m).Spec.Template.Spec, "clickhouse"), lookup)
	if senv["SPIKEHUNT_CLICKHOUSE_USER"] != theirs["user"] || senv["SPIKEHUNT_CLICKHOUSE_PASSWORD"] != theirs["pass"] {
		t.Errorf("serve-clickhouse's user %q / %q, want the Secret's", senv["SPIKEHUNT_CLICKHOUSE_USER"], senv["SPIKEHUNT_CLICKHOUSE_PASSWORD"])
	}
	n := 0
	for _, w := range m.workloads(t) {
		for _, c := range containers(w.template.Spec) {
			env := expandEnv(t, m, c, func(secret, key string) string {
				if secret == "my-clickhouse" {
					return theirs[key]
				}
				return "from-" + secret
			})
			dsn, ok := env["SPIKEHUNT_DSN"]
			if !ok {
				continue
			}
			n++
			d, err := store.ParseDSN(dsn)
			if err != nil {
				t.Fatalf("%s: %v", w, err)
			}
			if d.User != theirs["user"] || d.Password != theirs["pass"] || d.Address != fullname()+"-clickhouse:8123" || d.Database != "spikehunt" {
				t.Errorf("%s: DSN %s", w, dsn)
			}
		}
	}
	if n != 3 { // ingest, detect, operator
		t.Errorf("%d clients of the store, want 3", n)
	}
}
