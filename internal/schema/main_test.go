package schema

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// openDB opens an empty database named after the test.
func openDB(t *testing.T) *store.Embedded { return testenv.ClickHouse(t) }

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
