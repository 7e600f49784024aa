package chhttp

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spikehunt/spikehunt/internal/vocab"
	"go.yaml.in/yaml/v3"
)

// GrafanaProvisioning is what `serve-clickhouse --grafana-provisioning`
// tells a Grafana about the store it serves: the data source the
// dashboards use (uid spikehunt-clickhouse, as in
// dashboards/provisioning/datasources), pointing at the address it
// listens on and the store's database, and a dashboard provider.
// The static files under dashboards/provisioning name the database
// spikehunt, a server's; an embedded store has its own (the demo's is
// demo), so only the serving process can write a data source that
// matches it.
type GrafanaProvisioning struct {
	Host, Port string // where Grafana reaches serve-clickhouse
	Database   string
	// User is the user Grafana signs in as (empty: none is needed) and
	// PasswordEnv the environment variable Grafana reads its password
	// from: a provisioning file never holds a password.
	User, PasswordEnv string
	// Dashboards is the folder of the dashboards' JSON (dashboards/grafana
	// of a checkout, or the Helm chart's files/dashboards).
	Dashboards string
}

// Files that writeGrafanaProvisioning writes under its folder, in the
// layout Grafana reads from its provisioning path (GF_PATHS_PROVISIONING).
const (
	GrafanaDatasourceFile = "datasources/spikehunt.yaml"
	GrafanaDashboardsFile = "dashboards/spikehunt.yaml"
)

// NewGrafanaProvisioning is the provisioning for a Grafana that reaches
// serve-clickhouse on addr (the listener's bound address). A wildcard
// address becomes 127.0.0.1: Grafana on the same machine reaches it
// there, and a Grafana elsewhere needs an address only the operator knows.
func NewGrafanaProvisioning(addr, database, user, passwordEnv, dashboards string) (GrafanaProvisioning, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return GrafanaProvisioning{}, fmt.Errorf("listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	p := GrafanaProvisioning{Host: host, Port: port, Database: database, User: user, Dashboards: dashboards}
	if user != "" {
		p.PasswordEnv = passwordEnv
	}
	return p, nil
}

// datasourceYAML renders the data source file. Its keys are the
// grafana-clickhouse-datasource plugin's (jsonData, secureJsonData).
func (p GrafanaProvisioning) datasourceYAML() ([]byte, error) {
	port, err := strconv.Atoi(p.Port)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", p.Port, err)
	}
	type jsonData struct {
		Protocol        string `yaml:"protocol"`
		Host            string `yaml:"host"`
		Port            int    `yaml:"port"`
		Secure          bool   `yaml:"secure"`
		Username        string `yaml:"username,omitempty"`
		DefaultDatabase string `yaml:"defaultDatabase"`
		DialTimeout     int    `yaml:"dialTimeout"`
		QueryTimeout    int    `yaml:"queryTimeout"`
	}
	type datasource struct {
		Name           string            `yaml:"name"`
		UID            string            `yaml:"uid"`
		Type           string            `yaml:"type"`
		Editable       bool              `yaml:"editable"`
		JSONData       jsonData          `yaml:"jsonData"`
		SecureJSONData map[string]string `yaml:"secureJsonData,omitempty"`
	}
	ds := datasource{Name: "spikehunt ClickHouse", UID: vocab.DataSourceUID, Type: vocab.DataSourceType,
		JSONData: jsonData{Protocol: "http", Host: p.Host, Port: port, Username: p.User, DefaultDatabase: p.Database,
			DialTimeout: 10, QueryTimeout: 60}}
	if p.PasswordEnv != "" {
		// Grafana replaces ${VAR} with its own environment's value.
		ds.SecureJSONData = map[string]string{"password": "${" + p.PasswordEnv + "}"}
	}
	body, err := marshalYAML(map[string]any{"apiVersion": 1, "datasources": []datasource{ds}})
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by spikehunt serve-clickhouse --grafana-provisioning: the data source the\n")
	fmt.Fprintf(&b, "# spikehunt dashboards use, on this server's address and the store's database (%s).\n", p.Database)
	if p.PasswordEnv != "" {
		fmt.Fprintf(&b, "# Grafana reads %s's password from $%s in its own environment.\n", p.User, p.PasswordEnv)
	}
	b.Write(body)
	return b.Bytes(), nil
}

// dashboardsYAML renders the dashboard provider file (as
// dashboards/provisioning/dashboards/spikehunt.yaml, on p.Dashboards).
func (p GrafanaProvisioning) dashboardsYAML() ([]byte, error) {
	type provider struct {
		Name                  string         `yaml:"name"`
		OrgID                 int            `yaml:"orgId"`
		Type                  string         `yaml:"type"`
		Folder                string         `yaml:"folder"`
		FolderUID             string         `yaml:"folderUid"`
		AllowUIUpdates        bool           `yaml:"allowUiUpdates"`
		UpdateIntervalSeconds int            `yaml:"updateIntervalSeconds"`
		Options               map[string]any `yaml:"options"`
	}
	body, err := marshalYAML(map[string]any{"apiVersion": 1, "providers": []provider{{Name: "spikehunt", OrgID: 1, Type: "file",
		Folder: "spikehunt", FolderUID: "spikehunt", UpdateIntervalSeconds: 60, Options: map[string]any{"path": p.Dashboards}}}})
	if err != nil {
		return nil, err
	}
	return append([]byte("# Written by spikehunt serve-clickhouse --grafana-provisioning: the spikehunt dashboards,\n"+
		"# generated from dashboards/*.go (edit those, not the JSON).\n"), body...), nil
}

// marshalYAML is v in YAML indented by two spaces, as the files under
// dashboards/provisioning are.
func marshalYAML(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Write writes the provisioning files under dir, replacing earlier ones
// (the port may differ from run to run), and returns their paths.
func (p GrafanaProvisioning) Write(dir string) ([]string, error) {
	type file struct {
		name   string
		render func() ([]byte, error)
	}
	files := []file{{GrafanaDatasourceFile, p.datasourceYAML}}
	if p.Dashboards != "" {
		files = append(files, file{GrafanaDashboardsFile, p.dashboardsYAML})
	}
	var paths []string
	for _, f := range files {
		body, err := f.render()
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, f.name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("grafana provisioning: %w", err)
		}
		if err := os.WriteFile(path, body, 0o644); err != nil {
			return nil, fmt.Errorf("grafana provisioning: %w", err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// FindDashboards is the folder of the dashboards' JSON: dir when given,
// else dashboards/grafana in the working directory or a folder above it (a
// checkout), else the one beside the running binary (and, for a symbolic
// link, beside its target): ../share/spikehunt/dashboards, where `make
// install PREFIX=…` puts them, or ../dashboards/grafana, a checkout's bin/;
// else "". An installed binary run outside any checkout thus still
// provisions the dashboards.
func FindDashboards(dir string) string {
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return dir
		}
		return abs
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if cand := filepath.Join(d, "dashboards", "grafana"); hasDashboards(cand) {
				return cand
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	for _, cand := range DashboardsBesideBinary() {
		if hasDashboards(cand) {
			return cand
		}
	}
	return ""
}

// DashboardsBesideBinary lists the folders beside the running binary that
// FindDashboards looks in, in order.
func DashboardsBesideBinary() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	dirs := []string{filepath.Dir(exe)}
	if real, err := filepath.EvalSymlinks(exe); err == nil && filepath.Dir(real) != dirs[0] {
		dirs = append(dirs, filepath.Dir(real))
	}
	var c []string
	for _, d := range dirs {
		c = append(c, filepath.Join(filepath.Dir(d), "share", "spikehunt", "dashboards"), filepath.Join(filepath.Dir(d), "dashboards", "grafana"))
	}
	return c
}

func hasDashboards(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	return len(m) > 0
}
