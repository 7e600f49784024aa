package store_test

import (
	"strings"
	"testing"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/store"
)

// A result column is read as the Go type its ClickHouse type decodes to,
// and a query that casts to another type is told which column is off.
func TestColumnReadsTheTypeTheQueryCastTo(t *testing.T) {
	ids := new(proto.ColStr)
	ids.Append("a")
	ids.Append("b")
	host := new(proto.ColStr).LowCardinality()
	host.Append("h1")
	host.Append("h2")
	var ms proto.ColInt64
	ms.Append(1)
	ms.Append(2)
	b := store.Block{Names: []string{"spike_id", "host", "start_ms"}, Types: []string{"String", "LowCardinality(String)", "Int64"},
		Columns: []proto.ColResult{ids, host, &ms}, Rows: 2}

	strs, err := store.Columns[string](b, "spike_id", "host")
	if err != nil {
		t.Fatal(err)
	}
	if got := strs[0].Row(1) + strs[1].Row(1); got != "bh2" {
		t.Errorf("rows %q, want bh2", got)
	}
	if c, err := store.Column[int64](b, "start_ms"); err != nil || c.Row(0) != 1 {
		t.Errorf("start_ms: %v, %v", c, err)
	}
	for _, tc := range []struct {
		name string
		read func() error
		want string
	}{
		{"a missing column", func() error { _, err := store.Column[string](b, "end_ms"); return err }, `result has no column "end_ms"`},
		{"another type", func() error { _, err := store.Column[uint64](b, "start_ms"); return err }, `result column "start_ms" is Int64, not uint64`},
		{"one of several", func() error { _, err := store.Columns[string](b, "spike_id", "start_ms"); return err }, `result column "start_ms" is Int64, not string`},
	} {
		if err := tc.read(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
