package walls

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// listed is what `go list -deps -test -json` says of one package.
type listed struct {
	ImportPath string
	ForTest    string
	Standard   bool
	Imports    []string
	Deps       []string
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// listGraph is the import graph of patterns, tests included, as `go list
// -deps -test` gives it in dir, for one GOOS and an optional overlay file.
// A test variant ("p [p.test]", "p_test [p.test]") becomes a Package with
// Test set and p's path; the generated test mains ("p.test") are left out.
func listGraph(t *testing.T, dir, goos, overlay string, patterns ...string) []Package {
	t.Helper()
	args := []string{"list", "-e", "-deps", "-test", "-json=ImportPath,ForTest,Standard,Imports,Deps,Module,Error"}
	if overlay != "" {
		args = append(args, "-overlay="+overlay)
	}
	cmd := exec.Command("go", append(args, patterns...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	// A dependency's path, as the graph names it: the variant built for a
	// test ("q [p.test]") is q, and the module's paths are module-relative.
	bare := func(p string) string {
		p, _, _ = strings.Cut(p, " ")
		if p == Module {
			return "."
		}
		return strings.TrimPrefix(p, Module+"/")
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
		std[bare(l.ImportPath)] = std[bare(l.ImportPath)] || l.Standard
		// -e keeps a package whose files are all for another GOOS; any
		// other error would leave edges unseen.
		if l.Error != nil && !strings.Contains(l.Error.Err, "build constraints exclude all Go files") {
			t.Fatalf("go list: %s: %s", l.ImportPath, l.Error.Err)
		}
		all = append(all, l)
	}
	var g []Package
	for _, l := range all {
		if l.Module == nil || l.Module.Path != Module || strings.HasSuffix(l.ImportPath, ".test") {
			continue
		}
		path := strings.TrimSuffix(bare(l.ImportPath), "_test")
		p := Package{Path: path, Test: l.ForTest != "", Standard: map[string]bool{}}
		for _, i := range l.Imports {
			p.Imports = append(p.Imports, bare(i))
		}
		for _, d := range l.Deps {
			p.Deps = append(p.Deps, bare(d))
		}
		for _, raw := range append(slices.Clone(l.Imports), l.Deps...) {
			d, _, _ := strings.Cut(raw, " ")
			switch {
			case std[bare(d)]:
				p.Standard[bare(d)] = true
			case strings.HasPrefix(d, Module+"/"):
				// The module's own, relativized.
			case !strings.Contains(top(d), "."):
				t.Fatalf("%s depends on %s, neither the standard library's, the module's nor another module's", l.ImportPath, d)
			}
		}
		g = append(g, p)
	}
	return g
}

// graph is the whole module's graph, tests included, for one GOOS.
func graph(t *testing.T, goos string) []Package {
	t.Helper()
	g := listGraph(t, ".", goos, "", Module+"/...")
	tests := 0
	for _, p := range g {
		if p.Test {
			tests++
		}
	}
	if len(g) < 40 || tests < 20 {
		t.Fatalf("go list found %d of the module's packages, %d of them test variants; want them all", len(g), tests)
	}
	return g
}

// The module keeps every wall its ARCHITECTURE.md files state, its tests'
// imports included, on Linux and on Windows (the agent's PDH sampler and
// WPR recorder are Windows-only files); and every crossing listed is
// still taken by some import.
func TestTheImportGraphKeepsEveryWall(t *testing.T) {
	t.Parallel()
	var both []Package
	for _, goos := range []string{"linux", "windows"} {
		t.Run(goos, func(t *testing.T) {
			g := graph(t, goos)
			both = append(both, g...)
			for _, v := range Check(g, Folders, Rules, Crossings) {
				t.Error(v)
			}
		})
	}
	for _, c := range Unused(both, Crossings) {
		t.Errorf("crossing %s: no import takes it any more; delete it from walls.Crossings", c)
	}
}

// The walls' data says what each kind of entry is for: a Rule's Own and
// TestOwn stay in its top folder (or name a shared leaf), and every
// crossing crosses from one top folder into another. Each top folder of
// the module holding Go code has a Folder wall and an ARCHITECTURE.md.
func TestTheWallsDataIsConsistent(t *testing.T) {
	for _, r := range Rules {
		for _, o := range append(slices.Clone(r.Own), r.TestOwn...) {
			if top(o) != top(r.Pkg) && !matchAny(shared, o) {
				t.Errorf("rule %s names %s of another top folder: move it to walls.Crossings", r.Pkg, o)
			}
		}
	}
	for _, c := range Crossings {
		for _, to := range c.To {
			if top(to) == top(c.From) {
				t.Errorf("crossing %s → %s stays in its top folder: it belongs in the rule's Own", c.From, to)
			}
		}
	}
	root := moduleRoot(t)
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var tops []string
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata" {
			continue
		}
		if hasGo(t, filepath.Join(root, e.Name())) {
			tops = append(tops, e.Name())
		}
	}
	if len(tops) < 5 {
		t.Fatalf("found top folders %q in %s; want the module's", tops, root)
	}
	for _, d := range tops {
		if _, ok := Folders[d]; !ok {
			t.Errorf("top folder %s/ holds Go code and has no wall in walls.Folders", d)
		}
		if _, err := os.Stat(filepath.Join(root, d, "ARCHITECTURE.md")); err != nil {
			t.Errorf("top folder %s/ has no ARCHITECTURE.md", d)
		}
	}
}

// moduleRoot is the folder of go.mod, two up from this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod two up from tests/walls: %v", err)
	}
	return root
}

// hasGo reports whether a .go file is anywhere under dir (testdata and
// hidden folders aside, as the go command skips them).
func hasGo(t *testing.T, dir string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || found {
			return err
		}
		if d.IsDir() && p != dir && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		found = !d.IsDir() && strings.HasSuffix(d.Name(), ".go")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// Each kind of violation, planted in the real module through an overlay
// (go list sees files that are not on disk), is reported: a new top folder
// imported by the agent's intake, a _test.go file's import across a wall,
// and a third-party module that the prose forbids.
func TestPlantedViolationsAreReported(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	tmp := t.TempDir()
	planted := map[string]string{
		// A new top folder, and the intake importing it.
		"zzroom/zzroom.go":            "package zzroom\n\nconst X = 1\n",
		"agents/intake/zz_planted.go": "package intake\n\nimport \"" + Module + "/zzroom\"\n\nvar _ = zzroom.X\n",
		// A test-only import across a wall: the intake's test takes the store.
		"agents/intake/zz_planted_test.go": "package intake\n\nimport _ \"" + Module + "/internal/store\"\n",
		// Forbidden third-party modules: a controller-runtime client in a
		// sampler, and client-go's REST client in the API types.
		"agents/collect/zz_planted.go":        "package collect\n\nimport _ \"sigs.k8s.io/controller-runtime/pkg/client\"\n",
		"operator/api/v1alpha1/zz_planted.go": "package v1alpha1\n\nimport _ \"k8s.io/client-go/rest\"\n",
	}
	ov := struct{ Replace map[string]string }{Replace: map[string]string{}}
	for name, src := range planted {
		f := filepath.Join(tmp, strings.ReplaceAll(name, "/", "_"))
		if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		ov.Replace[filepath.Join(root, filepath.FromSlash(name))] = f
	}
	b, err := json.Marshal(ov)
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlay, b, 0o644); err != nil {
		t.Fatal(err)
	}
	g := listGraph(t, root, runtime.GOOS, overlay,
		Module+"/agents/intake", Module+"/agents/collect", Module+"/operator/api/v1alpha1", Module+"/zzroom")
	got := Check(g, Folders, Rules, Crossings)
	for _, want := range []string{
		"zzroom: top folder zzroom/ has no wall",
		"agents/intake imports zzroom: not allowed",
		"agents/intake imports in a _test.go file internal/store: not allowed",
		"agents/collect imports sigs.k8s.io/controller-runtime/pkg/client: only github.com/prometheus/client_golang/...",
		"agents/collect depends on sigs.k8s.io/controller-runtime/pkg/client, which it must never hold",
		"operator/api/v1alpha1 imports k8s.io/client-go/rest: only k8s.io/apimachinery/..., sigs.k8s.io/controller-runtime/pkg/scheme outside the module",
	} {
		if !slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, want) }) {
			t.Errorf("planted violation not reported: want one starting %q", want)
		}
	}
	if t.Failed() {
		t.Logf("reported:\n%s", strings.Join(got, "\n"))
	}
	// Without the overlay the same packages keep their walls.
	if v := Check(listGraph(t, root, runtime.GOOS, "", Module+"/agents/intake", Module+"/agents/collect", Module+"/operator/api/v1alpha1"),
		Folders, Rules, Crossings); len(v) != 0 {
		t.Errorf("the real packages: violations %q, want none", v)
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
			Package{Path: "agents/intake", Imports: []string{"internal/telemetry", "agents/capture"}, Deps: []string{"internal/telemetry", "agents/capture"}, Standard: std},
			"agents/intake imports agents/capture: not allowed"},
		{"the detector reaches an agent recorder through a new package",
			Package{Path: "pipelines/services/detect", Imports: []string{"internal/store"}, Deps: []string{"internal/store", "agents/capture"}, Standard: std},
			"pipelines/services/detect depends on agents/capture, which it must never hold"},
		{"the agent imports the store",
			Package{Path: "agents/export", Imports: []string{"internal/store"}, Deps: []string{"internal/store"}, Standard: std},
			"agents/export imports internal/store: not allowed"},
		{"the store takes another module",
			Package{Path: "internal/store", Imports: []string{"github.com/ClickHouse/ch-go/proto", "github.com/x/orm"}, Standard: std},
			"internal/store imports github.com/x/orm: only github.com/ClickHouse/ch-go/..., github.com/ebitengine/purego/... outside the module"},
		{"a new room without a wall",
			Package{Path: "pipelines/replay", Standard: std},
			"pipelines/replay: no rule names this package"},
		{"a new top folder",
			Package{Path: "shared/vocab", Standard: std},
			"shared/vocab: top folder shared/ has no wall"},
		{"the intake imports a package of a new top folder",
			Package{Path: "agents/intake", Imports: []string{"shared/vocab"}, Deps: []string{"shared/vocab"}, Standard: std},
			"agents/intake imports shared/vocab: not allowed"},
		{"the captures index imports the detector",
			Package{Path: "internal/captures", Imports: []string{"internal/store", "pipelines/services/detect"}, Deps: []string{"internal/store", "pipelines/services/detect"}, Standard: std},
			"internal/captures imports pipelines/services/detect: not allowed"},
		{"the operator's binary takes the capture engine for its artifact store",
			Package{Path: "operator/cmd", Imports: []string{"agents/capture"}, Deps: []string{"agents/capture", "internal/capture/artifact", "internal/capture/artifact/record"}, Standard: std},
			"operator/cmd imports agents/capture: not allowed"},
		{"the operator's binary's test takes the capture engine",
			Package{Path: "operator/cmd", Test: true, Imports: []string{"agents/capture"}, Standard: std},
			"operator/cmd imports in a _test.go file agents/capture: not allowed"},
		{"a crossing allowed to tests only, from code",
			Package{Path: "pipelines/services/ingest", Imports: []string{"agents/export"}, Deps: []string{"agents/export"}, Standard: std},
			"pipelines/services/ingest imports agents/export: not allowed"},
		{"the demo reaches a recorder through the control API",
			Package{Path: "pipelines/lab/demo", Imports: []string{"internal/capture/control"}, Deps: []string{"internal/capture/control", "agents/capture/perf"}, Standard: std},
			"pipelines/lab/demo depends on agents/capture/perf, which it must never hold"},
		{"the control API takes a third-party module",
			Package{Path: "internal/capture/control", Imports: []string{"internal/capture/artifact/record", "github.com/x/y"}, Standard: std},
			"internal/capture/control imports github.com/x/y: only the standard library outside the module"},
		{"the control API takes the store client",
			Package{Path: "internal/capture/control", Imports: []string{"internal/capture/artifact"}, Deps: []string{"internal/capture/artifact", "internal/capture/artifact/record"}, Standard: std},
			"internal/capture/control imports internal/capture/artifact: not allowed"},
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
			Package{Path: "internal/defaults", Imports: []string{"internal/telemetry"}, Deps: []string{"internal/telemetry"}, Standard: std},
			"internal/defaults imports internal/telemetry: not allowed"},
		{"the operator's policy imports its controllers",
			Package{Path: "internal/policy", Imports: []string{"operator/internal/controller"}, Deps: []string{"operator/internal/controller"}, Standard: std},
			"internal/policy imports operator/internal/controller: not allowed"},
		{"the agent holds controller-runtime's client through a dependency",
			Package{Path: "agents/nodecapture", Imports: []string{"k8s.io/client-go/rest"}, Deps: []string{"k8s.io/client-go/rest", "sigs.k8s.io/controller-runtime/pkg/client"}, Standard: std},
			"agents/nodecapture depends on sigs.k8s.io/controller-runtime/pkg/client, which it must never hold"},
		{"the agent takes client-go's typed clientsets",
			Package{Path: "agents/cmd/spikehunt-agent", Imports: []string{"k8s.io/client-go/kubernetes"}, Deps: []string{"k8s.io/client-go/kubernetes"}, Standard: std},
			"agents/cmd/spikehunt-agent imports k8s.io/client-go/kubernetes: only"},
		{"the pipeline takes a Kubernetes client",
			Package{Path: "pipelines/lab/demo", Imports: []string{"k8s.io/client-go/rest"}, Deps: []string{"k8s.io/client-go/rest"}, Standard: std},
			"pipelines/lab/demo depends on k8s.io/client-go/rest, which it must never hold"},
		{"the product's code takes the test machinery",
			Package{Path: "pipelines/services/ingest", Imports: []string{"tests/fakeclock"}, Deps: []string{"tests/fakeclock"}, Standard: std},
			"pipelines/services/ingest imports tests/fakeclock: not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Check([]Package{tc.pkg}, Folders, Rules, Crossings)
			if !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, tc.want) }) {
				t.Errorf("violations %q, want one containing %q", got, tc.want)
			}
		})
	}
	for _, p := range []Package{
		{Path: "agents/intake", Imports: []string{"internal/telemetry", "fmt"}, Deps: []string{"internal/telemetry", "fmt"}, Standard: std},
		{Path: "internal/store", Imports: []string{"internal/defaults", "fmt"}, Deps: []string{"internal/defaults", "fmt"}, Standard: std},
		{Path: "pipelines/services/ingest", Test: true, Imports: []string{"agents/export", "tests/fakeclock", "github.com/google/go-cmp/cmp"}, Standard: std},
		{Path: "agents/nodecapture", Imports: []string{"operator/api/v1alpha1"}, Deps: []string{"operator/api/v1alpha1", "sigs.k8s.io/controller-runtime/pkg/scheme"}, Standard: std},
	} {
		if got := Check([]Package{p}, Folders, Rules, Crossings); len(got) != 0 {
			t.Errorf("%s (test %v) within its walls: violations %q, want none", p.Path, p.Test, got)
		}
	}
}
