package index

import (
	"fmt"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/pipelines/store"
)

// msLit renders t as a DateTime64(3, 'UTC') literal.
func msLit(t time.Time) string {
	return fmt.Sprintf("fromUnixTimestamp64Milli(toInt64(%d), 'UTC')", t.UnixMilli())
}

func fromMs(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func lowCardinality() *proto.ColLowCardinality[string] { return new(proto.ColStr).LowCardinality() }

func dateTime64ms() *proto.ColDateTime64 {
	return new(proto.ColDateTime64).WithPrecision(proto.PrecisionMilli).WithLocation(time.UTC)
}

// column returns the result column called name as a column of T; the
// queries cast to what they read (toString of a LowCardinality, milliseconds
// of a DateTime64), so a mismatch is a bug in this package.
func column[T any](b store.Block, name string) (proto.ColumnOf[T], error) {
	c := b.Col(name)
	if c == nil {
		return nil, fmt.Errorf("no column %q in the result", name)
	}
	typed, ok := c.(proto.ColumnOf[T])
	if !ok {
		var zero T
		return nil, fmt.Errorf("result column %q is %s, want %T", name, c.Type(), zero)
	}
	return typed, nil
}

func columns[T any](b store.Block, names ...string) ([]proto.ColumnOf[T], error) {
	out := make([]proto.ColumnOf[T], 0, len(names))
	for _, n := range names {
		c, err := column[T](b, n)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
