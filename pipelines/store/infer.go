package store

import (
	"fmt"
	"strings"

	"github.com/ClickHouse/ch-go/proto"
)

// inferColumn makes a column for a Native type name: what ch-go infers by
// itself, plus the Map types spikehunt's schema uses (ch-go infers only
// Map(String, String)).
func inferColumn(t proto.ColumnType) (proto.Column, error) {
	if t.Base() == "Map" {
		if c := inferMap(t); c != nil {
			return c, nil
		}
	}
	var a proto.ColAuto
	if err := a.Infer(t); err != nil {
		return nil, fmt.Errorf("column type %s is not supported by the Native decoder: %w", t, err)
	}
	return a.Data, nil
}

func inferMap(t proto.ColumnType) proto.Column {
	inner := string(t.Elem())
	depth, cut := 0, -1
	for i, r := range inner {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 && cut < 0 {
				cut = i
			}
		}
	}
	if cut < 0 {
		return nil
	}
	kt, vt := strings.TrimSpace(inner[:cut]), strings.TrimSpace(inner[cut+1:])
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
