package walls

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// listed is what `go list -deps -json` says of one package.
type listed struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
	Module     *struct{ Path string }
}

// graph is the module's import graph for one GOOS, from the go command.
func graph(t *testing.T, goos string) []Package {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard,Imports,Deps,Module", Module+"/...")
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	std := map[string]bool{"C": true, "unsafe": true}
	var all []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var l listed
		if err := dec.Decode(&l); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		std[l.ImportPath] = std[l.ImportPath] || l.Standard
		all = append(all, l)
	}
	rel := func(p string) string { return strings.TrimPrefix(p, Module+"/") }
	relAll := func(ps []string) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = rel(p)
		}
		return out
	}
	var g []Package
	for _, l := range all {
		if l.Module == nil || l.Module.Path != Module {
			continue
		}
		p := Package{Path: rel(l.ImportPath), Imports: relAll(l.Imports), Deps: relAll(l.Deps), Standard: map[string]bool{}}
		for _, d := range append(append([]string(nil), l.Imports...), l.Deps...) {
			if std[d] {
				p.Standard[rel(d)] = true
			}
		}
		g = append(g, p)
	}
	if len(g) < 20 {
		t.Fatalf("go list found %d of the module's packages; want them all", len(g))
	}
	return g
}

// The module keeps every wall its ARCHITECTURE.md files state, on Linux
// and on Windows (the agent's PDH sampler and WPR recorder are
// Windows-only files).
func TestTheImportGraphKeepsEveryWall(t *testing.T) {
	for _, goos := range []string{"linux", "windows"} {
		t.Run(goos, func(t *testing.T) {
			for _, v := range Check(graph(t, goos), Rules) {
				t.Error(v)
			}
		})
	}
}

// The check fails when a wall is broken: each of these graphs is the real
// shape with one forbidden edge added.
func TestABrokenWallIsReported(t *testing.T) {
	std := map[string]bool{"fmt": true, "net/http": true}
	for _, tc := range []struct {
		name string
		pkg  Package
		want string
	}{
		{"an app's client takes a third-party module",
			Package{Path: "agents/client", Imports: []string{"fmt", "github.com/x/y"}, Deps: []string{"fmt", "github.com/x/y"}, Standard: std},
			"agents/client depends on github.com/x/y: the standard library only"},
		{"the intake imports the capture engine",
			Package{Path: "agents/intake", Imports: []string{"agents/telemetry", "agents/capture"}, Deps: []string{"agents/telemetry", "agents/capture"}, Standard: std},
			"agents/intake imports agents/capture: not allowed"},
		{"the detector reaches an agent recorder through a new package",
			Package{Path: "pipelines/detect", Imports: []string{"pipelines/store"}, Deps: []string{"pipelines/store", "agents/capture"}, Standard: std},
			"pipelines/detect depends on agents/capture, which it must never hold"},
		{"the agent imports the store",
			Package{Path: "agents/export", Imports: []string{"pipelines/store"}, Deps: []string{"pipelines/store"}, Standard: std},
			"agents/export imports pipelines/store: not allowed"},
		{"the store takes another module",
			Package{Path: "pipelines/store", Imports: []string{"github.com/ClickHouse/ch-go/proto", "github.com/x/orm"}, Standard: std},
			"pipelines/store imports github.com/x/orm: only github.com/ClickHouse/ch-go/..., github.com/ebitengine/purego/... outside the module"},
		{"a new room without a wall",
			Package{Path: "pipelines/replay", Standard: std},
			"pipelines/replay: no rule names this package"},
		{"the captures index imports the detector",
			Package{Path: "pipelines/captures", Imports: []string{"pipelines/store", "pipelines/detect"}, Deps: []string{"pipelines/store", "pipelines/detect"}, Standard: std},
			"pipelines/captures imports pipelines/detect: not allowed"},
		{"the operator's binary takes the capture engine for its artifact store",
			Package{Path: "operator/cmd", Imports: []string{"agents/capture"}, Deps: []string{"agents/capture", "agents/capture/artifact", "agents/capture/artifact/record"}, Standard: std},
			"operator/cmd imports agents/capture: not allowed"},
		{"the demo reaches a recorder through the control API",
			Package{Path: "pipelines/cmd/spikehunt", Imports: []string{"agents/capture/control"}, Deps: []string{"agents/capture/control", "agents/capture/perf"}, Standard: std},
			"pipelines/cmd/spikehunt depends on agents/capture/perf, which it must never hold"},
		{"the control API takes a third-party module",
			Package{Path: "agents/capture/control", Imports: []string{"agents/capture/artifact/record", "github.com/x/y"}, Standard: std},
			"agents/capture/control imports github.com/x/y: only the standard library outside the module"},
		{"the control API takes the store client",
			Package{Path: "agents/capture/control", Imports: []string{"agents/capture/artifact"}, Deps: []string{"agents/capture/artifact", "agents/capture/artifact/record"}, Standard: std},
			"agents/capture/control imports agents/capture/artifact: not allowed"},
		{"the engine imports a backend",
			Package{Path: "agents/capture", Imports: []string{"agents/capture/perf"}, Deps: []string{"agents/capture/perf"}, Standard: std},
			"agents/capture imports agents/capture/perf: not allowed"},
		{"one backend imports another",
			Package{Path: "agents/capture/bpftrace", Imports: []string{"agents/capture/ftrace"}, Deps: []string{"agents/capture/ftrace"}, Standard: std},
			"agents/capture/bpftrace imports agents/capture/ftrace: not allowed"},
		{"an app's client takes the shared defaults helper",
			Package{Path: "agents/client", Imports: []string{"fmt", "internal/defaults"}, Deps: []string{"fmt", "internal/defaults"}, Standard: std},
			"agents/client depends on internal/defaults: the standard library only"},
		{"the shared defaults helper grows an import of ours",
			Package{Path: "internal/defaults", Imports: []string{"agents/telemetry"}, Deps: []string{"agents/telemetry"}, Standard: std},
			"internal/defaults imports agents/telemetry: not allowed"},
		{"the operator's policy imports its controllers",
			Package{Path: "operator/policy", Imports: []string{"operator/internal/controller"}, Deps: []string{"operator/internal/controller"}, Standard: std},
			"operator/policy imports operator/internal/controller: not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Check([]Package{tc.pkg}, Rules)
			found := false
			for _, v := range got {
				found = found || strings.Contains(v, tc.want)
			}
			if !found {
				t.Errorf("violations %q, want one containing %q", got, tc.want)
			}
		})
	}
	if got := Check([]Package{{Path: "agents/intake", Imports: []string{"agents/telemetry", "fmt"}, Deps: []string{"agents/telemetry", "fmt"}, Standard: std}}, Rules); len(got) != 0 {
		t.Errorf("a package within its wall: violations %q, want none", got)
	}
	if got := Check([]Package{{Path: "pipelines/store", Imports: []string{"internal/defaults", "fmt"}, Deps: []string{"internal/defaults", "fmt"}, Standard: std}}, Rules); len(got) != 0 {
		t.Errorf("a room with no Own rule takes the shared defaults helper: violations %q, want none", got)
	}
}
