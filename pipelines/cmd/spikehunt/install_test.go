package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/internal/store"
)

// A spikehunt binary in the layout `make install` writes (PREFIX/bin,
// PREFIX/lib/spikehunt/libchdb.so) finds the engine from any working
// directory without SPIKEHUNT_LIBCHDB; without the library, its error names
// every place it looked and how to fix it.
func TestAnInstalledBinaryFindsLibchdbBesideIt(t *testing.T) {
	lib := store.LibraryCandidates()[0] // SPIKEHUNT_LIBCHDB, as the Makefile exports it
	if os.Getenv("SPIKEHUNT_LIBCHDB") == "" {
		t.Fatal("SPIKEHUNT_LIBCHDB is not set: run the tests with the Makefile's env (deps/install.sh env)")
	}
	prefix := t.TempDir()
	bin := filepath.Join(prefix, "bin", "spikehunt")
	libDir := filepath.Join(prefix, "lib", "spikehunt")
	for _, d := range []string{filepath.Dir(bin), libDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.ReadFile(spikehuntBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	// A link, not a copy of the engine's 500 MB: the lookup is what is
	// under test, and it stats and opens the path as make install writes it.
	if err := os.Symlink(lib, filepath.Join(libDir, "libchdb.so")); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir() // no .cache/deps above it
	run := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = elsewhere
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "SPIKEHUNT_LIBCHDB=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}

	dsn := "chdb://" + filepath.Join(elsewhere, "store")
	if code, out := run("migrate", "--dsn", dsn); code != 0 {
		t.Fatalf("installed spikehunt migrate: exit %d\n%s", code, out)
	}
	// The query reads the store: a migrated one without rows says so.
	if code, out := run("hosts", "--dsn", dsn); code != 1 || !strings.Contains(out, "is a spikehunt store with no rows in any table") {
		t.Fatalf("installed spikehunt hosts: exit %d\n%s", code, out)
	}

	if err := os.Remove(filepath.Join(libDir, "libchdb.so")); err != nil {
		t.Fatal(err)
	}
	code, out := run("migrate", "--dsn", "chdb://"+filepath.Join(elsewhere, "store2"))
	if code != 1 || !strings.Contains(out, "libchdb.so not found") {
		t.Fatalf("without the library: exit %d, want 1 and libchdb.so not found\n%s", code, out)
	}
	for _, place := range []string{
		filepath.Join(prefix, "bin", "libchdb.so"),
		filepath.Join(prefix, "lib", "spikehunt", "libchdb.so"),
		filepath.Join(elsewhere, ".cache/deps/chdb/*/libchdb.so") + " and the same in every folder above",
		"/usr/local/lib/libchdb.so",
		"/usr/lib/libchdb.so",
		"make install PREFIX=",
		"SPIKEHUNT_LIBCHDB=",
	} {
		if !strings.Contains(out, place) {
			t.Errorf("the error does not name %q:\n%s", place, out)
		}
	}
}
