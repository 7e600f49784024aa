package store

import (
	"fmt"

	"github.com/ClickHouse/ch-go/proto"
)

// Column returns b's result column called name typed as T: String and
// LowCardinality(String) are both ColumnOf[string], Array(String) is
// ColumnOf[[]string], Int64 is ColumnOf[int64], and so on. A query casts to
// the type it reads (toString of a LowCardinality, milliseconds of a
// DateTime64), so an error here is a bug in the query, not in the data.
// The column belongs to the block: it is valid only while the Query
// callback that got b runs.
func Column[T any](b Block, name string) (proto.ColumnOf[T], error) {
	c := b.Col(name)
	if c == nil {
		return nil, fmt.Errorf("result has no column %q", name)
	}
	typed, ok := c.(proto.ColumnOf[T])
	if !ok {
		var zero T
		return nil, fmt.Errorf("result column %q is %s, not %T", name, c.Type(), zero)
	}
	return typed, nil
}

// Columns is Column for several columns of one type, in the order named.
func Columns[T any](b Block, names ...string) ([]proto.ColumnOf[T], error) {
	out := make([]proto.ColumnOf[T], len(names))
	for i, n := range names {
		c, err := Column[T](b, n)
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}
