package store_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/pipelines/store"
)

var engineDir string

func TestMain(m *testing.M) {
	// Subprocess roles re-run this binary; see helper_process_test.go.
	if role := os.Getenv("SPIKEHUNT_STORE_TEST_ROLE"); role != "" {
		os.Exit(runRole(role))
	}
	dir, err := os.MkdirTemp("", "store-test-")
	if err != nil {
		panic(err)
	}
	engineDir = dir
	// The engine is one per process: keep one store open for the whole run
	// so tests do not reboot it.
	keep, err := store.OpenEmbedded(context.Background(), store.EmbeddedConfig{Dir: dir, Connections: 1})
	if err != nil {
		panic(err)
	}
	code := m.Run()
	keep.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// embedded opens the shared engine on a database of the test's own.
func embedded(t testing.TB) *store.Embedded {
	t.Helper()
	db := "t_" + strings.ToLower(strings.NewReplacer("/", "_", " ", "_", "-", "_").Replace(t.Name()))
	st, err := store.OpenEmbedded(context.Background(), store.EmbeddedConfig{Dir: engineDir, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// scalar runs a one-value query and returns its value as text.
func scalar(t testing.TB, st store.Store, q string) string {
	t.Helper()
	tab, err := store.Select(context.Background(), st, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if len(tab.Rows) != 1 || len(tab.Rows[0]) != 1 {
		t.Fatalf("%s: got %d rows, want one value", q, len(tab.Rows))
	}
	return tab.Rows[0][0]
}
