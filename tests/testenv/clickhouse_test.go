package testenv_test

import (
	"context"
	"testing"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestClickHouseGivesEachTestItsOwnDatabase(t *testing.T) {
	ctx := context.Background()
	var dbs []string
	for _, name := range []string{"first", "second"} {
		t.Run(name, func(t *testing.T) {
			st := testenv.ClickHouse(t)
			if err := st.Exec(ctx, "CREATE TABLE x (v UInt8) ENGINE = MergeTree ORDER BY v"); err != nil {
				t.Fatal(err) // the second subtest would fail here if databases were shared
			}
			tab, err := store.Select(ctx, st, "SELECT currentDatabase()")
			if err != nil {
				t.Fatal(err)
			}
			dbs = append(dbs, tab.Rows[0][0])
		})
	}
	if len(dbs) != 2 || dbs[0] == dbs[1] {
		t.Fatalf("databases %v, want two different ones", dbs)
	}
}
