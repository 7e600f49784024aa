package schema

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/pipelines/store"
)

// The embedded engine is one per process on one data directory: TestMain
// boots it once and keeps a store open until the end; each test gets its own
// database on it.
var (
	engineDir string
	keeper    *store.Embedded
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "schema-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	engineDir = dir
	keeper, err = store.OpenEmbedded(context.Background(), store.EmbeddedConfig{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer keeper.Close()
	return m.Run()
}

var nonIdent = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// openDB opens an empty database named after the test, t_<name>.
func openDB(t *testing.T) *store.Embedded {
	t.Helper()
	db := "t_" + strings.ToLower(nonIdent.ReplaceAllString(t.Name(), "_"))
	// Dropped by the keeper, whose connections never USE it (-count=2).
	if err := keeper.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" SYNC"); err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenEmbedded(context.Background(), store.EmbeddedConfig{Dir: engineDir, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// queryRows runs q and returns every row as strings (TabSeparated).
func queryRows(t *testing.T, st *store.Embedded, q string) []string {
	t.Helper()
	var b strings.Builder
	if err := st.QueryRaw(context.Background(), store.RawStatement{Query: q}, "TabSeparated", &b); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	out := strings.TrimSuffix(b.String(), "\n")
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// queryOne runs q, which must return exactly one row.
func queryOne(t *testing.T, st *store.Embedded, q string) string {
	t.Helper()
	rows := queryRows(t, st, q)
	if len(rows) != 1 {
		t.Fatalf("%s: got %d rows %q, want 1", q, len(rows), rows)
	}
	return rows[0]
}
