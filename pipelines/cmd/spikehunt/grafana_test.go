package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/spikehunt/spikehunt/pipelines/services/chhttp"
	"go.yaml.in/yaml/v3"
)

// Served on every interface with a read-only user for Grafana, the data
// source serve-clickhouse writes names that user, the store's database and
// the port it listens on, and takes the password from the variable
// serve-clickhouse read it from; with those settings, as Grafana would use
// them, a SELECT of the store's tables answers and a write is refused.
func TestServeClickHouseWritesAGrafanaDataSourceThatSignsInAsTheReadOnlyUser(t *testing.T) {
	dir := t.TempDir()
	prov := filepath.Join(dir, "grafana")
	cmd := exec.Command(spikehuntBin, "serve-clickhouse", "--dsn", "chdb://"+filepath.Join(dir, "store")+"?database=fleet",
		"--listen", "0.0.0.0:0", "--user", "ingest", "--read-only-user", "grafana", "--grafana-provisioning", prov,
		"--grafana-dashboards", dir)
	cmd.Env = append(os.Environ(), "SPIKEHUNT_CLICKHOUSE_PASSWORD=rw-secret", "SPIKEHUNT_CLICKHOUSE_READONLY_PASSWORD=ro-secret")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewReader(out)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("serve-clickhouse wrote no Grafana provisioning: %v", err)
		}
		if strings.HasPrefix(line, "Grafana provisioning") {
			break
		}
	}

	raw, err := os.ReadFile(filepath.Join(prov, chhttp.GrafanaDatasourceFile))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "ro-secret") || strings.Contains(string(raw), "rw-secret") {
		t.Fatalf("a password in the provisioning file:\n%s", raw)
	}
	// As Grafana reads it: ${VAR} from its environment, then YAML.
	grafanaEnv := map[string]string{"SPIKEHUNT_CLICKHOUSE_READONLY_PASSWORD": "ro-secret"}
	var f struct {
		Datasources []struct {
			UID, Type      string
			JSONData       map[string]any    `yaml:"jsonData"`
			SecureJSONData map[string]string `yaml:"secureJsonData"`
		}
	}
	if err := yaml.Unmarshal([]byte(os.Expand(string(raw), func(k string) string { return grafanaEnv[k] })), &f); err != nil || len(f.Datasources) != 1 {
		t.Fatalf("%v\n%s", err, raw)
	}
	ds := f.Datasources[0]
	jd := ds.JSONData
	if ds.UID != "spikehunt-clickhouse" || jd["protocol"] != "http" || jd["host"] != "127.0.0.1" ||
		jd["username"] != "grafana" || jd["defaultDatabase"] != "fleet" || ds.SecureJSONData["password"] != "ro-secret" {
		t.Fatalf("data source %+v", ds)
	}
	if _, err := os.Stat(filepath.Join(prov, chhttp.GrafanaDashboardsFile)); err != nil {
		t.Errorf("no dashboard provider: %v", err)
	}

	conn, err := clickhouse.Open(&clickhouse.Options{Protocol: clickhouse.HTTP,
		Addr: []string{net.JoinHostPort(fmt.Sprint(jd["host"]), fmt.Sprint(jd["port"]))},
		Auth: clickhouse.Auth{Database: fmt.Sprint(jd["defaultDatabase"]), Username: "grafana", Password: ds.SecureJSONData["password"]}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var db string
	if err := conn.QueryRow(ctx, "SELECT currentDatabase()").Scan(&db); err != nil || db != "fleet" {
		t.Fatalf("currentDatabase() = %q, %v; want fleet", db, err)
	}
	if err := conn.Exec(ctx, "CREATE TABLE grafana_wrote (x UInt8) ENGINE = Memory"); err == nil {
		t.Error("Grafana's user created a table")
	}
}
