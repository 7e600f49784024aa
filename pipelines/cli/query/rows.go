package query

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/store"
)

// readRows runs query and decodes its rows into T, block by block: decode
// looks up the block's typed columns with col and returns the function
// that builds row i from them. what names the query in errors. A missing
// table gets a hint: the usual cause is a store the schema was never
// applied to. A column of the wrong type is an error, not a panic: the
// queries are ours, so it is a bug, but one the command reports.
func readRows[T any](ctx context.Context, st store.Store, what, query string, decode func(c *columns) func(i int) T) ([]T, error) {
	var out []T
	var decodeErr error
	err := st.Query(ctx, query, func(b store.Block) error {
		c := &columns{b: b}
		row := decode(c)
		if c.err != nil {
			decodeErr = fmt.Errorf("read %s: %w", what, c.err)
			return decodeErr
		}
		for i := 0; i < b.Rows; i++ {
			out = append(out, row(i))
		}
		return nil
	})
	switch {
	case decodeErr != nil:
		return nil, decodeErr
	case err != nil:
		var ex *store.Exception
		if errors.As(err, &ex) && ex.Code == store.CodeUnknownTable {
			return nil, fmt.Errorf("query %s: %w (has the schema been applied? spikehunt migrate --dsn …)", what, err)
		}
		return nil, fmt.Errorf("query %s: %w", what, err)
	}
	return out, nil
}

// columns looks up a block's typed columns and keeps the first error, so
// that a decoder names its columns and readRows checks once.
type columns struct {
	b   store.Block
	err error
}

// col is column name of the block as T (store.Column), or nil after an
// error.
func col[T any](c *columns, name string) proto.ColumnOf[T] {
	if c.err != nil {
		return nil
	}
	v, err := store.Column[T](c.b, name)
	if err != nil {
		c.err = err
		return nil
	}
	return v
}

// finite is v, with NaN and ±Inf (a quantile of nothing) read as 0, which
// JSON can carry.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// float32Decimal widens a Float32 (the t-digest quantiles) through its
// shortest decimal, as ClickHouse prints it: 4.9 stays 4.9 in the table
// and the JSON, where float64(v) would be 4.900000095367432.
func float32Decimal(v float32) float64 {
	d, _ := strconv.ParseFloat(strconv.FormatFloat(float64(v), 'f', -1, 32), 64)
	return finite(d)
}
