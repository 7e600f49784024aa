package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/internal/store"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// spikehuntBin is this package built, for the tests that must kill -9 it.
var spikehuntBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spikehunt-bin-")
	if err != nil {
		panic(err)
	}
	spikehuntBin = filepath.Join(dir, "spikehunt")
	if out, err := exec.Command("go", "build", "-o", spikehuntBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build spikehunt: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	testenv.StopShared()
	os.RemoveAll(dir)
	os.Exit(code)
}

// serveStore serves the embedded store dsn with `spikehunt serve-clickhouse`
// in a child process and returns an HTTP store onto it, both closed when
// the test ends. Tests use it to read a data directory other than the
// shared engine's: one embedded engine per process.
func serveStore(t *testing.T, dsn string) store.Store {
	t.Helper()
	addr := startServeOn(t, dsn)
	db := "default"
	if _, q, ok := strings.Cut(dsn, "?database="); ok {
		db = q
	}
	st, err := store.Open(context.Background(), "http://"+addr+"/"+db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
