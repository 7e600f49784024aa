package store

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/ClickHouse/ch-go/proto"
)

// Table is a small query result materialised as text, for CLIs, tests and
// reports. Use Query with typed columns for anything large.
type Table struct {
	Names []string
	Types []string
	Rows  [][]string
}

// Select runs query and returns every row with each value rendered as text
// (times in RFC 3339, UTC). Meant for results of up to thousands of rows.
func Select(ctx context.Context, st Store, query string, opts ...Option) (*Table, error) {
	var t Table
	err := st.Query(ctx, query, func(b Block) error {
		if t.Names == nil {
			t.Names = append([]string(nil), b.Names...)
			t.Types = append([]string(nil), b.Types...)
		}
		for i := 0; i < b.Rows; i++ {
			row := make([]string, len(b.Columns))
			for j, c := range b.Columns {
				row[j] = Text(c, i)
			}
			t.Rows = append(t.Rows, row)
		}
		return nil
	}, opts...)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// Text renders row i of any column. It uses reflection: fine for reports,
// too slow for bulk reads.
func Text(c proto.ColResult, i int) string {
	m := reflect.ValueOf(c).MethodByName("Row")
	if !m.IsValid() {
		return fmt.Sprintf("<%s>", c.Type())
	}
	v := m.Call([]reflect.Value{reflect.ValueOf(i)})[0].Interface()
	switch x := v.(type) {
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case string:
		return x
	case []byte:
		return string(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32)
	default:
		return fmt.Sprint(x)
	}
}
