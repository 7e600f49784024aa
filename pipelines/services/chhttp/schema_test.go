package chhttp

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// Every column type of every schema table survives clickhouse-go reading it
// through serve-clickhouse and writing it back: random rows of each table's
// columns are read with clickhouse-go, batch-inserted into a copy, and the
// engine compares the two. AggregateFunction states are left out: readers
// use the -Merge combinators, whose results are plain types.
func TestClickHouseGoRoundTripsEverySchemaTable(t *testing.T) {
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	// groupArray of tuples also exercises the store's Array(Tuple) decoding.
	tables, err := store.Select(ctx, st, `SELECT table, groupArray((name, type)) FROM (
		SELECT table, name, type FROM system.columns
		WHERE database = currentDatabase() AND table NOT LIKE '%_mv' AND type NOT LIKE 'AggregateFunction%'
		ORDER BY table, position) GROUP BY table ORDER BY table`)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables.Rows) < 7 {
		t.Fatalf("only %d schema tables found", len(tables.Rows))
	}
	srv := serveStore(t, st, Config{})
	conn := openCH(t, srv, st.Database(), "", "")
	types := map[string]bool{}
	for _, tr := range tables.Rows {
		table := tr[0]
		cols, err := store.Select(ctx, st, fmt.Sprintf(`SELECT name, type FROM system.columns WHERE database = currentDatabase()
			AND table = '%s' AND type NOT LIKE 'AggregateFunction%%' ORDER BY position`, table))
		if err != nil {
			t.Fatal(err)
		}
		var defs, names []string
		for _, c := range cols.Rows {
			defs = append(defs, store.QuoteIdent(c[0])+" "+c[1])
			names = append(names, store.QuoteIdent(c[0]))
			types[c[1]] = true
		}
		structure := strings.Join(defs, ", ")
		src, dst := "src_"+table, "dst_"+table
		for _, q := range []string{
			"CREATE TABLE " + src + " (" + structure + ") ENGINE = Memory",
			"CREATE TABLE " + dst + " (" + structure + ") ENGINE = Memory",
			"INSERT INTO " + src + " SELECT * FROM generateRandom(" + store.QuoteString(structure) + ", 7, 12, 3) LIMIT 300",
		} {
			if err := st.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", table, err)
			}
		}
		t.Run(table, func(t *testing.T) {
			rows, err := conn.Query(ctx, "SELECT "+strings.Join(names, ", ")+" FROM "+src)
			if err != nil {
				t.Fatal(err)
			}
			batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+dst)
			if err != nil {
				t.Fatal(err)
			}
			ct := rows.ColumnTypes()
			n := 0
			for rows.Next() {
				vals := make([]any, len(ct))
				for i, c := range ct {
					vals[i] = reflect.New(c.ScanType()).Interface()
				}
				if err := rows.Scan(vals...); err != nil {
					t.Fatal(err)
				}
				for i := range vals {
					vals[i] = reflect.ValueOf(vals[i]).Elem().Interface()
				}
				if err := batch.Append(vals...); err != nil {
					t.Fatal(err)
				}
				n++
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if err := batch.Send(); err != nil {
				t.Fatal(err)
			}
			digest := func(tbl string) string {
				tab, err := store.Select(ctx, st, "SELECT count(), sum(cityHash64(toString(tuple(*)))) FROM "+tbl)
				if err != nil {
					t.Fatal(err)
				}
				return strings.Join(tab.Rows[0], " ")
			}
			if n != 300 || digest(src) != digest(dst) {
				t.Fatalf("read %d rows; source %s, copy %s", n, digest(src), digest(dst))
			}
		})
	}
	t.Logf("%d column types round-tripped: %v", len(types), keys(types))
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
