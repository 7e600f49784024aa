package store

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/ClickHouse/ch-go/proto"
)

// inferColumn makes a column for a Native type name: what ch-go infers by
// itself, plus what spikehunt's schema needs beyond it: SimpleAggregateFunction,
// Map with non-String values, Tuple and Array(Tuple).
func inferColumn(t proto.ColumnType) (proto.Column, error) {
	c, err := infer(string(t), 0)
	if err != nil {
		return nil, fmt.Errorf("column type %s is not supported by the Native decoder: %w", t, err)
	}
	return c, nil
}

func infer(t string, depth int) (proto.Column, error) {
	if depth > 16 {
		return nil, fmt.Errorf("type nests too deeply")
	}
	base, inner, _ := strings.Cut(strings.TrimSpace(t), "(")
	inner = strings.TrimSuffix(inner, ")")
	switch base {
	case "SimpleAggregateFunction": // stored exactly as its value type
		if args := SplitTypeArgs(inner); len(args) == 2 {
			return infer(args[1], depth+1)
		}
	case "Map":
		if c := inferMap(SplitTypeArgs(inner)); c != nil {
			return c, nil
		}
	case "Tuple":
		return inferTuple(inner, depth)
	case "Array":
		if strings.HasPrefix(strings.TrimSpace(inner), "Tuple(") {
			tc, err := infer(inner, depth+1)
			if err != nil {
				return nil, err
			}
			return proto.NewArray[[]any](tc.(*tupleColumn)), nil
		}
	}
	var a proto.ColAuto
	if err := a.Infer(proto.ColumnType(t)); err != nil {
		return nil, err
	}
	return a.Data, nil
}

func inferTuple(inner string, depth int) (proto.Column, error) {
	var tc tupleColumn
	for _, e := range SplitTypeArgs(inner) {
		c, err := infer(TupleElementType(e), depth+1)
		if err != nil {
			return nil, err
		}
		tc.ColTuple = append(tc.ColTuple, c)
	}
	return &tc, nil
}

func inferMap(kv []string) proto.Column {
	if len(kv) != 2 {
		return nil
	}
	kt, vt := strings.TrimSpace(kv[0]), strings.TrimSpace(kv[1])
	var k proto.ColumnOf[string]
	switch kt {
	case "String":
		k = new(proto.ColStr)
	case "LowCardinality(String)":
		k = new(proto.ColStr).LowCardinality()
	default:
		return nil
	}
	switch vt {
	case "String":
		return proto.NewMap[string, string](k, new(proto.ColStr))
	case "LowCardinality(String)":
		return proto.NewMap[string, string](k, new(proto.ColStr).LowCardinality())
	case "Float64":
		return proto.NewMap[string, float64](k, new(proto.ColFloat64))
	case "UInt64":
		return proto.NewMap[string, uint64](k, new(proto.ColUInt64))
	case "Int64":
		return proto.NewMap[string, int64](k, new(proto.ColInt64))
	case "UInt32":
		return proto.NewMap[string, uint32](k, new(proto.ColUInt32))
	}
	return nil
}

// SplitTypeArgs splits a type's argument list at its top-level commas:
// "LowCardinality(String), Map(String, UInt8)" gives two arguments.
func SplitTypeArgs(s string) []string {
	var parts []string
	depth, start, quoted := 0, 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' && (i == 0 || s[i-1] != '\\'):
			quoted = !quoted
		case quoted:
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			parts = append(parts, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	return append(parts, strings.TrimSpace(s[start:]))
}

// TupleElementType drops the name of a named tuple element:
// "metric LowCardinality(String)" gives "LowCardinality(String)".
func TupleElementType(e string) string {
	e = strings.TrimSpace(e)
	if i := strings.IndexAny(e, " ("); i > 0 && e[i] == ' ' {
		return strings.TrimSpace(e[i+1:])
	}
	return e
}

// tupleColumn is a Tuple read as []any rows, so that it can sit inside an
// Array (ch-go's arrays need a typed column). It is for reading: values are
// taken from the element columns by reflection.
type tupleColumn struct{ proto.ColTuple }

func (c *tupleColumn) Row(i int) []any {
	row := make([]any, len(c.ColTuple))
	for j, e := range c.ColTuple {
		row[j] = reflect.ValueOf(e).MethodByName("Row").Call([]reflect.Value{reflect.ValueOf(i)})[0].Interface()
	}
	return row
}

func (c *tupleColumn) Append(v []any) {
	for j, e := range c.ColTuple {
		reflect.ValueOf(e).MethodByName("Append").Call([]reflect.Value{reflect.ValueOf(v[j])})
	}
}

func (c *tupleColumn) AppendArr(v [][]any) {
	for _, r := range v {
		c.Append(r)
	}
}
