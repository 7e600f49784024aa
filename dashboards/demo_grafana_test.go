package dashboards

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"go.yaml.in/yaml/v3"
)

// The README's Grafana-on-the-demo instructions pointed Grafana at the
// provisioned data source, whose defaultDatabase is spikehunt, while the
// demo's store is database=demo: every panel failed. Now the demo prints
// one command that serves its store for a Grafana of one's own and writes
// the provisioning that matches it. This runs the demo as a user would
// (its default store, under a temporary cache folder), runs the command it
// prints, reads the data source file that command wrote, connects as the
// Grafana ClickHouse plugin does with exactly those settings (clickhouse-go
// over HTTP, host, port, defaultDatabase, username), resolves every
// dashboard's variables with their own queries, and runs every panel,
// annotation and variable query: each answers with rows.
//
// The demo's fleet is 300 hosts: each heatmap must also draw its rows at
// 8 pixels or more.
func TestGrafanaProvisionedByTheDemoReadsTheDemosTablesInEveryPanel(t *testing.T) {
	bin := buildSpikehunt(t)
	cache := t.TempDir()
	env := append(os.Environ(), "XDG_CACHE_HOME="+cache)

	demo := exec.Command(bin, "demo", "--hosts", "300", "--hours", "0.5", "--local-capture=false")
	demo.Env = env
	var demoErr strings.Builder
	demo.Stderr = &demoErr
	out, err := demo.Output()
	if err != nil {
		t.Fatalf("spikehunt demo: %v\n%s", err, demoErr.String())
	}
	serveLine := lineStarting(string(out), "Grafana: spikehunt ")
	explore := regexp.MustCompile(`--from (\S+) --to (\S+)`).FindStringSubmatch(lineStarting(string(out), "Explore: "))
	if serveLine == "" || explore == nil {
		t.Fatalf("the demo names no command that serves its store for Grafana (a line \"Grafana: spikehunt …\") or no time range:\n%s", out)
	}
	args, err := shellWords(strings.TrimPrefix(serveLine, "Grafana: spikehunt "))
	if err != nil {
		t.Fatal(err)
	}
	provDir := flagValue(args, "--grafana-provisioning")
	if len(args) == 0 || args[0] != "serve-clickhouse" || provDir == "" {
		t.Fatalf("the demo's Grafana command %q does not run serve-clickhouse --grafana-provisioning DIR", serveLine)
	}
	// Port 8123 may be taken on a shared machine: the provisioning must
	// follow the port the server really has.
	serve := exec.Command(bin, append(args, "--listen", "127.0.0.1:0")...)
	serve.Env = env
	serve.Stderr = os.Stderr
	stdout, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { serve.Process.Kill(); serve.Wait() })
	served := bufio.NewReader(stdout)
	for {
		line, err := served.ReadString('\n')
		if err != nil {
			t.Fatalf("serve-clickhouse ended before writing the Grafana provisioning: %v", err)
		}
		t.Logf("serve-clickhouse: %s", strings.TrimSpace(line))
		if strings.HasPrefix(line, "Grafana provisioning") {
			break
		}
	}
	go io.Copy(io.Discard, served)

	ds := readDatasource(t, filepath.Join(provDir, "datasources", "spikehunt.yaml"), map[string]string{}).Datasources[0]
	jd := ds.JSONData
	if ds.UID != DatasourceUID || ds.Type != DatasourceType || jd["protocol"] != "http" {
		t.Fatalf("data source uid %q type %q protocol %v: the dashboards use %s of %s", ds.UID, ds.Type, jd["protocol"], DatasourceUID, DatasourceType)
	}
	checkDashboardProvider(t, filepath.Join(provDir, "dashboards", "spikehunt.yaml"))
	user, _ := jd["username"].(string)
	database, _ := jd["defaultDatabase"].(string)
	conn, err := clickhouse.Open(&clickhouse.Options{
		Protocol:    clickhouse.HTTP,
		Addr:        []string{net.JoinHostPort(fmt.Sprint(jd["host"]), fmt.Sprint(jd["port"]))},
		Auth:        clickhouse.Auth{Database: database, Username: user, Password: ds.SecureJSONData["password"]},
		DialTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// From the simulated hours' start to now, as Grafana's "now-6h"
	// shows them after the demo: the demo's own detector pass is
	// stamped when it ran, after the simulated hours.
	from, err := time.Parse(time.RFC3339, explore[1])
	if err != nil {
		t.Fatalf("the demo's range starts %q: %v", explore[1], err)
	}
	to := time.Now().Add(time.Minute)
	for _, b := range Boards() {
		q := grafanaQuery{From: from, To: to, Interval: autoInterval(from, to, 0), Vars: map[string]any{}, All: map[string]bool{}}
		// Variables in order, each from its own query as Grafana
		// resolves them: one value, or All for a multi-value one.
		for _, v := range b.Vars {
			if v.SQL == "" {
				q.Vars[v.Name] = v.Default
				continue
			}
			vals := queryOverProvisioned(t, conn, q, v.SQL).column(0)
			if len(vals) == 0 && !noCapturesInDemo(b.File, "var-"+v.Name) {
				t.Fatalf("%s: variable %s has no values on the demo's store", b.File, v.Name)
			}
			switch {
			case v.Multi && v.IncludeAll:
				q.Vars[v.Name], q.All[v.Name] = vals, true
			case v.Name == "host":
				q.Vars[v.Name] = spikiestHost(t, conn, q)
			default:
				q.Vars[v.Name] = vals[0]
			}
		}
		for _, r := range b.Rows {
			for _, p := range r.Panels {
				if p.SQL == "" {
					continue
				}
				t.Run(b.File+"/"+p.Key, func(t *testing.T) {
					res := queryOverProvisioned(t, conn, q, p.SQL)
					if len(res.rows) == 0 && !emptyOnSim[p.Key] && !noCapturesInDemo(b.File, p.Key) {
						t.Errorf("%s: no rows from the demo's store", p.Title)
					}
					if p.Type == "heatmap" {
						checkHeatmapRows(t, p, res)
					}
					if b.File == "fleet-overview" && p.Key == "per-host" {
						checkSpikiestHostsShown(t, conn, q, res)
					}
				})
			}
		}
		for _, a := range b.Annotations {
			if res := queryOverProvisioned(t, conn, q, a.SQL); len(res.rows) == 0 {
				t.Errorf("%s: annotation %q has no rows on host %v", b.File, a.Name, q.Vars["host"])
			}
		}
	}
}

// noCapturesInDemo are the panels the demo leaves empty, whose queries
// still run: capture rows (the demo indexes a capture only from its local
// capture on this host, root and perf, which this test leaves off), and
// the store's care (its store is in process, not serve-clickhouse).
func noCapturesInDemo(board, panel string) bool {
	switch board + "/" + panel {
	case "captures/index", "captures/bytes-time", "captures/status", "captures/var-backend", "captures/var-status",
		"host-drilldown/host-captures",
		// The demo's store is in process: no serve-clickhouse, so no
		// store care writes its figures.
		"pipeline-health/store-free", "pipeline-health/store-parts":
		return true
	}
	return false
}

// checkDashboardProvider: the provider file written beside the data source
// loads a folder that holds every dashboard.
func checkDashboardProvider(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var prov struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Type    string
			Options struct{ Path string }
		}
	}
	if err := yaml.Unmarshal(raw, &prov); err != nil || prov.APIVersion != 1 || len(prov.Providers) != 1 || prov.Providers[0].Type != "file" {
		t.Fatalf("%s: %v\n%s", path, err, raw)
	}
	for _, b := range Boards() {
		if _, err := os.Stat(filepath.Join(prov.Providers[0].Options.Path, b.File+".json")); err != nil {
			t.Errorf("the dashboard provider's folder lacks %s: %v", b.File, err)
		}
	}
}

// checkSpikiestHostsShown: the per-host heatmap draws ${top} hosts, and
// none it leaves out has more spike windows than one it draws.
func checkSpikiestHostsShown(t *testing.T, conn clickhouse.Conn, q grafanaQuery, res provisionedResult) {
	t.Helper()
	shown := map[string]bool{}
	for _, h := range res.column(slices.Index(res.names, "host")) {
		shown[h] = true
	}
	counts := queryOverProvisioned(t, conn, q, `SELECT h.host, s.n FROM (SELECT DISTINCT host FROM latency_1m WHERE `+whereService+
		` AND $__timeFilter(ts)) AS h LEFT JOIN (SELECT host, count() AS n FROM spikes FINAL WHERE `+whereService+
		` AND is_deleted = 0 AND $__timeFilter(window_start) GROUP BY host) AS s ON s.host = h.host`)
	top, _ := strconv.Atoi(fmt.Sprint(q.Vars["top"]))
	if want := min(top, len(counts.rows)); len(shown) != want {
		t.Errorf("the per-host heatmap draws %d hosts; want %d (Hosts shown %d, %d hosts)", len(shown), want, top, len(counts.rows))
	}
	leastShown, mostHidden := math.MaxInt, -1
	for _, r := range counts.rows {
		n, _ := strconv.Atoi(r[1])
		if shown[r[0]] {
			leastShown = min(leastShown, n)
		} else {
			mostHidden = max(mostHidden, n)
		}
	}
	if mostHidden > leastShown {
		t.Errorf("a host with %d spike windows is left out while one with %d is drawn", mostHidden, leastShown)
	}
	t.Logf("the per-host heatmap draws %d of %d hosts, %d+ spike windows each; the others have at most %d",
		len(shown), len(counts.rows), leastShown, mostHidden)
}

// minHeatmapRowPx is the least height of a heatmap row that still reads as
// a row: the hosts' names on the axis need about that much.
const minHeatmapRowPx = 8

// checkHeatmapRows: the rows a heatmap draws (its label values: hosts,
// CPUs) fit its height at minHeatmapRowPx each.
func checkHeatmapRows(t *testing.T, p Panel, res provisionedResult) {
	t.Helper()
	labels := map[string]bool{}
	for _, row := range res.rows {
		var key []string
		for i, typ := range res.types {
			if stringType(typ) {
				key = append(key, row[i])
			}
		}
		labels[strings.Join(key, "\x00")] = true
	}
	if px := plotHeightPx(p.H); px < minHeatmapRowPx*len(labels) {
		t.Errorf("%s: %d rows in %d pixels of plot (%.1f px a row); want ≥ %d px a row", p.Title, len(labels), px,
			float64(px)/float64(len(labels)), minHeatmapRowPx)
	}
}

// plotHeightPx is the height of a panel's plot in pixels: Grafana's grid
// row is 30 px with 8 px between rows, less the title bar and the colour
// scale below a heatmap (about 60 px together).
func plotHeightPx(gridH int) int { return 30*gridH + 8*(gridH-1) - 60 }

// spikiestHost is the host with the most spike windows, for the
// dashboards that drill into one host (its annotations, captures and
// counters are the ones worth a look).
func spikiestHost(t *testing.T, conn clickhouse.Conn, q grafanaQuery) string {
	t.Helper()
	res := queryOverProvisioned(t, conn, q, `SELECT host FROM spikes FINAL WHERE `+whereService+
		` AND is_deleted = 0 AND $__timeFilter(window_start) GROUP BY host ORDER BY count() DESC, host LIMIT 1`)
	if len(res.rows) == 0 {
		t.Fatal("no spike windows on the demo's store")
	}
	return res.rows[0][0]
}

// provisionedResult is a query's answer as text, with its column types.
type provisionedResult struct {
	names, types []string
	rows         [][]string
}

func (r provisionedResult) column(i int) []string {
	var out []string
	for _, row := range r.rows {
		out = append(out, row[i])
	}
	return out
}

// queryOverProvisioned expands sql as Grafana would and runs it over conn,
// the provisioned data source's connection.
func queryOverProvisioned(t *testing.T, conn clickhouse.Conn, q grafanaQuery, sql string) provisionedResult {
	t.Helper()
	x, err := q.Expand(sql)
	if err != nil {
		t.Fatalf("expanding: %v\n%s", err, sql)
	}
	rows, err := conn.Query(context.Background(), x)
	if err != nil {
		t.Fatalf("through the provisioned data source: %v\n%s", err, x)
	}
	defer rows.Close()
	var res provisionedResult
	for _, ct := range rows.ColumnTypes() {
		res.names, res.types = append(res.names, ct.Name()), append(res.types, ct.DatabaseTypeName())
	}
	for rows.Next() {
		vals := make([]any, len(res.names))
		for i, ct := range rows.ColumnTypes() {
			vals[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(vals...); err != nil {
			t.Fatalf("scanning: %v\n%s", err, x)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = fmt.Sprint(reflect.ValueOf(v).Elem().Interface())
		}
		res.rows = append(res.rows, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%v\n%s", err, x)
	}
	return res
}

// buildSpikehunt builds the spikehunt CLI into the test's folder.
func buildSpikehunt(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "spikehunt")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/spikehunt/spikehunt/pipelines/cmd/spikehunt").CombinedOutput(); err != nil {
		t.Fatalf("go build spikehunt: %v\n%s", err, out)
	}
	return bin
}

func lineStarting(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// shellWords splits a command line printed for a POSIX shell: words
// separated by blanks, single quotes kept literal.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case quoted && r == '\'':
			quoted = false
		case quoted:
			w.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case r == ' ' || r == '\t':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unbalanced quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// flagValue is the value of the last `name value` or `name=value` in args.
func flagValue(args []string, name string) string {
	v := ""
	for i, a := range args {
		if a == name && i+1 < len(args) {
			v = args[i+1]
		} else if after, ok := strings.CutPrefix(a, name+"="); ok {
			v = after
		}
	}
	return v
}
