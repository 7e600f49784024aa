// Package config_test checks the operator's manifests: that the generated
// ones match the Go types they come from, and that the RBAC they grant is
// what each identity needs and no more.
package config_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// repoRoot is where controller-gen runs, as `make manifests` does.
const repoRoot = "../.."

// TestGeneratedFilesAreUpToDate runs controller-gen as `make manifests`
// does, into a temporary folder, and compares what it writes with the
// committed files. Keep the generator options here in step with the
// Makefile's manifests target.
func TestGeneratedFilesAreUpToDate(t *testing.T) {
	paths, err := testenv.Paths()
	if err != nil {
		t.Fatal(err)
	}
	controllerGen, err := paths.ControllerGenBinary()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	generate := func(args ...string) {
		t.Helper()
		cmd := exec.Command(controllerGen, args...)
		cmd.Dir = repoRoot
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("controller-gen %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
	}
	generate("object", "paths=./operator/api/...", "output:object:dir="+filepath.Join(out, "object"))
	generate("crd", "rbac:roleName=spikehunt-operator", "paths=./operator/...",
		"output:crd:dir="+filepath.Join(out, "crd"), "output:rbac:dir="+filepath.Join(out, "rbac"))

	// generated folder → committed folder, relative to the repo root.
	folders := map[string]string{
		"object": "operator/api/v1alpha1",
		"crd":    "operator/config/crd/bases",
		"rbac":   "operator/config/rbac",
	}
	for gen, committed := range folders {
		files, err := os.ReadDir(filepath.Join(out, gen))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Errorf("controller-gen wrote nothing into %s", gen)
		}
		for _, f := range files {
			want, err := os.ReadFile(filepath.Join(out, gen, f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(committed, f.Name())
			got, err := os.ReadFile(filepath.Join(repoRoot, path))
			if os.IsNotExist(err) {
				t.Errorf("%s is missing: run `make manifests` and commit the result", path)
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is stale: run `make manifests` and commit the result (-committed +generated):\n%s",
					path, firstLines(cmp.Diff(string(got), string(want)), 40))
			}
		}
	}

	// A CRD whose type is gone must go too.
	bases, err := filepath.Glob(filepath.Join(repoRoot, folders["crd"], "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bases {
		if _, err := os.Stat(filepath.Join(out, "crd", filepath.Base(b))); os.IsNotExist(err) {
			t.Errorf("%s/%s is not generated from any type: delete it, or run `make manifests` if a type is missing",
				folders["crd"], filepath.Base(b))
		}
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "") + "…\n"
}
