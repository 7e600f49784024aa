package helm_test

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestChartCopiesAreByteIdentical: the chart carries copies of files owned
// elsewhere (a chart cannot read outside its folder). Each set of copies
// has the same files as its source, byte for byte.
func TestChartCopiesAreByteIdentical(t *testing.T) {
	for _, tt := range []struct {
		what, source, copy string
		atLeast            int
	}{
		{"the operator's CRDs", "../operator/config/crd/bases/*.yaml", chartDir + "/crds/*.yaml", 2},
		{"the Grafana dashboards", "../dashboards/grafana/*.json", chartDir + "/files/dashboards/*.json", 0},
		{"the gateway Collector's config", "../pipelines/services/otel/config.yaml", chartDir + "/files/otel/config.yaml", 1},
		{"the dashboards' provider", "../dashboards/provisioning/dashboards/spikehunt.yaml", chartDir + "/files/provisioning/dashboards/spikehunt.yaml", 1},
	} {
		t.Run(tt.what, func(t *testing.T) {
			src, cp := globNames(t, tt.source), globNames(t, tt.copy)
			if len(src) < tt.atLeast {
				t.Fatalf("%s matches %d files, want at least %d", tt.source, len(src), tt.atLeast)
			}
			if !slices.Equal(slices.Sorted(maps.Keys(src)), slices.Sorted(maps.Keys(cp))) {
				t.Fatalf("%s has %v, the chart's %s has %v: run `make chart-sync`",
					filepath.Dir(tt.source), slices.Sorted(maps.Keys(src)), filepath.Dir(tt.copy), slices.Sorted(maps.Keys(cp)))
			}
			for name, path := range src {
				a, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(cp[name])
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a, b) {
					t.Errorf("%s differs from %s: run `make chart-sync`", cp[name], path)
				}
			}
		})
	}
}

// globNames maps base names to the paths pattern matches.
func globNames(t *testing.T, pattern string) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range paths {
		out[filepath.Base(p)] = p
	}
	return out
}
