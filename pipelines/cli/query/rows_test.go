package query

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// A query whose column is not the type its decoder reads is an error that
// names the column and both types, not a panic.
func TestReadRowsReportsAColumnOfTheWrongTypeAsAnError(t *testing.T) {
	st := testenv.ClickHouse(t)
	_, err := readRows(context.Background(), st, "ranks", "SELECT toUInt8(1) AS rank", func(c *columns) func(int) uint64 {
		rank := col[uint64](c, "rank")
		return func(i int) uint64 { return rank.Row(i) }
	})
	if err == nil || !strings.Contains(err.Error(), `read ranks: result column "rank" is UInt8, not uint64`) {
		t.Errorf("got %v", err)
	}
	_, err = readRows(context.Background(), st, "ranks", "SELECT toUInt8(1) AS rank", func(c *columns) func(int) uint8 {
		rank := col[uint8](c, "no_such_column")
		return func(i int) uint8 { return rank.Row(i) }
	})
	if err == nil || !strings.Contains(err.Error(), `read ranks: result has no column "no_such_column"`) {
		t.Errorf("got %v", err)
	}
}

// The t-digest quantiles are Float32. The commands printed them from
// store.Select's text, the float's shortest decimal; read typed, they are
// the same float64s, so p50 4.9 ms stays 4.9 in the JSON.
func TestFloat32ColumnsReadAsTheirText(t *testing.T) {
	st := testenv.ClickHouse(t)
	ctx := context.Background()
	q := "SELECT toFloat32(number / 7 + 4.9) AS v FROM numbers(200) UNION ALL SELECT toFloat32(nan) UNION ALL SELECT toFloat32(1e30)"
	tab, err := store.Select(ctx, st, q)
	if err != nil {
		t.Fatal(err)
	}
	got, err := readRows(ctx, st, "floats", q, func(c *columns) func(int) float64 {
		v := col[float32](c, "v")
		return func(i int) float64 { return float32Decimal(v.Row(i)) }
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[float64]bool{}
	for _, r := range tab.Rows {
		v, err := strconv.ParseFloat(r[0], 64)
		if err != nil {
			t.Fatal(err)
		}
		want[finite(v)] = true
	}
	if len(got) != len(tab.Rows) {
		t.Fatalf("%d rows, want %d", len(got), len(tab.Rows))
	}
	for _, v := range got {
		if !want[v] {
			t.Errorf("%v is not among the text route's values", v)
		}
	}
	if v := float32Decimal(4.9); v != 4.9 {
		t.Errorf("float32Decimal(4.9) = %v", v)
	}
}
