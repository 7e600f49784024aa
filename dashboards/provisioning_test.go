package dashboards

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
	"go.yaml.in/yaml/v3"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/services/chhttp"
)

type datasourceFile struct {
	APIVersion  int `yaml:"apiVersion"`
	Datasources []struct {
		Name, UID, Type string
		JSONData        map[string]any    `yaml:"jsonData"`
		SecureJSONData  map[string]string `yaml:"secureJsonData"`
	} `yaml:"datasources"`
}

// readDatasource reads a provisioning file the way Grafana does: ${VAR}
// and $VAR from env, then YAML.
func readDatasource(t *testing.T, path string, env map[string]string) datasourceFile {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := os.Expand(string(raw), func(k string) string { return env[k] })
	var f datasourceFile
	if err := yaml.Unmarshal([]byte(text), &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if f.APIVersion != 1 || len(f.Datasources) != 1 {
		t.Fatalf("%s: want apiVersion 1 and one data source, got %+v", path, f)
	}
	return f
}

func TestProvisioningFiles(t *testing.T) {
	env := map[string]string{"SPIKEHUNT_CLICKHOUSE_HOST": "ch.example", "SPIKEHUNT_CLICKHOUSE_USER": "grafana",
		"SPIKEHUNT_CLICKHOUSE_PASSWORD": "pw-from-env"}
	for file, want := range map[string]struct {
		protocol string
		port     int
	}{"clickhouse-native.yaml": {"native", 9000}, "clickhouse-http.yaml": {"http", 8123}} {
		path := "provisioning/datasources/" + file
		ds := readDatasource(t, path, env).Datasources[0]
		jd := ds.JSONData
		if ds.UID != DatasourceUID || ds.Type != DatasourceType {
			t.Errorf("%s: uid %q type %q; the dashboards use %s of %s", file, ds.UID, ds.Type, DatasourceUID, DatasourceType)
		}
		if jd["protocol"] != want.protocol || jd["port"] != want.port || jd["host"] != "ch.example" ||
			jd["username"] != "grafana" || jd["defaultDatabase"] != "spikehunt" {
			t.Errorf("%s: jsonData %v", file, jd)
		}
		if ds.SecureJSONData["password"] != "pw-from-env" {
			t.Errorf("%s: the password must come from the environment into secureJsonData, got %v", file, ds.SecureJSONData)
		}
		raw, _ := os.ReadFile(path)
		if strings.Contains(string(raw), "password: ") && !strings.Contains(string(raw), "password: ${") {
			t.Errorf("%s: a literal password", file)
		}
	}
	raw, err := os.ReadFile("provisioning/dashboards/spikehunt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var prov struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name, Type string
			Options    map[string]any
		}
	}
	if err := yaml.Unmarshal(raw, &prov); err != nil || prov.APIVersion != 1 || len(prov.Providers) != 1 ||
		prov.Providers[0].Type != "file" || prov.Providers[0].Options["path"] == "" {
		t.Errorf("dashboard provider: %+v, %v", prov, err)
	}
}

// serveAndQueryOverHTTP serves the fleet's store with spikehunt
// serve-clickhouse's handler and runs every panel's query through the
// provisioned HTTP data source's settings with clickhouse-go, the client
// the Grafana plugin uses, as the read-only user the chart gives Grafana
// (every panel passes serve-clickhouse's gate and runs with readonly = 2).
// The database is the test's own, not spikehunt.
func serveAndQueryOverHTTP(t *testing.T, st *store.Embedded, queries map[string]string, rows map[string]int) {
	srv := httptest.NewServer(chhttp.New(st, chhttp.Config{User: "ingest", Password: "w", ReadOnlyUser: "grafana", ReadOnlyPassword: "s3cret"}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	env := map[string]string{"SPIKEHUNT_CLICKHOUSE_HOST": host, "SPIKEHUNT_CLICKHOUSE_USER": "grafana",
		"SPIKEHUNT_CLICKHOUSE_PASSWORD": "s3cret"}
	ds := readDatasource(t, "provisioning/datasources/clickhouse-http.yaml", env).Datasources[0]
	jd := ds.JSONData
	if jd["protocol"] != "http" {
		t.Fatalf("protocol %v", jd["protocol"])
	}
	p, _ := strconv.Atoi(port)
	conn, err := clickhouse.Open(&clickhouse.Options{
		Protocol: clickhouse.HTTP,
		Addr:     []string{fmt.Sprintf("%s:%d", jd["host"], p)},
		Auth:     clickhouse.Auth{Database: st.Database(), Username: jd["username"].(string), Password: ds.SecureJSONData["password"]},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for name, sql := range queries {
		r, err := conn.Query(context.Background(), sql)
		if err != nil {
			t.Errorf("%s over HTTP: %v", name, err)
			continue
		}
		n := 0
		for r.Next() {
			n++
		}
		if err := r.Err(); err != nil {
			t.Errorf("%s over HTTP: %v", name, err)
		}
		r.Close()
		if n != rows[name] {
			t.Errorf("%s: %d rows over HTTP, %d from the engine directly", name, n, rows[name])
		}
	}
}
