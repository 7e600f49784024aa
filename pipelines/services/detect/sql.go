package detect

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Small helpers shared by the stages: literals, typed result columns and
// the detected_at stamp.

// msLit is t as a DateTime64(3, 'UTC') literal.
func msLit(t time.Time) string {
	return fmt.Sprintf("fromUnixTimestamp64Milli(toInt64(%d), 'UTC')", t.UnixMilli())
}

// secLit is t as a DateTime('UTC') literal, for latency_1s.ts.
func secLit(t time.Time) string { return fmt.Sprintf("toDateTime(%d, 'UTC')", t.Unix()) }

// floatLit renders f so ClickHouse reads a Float64.
func floatLit(f float64) string { return "toFloat64(" + strconv.FormatFloat(f, 'g', -1, 64) + ")" }

// strList renders ss as a ClickHouse array of strings.
func strList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = store.QuoteString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// sqlTemplate parses a statement whose values are named, not numbered:
// {{.Field}} of the params struct it is rendered with, through a function
// that renders the value as the literal of its ClickHouse type:
//
//	{{str .S}}    a String literal (quoted)
//	{{strs .SS}}  an Array(String) literal
//	{{ms .T}}     a DateTime64(3, 'UTC') literal
//	{{sec .T}}    a DateTime('UTC') literal
//	{{float .F}}  a Float64 literal
//	{{float (finite .F)}}  the same, NaN as 0 and ±Inf as ±MaxFloat64
//	{{z "expr"}}  the standard normal quantile whose upper tail is expr
//
// Integers render as they are; fields named …SQL hold SQL text built by
// the caller (a condition, a subquery). A template is fixed text, so a
// mistake in one is a programming error: parsing panics at init, and
// rendering (a field the params lack) panics too; TestGoldenSQL renders
// every branch of every statement.
func sqlTemplate(name, text string) *template.Template {
	return template.Must(template.New(name).Funcs(template.FuncMap{
		"str":    store.QuoteString,
		"hex":    hexLit,
		"strs":   strList,
		"ms":     msLit,
		"sec":    secLit,
		"float":  floatLit,
		"finite": finite,
		"z":      normalQuantileSQL,
		"slope":  tailSlopeSQL,
	}).Parse(text))
}

// tailSlopeSQL renders the slope of a tail from its p90 and p99 (SQL
// expressions): log latency per standard normal quantile, held within
// [0.05, 3] (a host's p90 and p99 rest on a few thousand requests, and a
// slope read from them may be wild), 0.05 where the two say nothing (p90
// 0). The host's tail and the fleet's are read alike.
func tailSlopeSQL(p99, p90 string) string {
	return fmt.Sprintf("least(toFloat64(3), greatest(toFloat64(0.05), ifNotFinite(log(%s / %s) / %s, 0)))", p99, p90, floatLit(z99-z90))
}

// hexLit renders s as unhex('…'): a string literal whose text holds no
// quote or ';', for statements the store's HTTP front reads as text (an
// INSERT … SELECT with a ';' in it is refused there, and a service name
// is the apps' to choose).
func hexLit(s string) string { return "unhex('" + hex.EncodeToString([]byte(s)) + "')" }

// normalQuantileSQL renders z such that P(Z > z) = s for the SQL
// expression s, 0 < s ≤ 0.5: Abramowitz and Stegun's 26.2.23, within
// 4.5e-4 (ClickHouse has no inverse normal). t = sqrt(−2 ln s) is written
// out each time it is used: inside a lambda an alias would not do.
func normalQuantileSQL(s string) string {
	t := "sqrt(-2 * log(" + s + "))"
	return fmt.Sprintf("(%[1]s - (2.515517 + %[1]s * (0.802853 + 0.010328 * %[1]s)) / (1 + %[1]s * (1.432788 + %[1]s * (0.189269 + 0.001308 * %[1]s))))", t)
}

// render executes t with params.
func render(t *template.Template, params any) string {
	var b strings.Builder
	if err := t.Execute(&b, params); err != nil {
		panic(fmt.Sprintf("detect: render %s: %v", t.Name(), err))
	}
	return b.String()
}

// bigQuery lifts the 256 KiB default of max_query_size for statements
// that may carry many ids as literals (the changed windows of a pass, the
// retracted ones).
var bigQuery = store.WithSetting("max_query_size", "16777216")

// quotedList renders ss as quoted strings separated by commas, the inside
// of an IN (…).
func quotedList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = store.QuoteString(s)
	}
	return strings.Join(q, ", ")
}

// column and columns are store.Column and store.Columns, short for the
// stages' many reads.
func column[T any](b store.Block, name string) (proto.ColumnOf[T], error) {
	return store.Column[T](b, name)
}

func columns[T any](b store.Block, names ...string) ([]proto.ColumnOf[T], error) {
	return store.Columns[T](b, names...)
}

var stamps struct {
	sync.Mutex
	last time.Time
}

// nextStamp is now at millisecond precision (detected_at's), strictly
// after every stamp this process gave before: rows of a pass must carry a
// newer version than the pass before it, even one a millisecond earlier.
func nextStamp(now func() time.Time) time.Time {
	stamps.Lock()
	defer stamps.Unlock()
	t := now().UTC().Truncate(time.Millisecond)
	if !t.After(stamps.last) {
		t = stamps.last.Add(time.Millisecond)
	}
	stamps.last = t
	return t
}

func lowCardinality() *proto.ColLowCardinality[string] { return new(proto.ColStr).LowCardinality() }

func dateTime64ms() *proto.ColDateTime64 {
	return new(proto.ColDateTime64).WithPrecision(proto.PrecisionMilli).WithLocation(time.UTC)
}

// scalar runs q and returns column name of its first row (zero without
// rows).
func scalar[T any](ctx context.Context, st store.Store, q, name string, opts ...store.Option) (T, error) {
	var v T
	err := st.Query(ctx, q, func(b store.Block) error {
		c, err := column[T](b, name)
		if err != nil {
			return err
		}
		if b.Rows > 0 {
			v = c.Row(0)
		}
		return nil
	}, opts...)
	return v, err
}
