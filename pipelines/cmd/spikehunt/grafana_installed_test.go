package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/pipelines/services/chhttp"
	"go.yaml.in/yaml/v3"
)

// Installed as `make install` lays it out and run from a folder outside any
// checkout, serve-clickhouse --grafana-provisioning provisions the
// dashboards too, from PREFIX/share/spikehunt/dashboards, not only the
// data source.
func TestServeClickHouseOutsideACheckoutProvisionsTheInstalledDashboards(t *testing.T) {
	tmp := t.TempDir()
	prefix := filepath.Join(tmp, "prefix")
	share := filepath.Join(prefix, "share", "spikehunt", "dashboards")
	bin := filepath.Join(prefix, "bin", "spikehunt")
	for _, d := range []string{filepath.Dir(bin), share} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, spikehuntBin, bin, 0o755)
	boards, _ := filepath.Glob(filepath.Join("..", "..", "..", "dashboards", "grafana", "*.json"))
	if len(boards) == 0 {
		t.Fatal("no dashboards/grafana/*.json in the checkout")
	}
	for _, b := range boards {
		copyFile(t, b, filepath.Join(share, filepath.Base(b)), 0o644)
	}

	wd := filepath.Join(tmp, "elsewhere")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	prov := filepath.Join(tmp, "grafana")
	cmd := exec.Command(bin, "serve-clickhouse", "--dsn", "chdb://"+filepath.Join(tmp, "store"),
		"--listen", "127.0.0.1:0", "--grafana-provisioning", prov)
	cmd.Dir = wd
	var stderr strings.Builder
	cmd.Stderr = &stderr
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
			t.Fatalf("serve-clickhouse wrote no Grafana provisioning: %v\n%s", err, stderr.String())
		}
		if strings.HasPrefix(line, "Start Grafana") {
			break
		}
	}
	raw, err := os.ReadFile(filepath.Join(prov, chhttp.GrafanaDashboardsFile))
	if err != nil {
		t.Fatalf("no dashboard provider outside the checkout: %v\nstderr: %s", err, stderr.String())
	}
	var f struct {
		Providers []struct {
			Options struct{ Path string }
		}
	}
	if err := yaml.Unmarshal(raw, &f); err != nil || len(f.Providers) != 1 {
		t.Fatalf("%v\n%s", err, raw)
	}
	got, _ := filepath.EvalSymlinks(f.Providers[0].Options.Path)
	want, _ := filepath.EvalSymlinks(share)
	if got != want {
		t.Errorf("the provider reads %s, want the installed %s", f.Providers[0].Options.Path, share)
	}
}

// make install puts the dashboards where the installed binary looks.
func TestMakeInstallInstallsTheDashboards(t *testing.T) {
	out, err := exec.Command("make", "-n", "-C", filepath.Join("..", "..", ".."), "install", "PREFIX=/opt/sh").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n install: %v\n%s", err, out)
	}
	lines := strings.Split(string(out), "\n")
	if !slices.ContainsFunc(lines, func(l string) bool {
		return strings.Contains(l, "dashboards/grafana/*.json") && strings.Contains(l, "/opt/sh/share/spikehunt/dashboards")
	}) {
		t.Errorf("make install does not install dashboards/grafana/*.json into PREFIX/share/spikehunt/dashboards:\n%s", out)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}
