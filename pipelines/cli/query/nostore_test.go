package query

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/internal/schema"
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
			if !strings.Contains(errs, want) || !strings.Contains(errs, "spikehunt migrate --dsn '"+dsn+"'") ||
				!strings.Contains(errs, "spikehunt demo") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
				t.Errorf("want one line with %q and how to make a store, got %q", want, errs)
			}
			if _, err := os.Stat(missing); !os.IsNotExist(err) {
				t.Errorf("%s exists after the query: %v", missing, err)
			}
		})
	}
	t.Run("a database of a real store that the schema was never applied to", func(t *testing.T) {
		f := seedQueryFleet(t) // another database of the same directory holds a store
		dir := testenv.ClickHouseDir()
		db := f.dsn[strings.LastIndex(f.dsn, "=")+1:]
		_, errs := cli(t, 1, "hosts", "--dsn", "chdb://"+dir+"?database=t_never_migrated")
		if !strings.Contains(errs, dir+" has no spikehunt store in database t_never_migrated; this store has spikehunt data in database") ||
			!strings.Contains(errs, db) || !strings.Contains(errs, "use --dsn 'chdb://"+dir+"?database=") || strings.Contains(errs, "spikehunt migrate") {
			t.Errorf("want the databases that hold a store, a quoted DSN and no migrate, got %q", errs)
		}
		if _, err := os.Stat(filepath.Join(dir, "metadata", "t_never_migrated.sql")); !os.IsNotExist(err) {
			t.Errorf("the query created database t_never_migrated: %v", err)
		}
	})
}

// A store that was migrated but never loaded is not "no spikes in this
// range": every query says the store has no rows at all, and where the
// data is when another database of the directory holds a store.
func TestAQueryOnAStoreWithNoRowsSaysSo(t *testing.T) {
	f := seedQueryFleet(t)
	loaded := f.dsn[strings.LastIndex(f.dsn, "=")+1:]
	t.Run("a range with no spikes in a loaded store", func(t *testing.T) {
		out, _ := cli(t, 0, "spikes", "--dsn", f.dsn, "--since", "1h")
		if !strings.HasPrefix(out, "no spikes for any service since 1h") {
			t.Errorf("stdout %q", out)
		}
	})
	t.Run("a store with no rows", func(t *testing.T) {
		st := testenv.ClickHouse(t) // the subtest's own database, migrated and empty
		if _, err := schema.Apply(context.Background(), st, schema.Options{}); err != nil {
			t.Fatal(err)
		}
		emptyStoreSaysSo(t, "chdb://"+st.Dir()+"?database="+st.Database(), st.Database(), st.Dir(), loaded)
	})
}

func emptyStoreSaysSo(t *testing.T, dsn, db, dir, loaded string) {
	for _, cmd := range []string{"spikes", "patterns", "hosts", "suspects", "captures"} {
		t.Run(cmd, func(t *testing.T) {
			out, errs := cli(t, 1, cmd, "--dsn", dsn)
			want := "database " + db + " of " + dir + " is a spikehunt store with no rows in any table"
			if out != "" || !strings.Contains(errs, want) || !strings.Contains(errs, "this store has spikehunt data in database") ||
				!strings.Contains(errs, loaded) || strings.Contains(errs, "no spikes") {
				t.Errorf("want %q and where the data is, got stdout %q, stderr %q", want, out, errs)
			}
		})
	}
}
