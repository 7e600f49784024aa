package query

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// A mistyped chdb:// path is not a new, empty store: every query command
// says that the path holds no spikehunt store, how to make one, and leaves
// the path as it was (no directory, no database).
func TestQueryCommandsNeverCreateAStore(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nonexist")
	for _, cmd := range []string{"spikes", "patterns", "hosts", "suspects", "captures"} {
		t.Run(cmd+" on a path that does not exist", func(t *testing.T) {
			dsn := "chdb://" + missing
			_, errs := cli(t, 1, cmd, "--dsn", dsn)
			want := missing + " holds no spikehunt store"
			if !strings.Contains(errs, want) || !strings.Contains(errs, "spikehunt migrate --dsn "+dsn) ||
				!strings.Contains(errs, "spikehunt demo") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
				t.Errorf("want one line with %q and how to make a store, got %q", want, errs)
			}
			if _, err := os.Stat(missing); !os.IsNotExist(err) {
				t.Errorf("%s exists after the query: %v", missing, err)
			}
		})
	}
	t.Run("a database of a real store that the schema was never applied to", func(t *testing.T) {
		testenv.ClickHouse(t) // the shared engine's directory exists and is in use
		dir := testenv.ClickHouseDir()
		_, errs := cli(t, 1, "hosts", "--dsn", "chdb://"+dir+"?database=t_never_migrated")
		if !strings.Contains(errs, dir+" holds no spikehunt store (database t_never_migrated") {
			t.Errorf("stderr %q", errs)
		}
		if _, err := os.Stat(filepath.Join(dir, "metadata", "t_never_migrated.sql")); !os.IsNotExist(err) {
			t.Errorf("the query created database t_never_migrated: %v", err)
		}
	})
}
