package chhttp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Protocol revisions at which the Native format grew fields.
const (
	revisionBlockInfo           = 51903 // a BlockInfo before each block
	revisionCustomSerialization = 54454 // a "custom serialization" flag after each column's type
)

// Bounds that stop hostile or corrupt input before it allocates.
const (
	maxColumns    = 10_000
	maxRows       = 1 << 27
	maxStringLen  = 1 << 30
	maxTypeDepth  = 32
	maxNameLength = 1 << 16
)

// transcodeNative copies a stream of Native blocks written at protocol
// revision 0 (what the engine writes) to w at revision rev, which is what a
// client that sends client_protocol_version reads. The column data is the
// same at both revisions; only the framing differs, so the data is copied
// byte for byte, walked by its type rather than decoded. Types whose layout
// is not known here (AggregateFunction states, Dynamic, JSON, Variant) are
// an error that names the column.
func transcodeNative(r *bufio.Reader, w *bufio.Writer, rev int) error {
	t := nativeCopier{r: r, w: w}
	for block := 0; ; block++ {
		if _, err := r.Peek(1); errors.Is(err, io.EOF) {
			return w.Flush()
		}
		if rev >= revisionBlockInfo {
			// field 1: is_overflows = false; field 2: bucket_num = -1; 0: end.
			w.Write([]byte{1, 0, 2, 0xff, 0xff, 0xff, 0xff, 0})
		}
		cols, err := t.uvarint()
		if err != nil {
			return fmt.Errorf("block %d: column count: %w", block, err)
		}
		rows, err := t.uvarint()
		if err != nil {
			return fmt.Errorf("block %d: row count: %w", block, err)
		}
		if cols > maxColumns || rows > maxRows {
			return fmt.Errorf("block %d: %d columns × %d rows is beyond the decoder's bounds", block, cols, rows)
		}
		for c := uint64(0); c < cols; c++ {
			name, err := t.str(maxNameLength)
			if err != nil {
				return fmt.Errorf("block %d column %d: name: %w", block, c, err)
			}
			typ, err := t.str(maxNameLength)
			if err != nil {
				return fmt.Errorf("block %d column %q: type: %w", block, name, err)
			}
			if rev >= revisionCustomSerialization {
				w.WriteByte(0)
			}
			if rows == 0 {
				continue
			}
			ct, err := parseType(typ, 0)
			if err != nil {
				return fmt.Errorf("column %q: %w", name, err)
			}
			if err := t.prefix(ct); err != nil {
				return fmt.Errorf("column %q (%s): %w", name, typ, err)
			}
			if err := t.data(ct, rows); err != nil {
				return fmt.Errorf("column %q (%s): %w", name, typ, err)
			}
		}
	}
}

// colType is a parsed ClickHouse type: a name and its type arguments.
type colType struct {
	name string
	args []colType
	size int // bytes per row for fixed-width types, else 0
}

// parseType parses a type name such as
// Map(LowCardinality(String), Array(Tuple(a UInt8, b Nullable(String)))).
func parseType(s string, depth int) (colType, error) {
	if depth > maxTypeDepth {
		return colType{}, errors.New("type nests too deeply")
	}
	s = strings.TrimSpace(s)
	name, inner, hasArgs := strings.Cut(s, "(")
	if hasArgs {
		if !strings.HasSuffix(inner, ")") {
			return colType{}, fmt.Errorf("malformed type %q", s)
		}
		inner = inner[:len(inner)-1]
	}
	t := colType{name: name}
	if size, ok := fixedSize(name, inner); ok {
		t.size = size
		return t, nil
	}
	switch name {
	case "String":
		return t, nil
	case "FixedString":
		n, err := strconv.Atoi(strings.TrimSpace(inner))
		if err != nil || n <= 0 || n > maxNameLength {
			return colType{}, fmt.Errorf("malformed type %q", s)
		}
		t.size = n
		return t, nil
	case "Nullable", "Array", "LowCardinality", "Map", "Tuple", "SimpleAggregateFunction":
	default:
		return colType{}, fmt.Errorf("type %s cannot be sent at a client protocol revision by serve-clickhouse (read AggregateFunction states with -Merge combinators)", s)
	}
	parts := store.SplitTypeArgs(inner)
	if name == "SimpleAggregateFunction" {
		// SimpleAggregateFunction(f, T) is stored exactly as T.
		if len(parts) != 2 {
			return colType{}, fmt.Errorf("malformed type %q", s)
		}
		return parseType(parts[1], depth+1)
	}
	for _, p := range parts {
		if name == "Tuple" {
			p = store.TupleElementType(p)
		}
		a, err := parseType(p, depth+1)
		if err != nil {
			return colType{}, err
		}
		t.args = append(t.args, a)
	}
	want := map[string]int{"Nullable": 1, "Array": 1, "LowCardinality": 1, "Map": 2}[name]
	if (want > 0 && len(t.args) != want) || len(t.args) == 0 {
		return colType{}, fmt.Errorf("malformed type %q", s)
	}
	if name == "Map" { // stored as Array(Tuple(K, V))
		t = colType{name: "Array", args: []colType{{name: "Tuple", args: t.args}}}
	}
	return t, nil
}

func fixedSize(name, args string) (int, bool) {
	switch name {
	case "UInt8", "Int8", "Bool", "Enum8", "Nothing":
		return 1, true
	case "UInt16", "Int16", "Date", "Enum16", "BFloat16":
		return 2, true
	case "UInt32", "Int32", "Float32", "Date32", "DateTime", "IPv4", "Decimal32", "Time":
		return 4, true
	case "UInt64", "Int64", "Float64", "DateTime64", "Decimal64", "Time64":
		return 8, true
	case "UInt128", "Int128", "UUID", "IPv6", "Decimal128":
		return 16, true
	case "UInt256", "Int256", "Decimal256":
		return 32, true
	case "Decimal":
		p, _, _ := strings.Cut(args, ",")
		prec, err := strconv.Atoi(strings.TrimSpace(p))
		switch {
		case err != nil:
			return 0, false
		case prec <= 9:
			return 4, true
		case prec <= 18:
			return 8, true
		case prec <= 38:
			return 16, true
		default:
			return 32, true
		}
	}
	if strings.HasPrefix(name, "Interval") {
		return 8, true
	}
	return 0, false
}

// nativeCopier reads Native column data and writes it through unchanged.
type nativeCopier struct {
	r   *bufio.Reader
	w   *bufio.Writer
	buf [binary.MaxVarintLen64]byte
}

func (t *nativeCopier) uvarint() (uint64, error) {
	v, err := binary.ReadUvarint(t.r)
	if err != nil {
		return 0, unexpected(err)
	}
	n := binary.PutUvarint(t.buf[:], v)
	t.w.Write(t.buf[:n])
	return v, nil
}

func (t *nativeCopier) u64() (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(t.r, b[:]); err != nil {
		return 0, unexpected(err)
	}
	t.w.Write(b[:])
	return binary.LittleEndian.Uint64(b[:]), nil
}

func (t *nativeCopier) copyN(n uint64) error {
	if _, err := io.CopyN(t.w, t.r, int64(n)); err != nil {
		return unexpected(err)
	}
	return nil
}

func (t *nativeCopier) str(limit uint64) (string, error) {
	n, err := t.uvarint()
	if err != nil {
		return "", err
	}
	if n > limit {
		return "", fmt.Errorf("string of %d bytes is beyond the decoder's bounds", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(t.r, b); err != nil {
		return "", unexpected(err)
	}
	t.w.Write(b)
	return string(b), nil
}

// prefix copies the column's serialization state prefix: one key-version
// word per LowCardinality anywhere inside the type, depth first.
func (t *nativeCopier) prefix(ct colType) error {
	if ct.name == "LowCardinality" {
		_, err := t.u64()
		return err
	}
	for _, a := range ct.args {
		if err := t.prefix(a); err != nil {
			return err
		}
	}
	return nil
}

// data copies rows values of type ct.
func (t *nativeCopier) data(ct colType, rows uint64) error {
	if rows > maxRows {
		return fmt.Errorf("%d rows is beyond the decoder's bounds", rows)
	}
	if ct.size > 0 {
		return t.copyN(rows * uint64(ct.size))
	}
	switch ct.name {
	case "String":
		for i := uint64(0); i < rows; i++ {
			n, err := t.uvarint()
			if err != nil {
				return err
			}
			if n > maxStringLen {
				return fmt.Errorf("string of %d bytes is beyond the decoder's bounds", n)
			}
			if err := t.copyN(n); err != nil {
				return err
			}
		}
		return nil
	case "Nullable":
		if err := t.copyN(rows); err != nil { // null map
			return err
		}
		return t.data(ct.args[0], rows)
	case "Array":
		var last uint64
		for i := uint64(0); i < rows; i++ {
			off, err := t.u64()
			if err != nil {
				return err
			}
			if off < last {
				return errors.New("array offsets go backwards")
			}
			last = off
		}
		return t.data(ct.args[0], last)
	case "Tuple":
		for _, a := range ct.args {
			if err := t.data(a, rows); err != nil {
				return err
			}
		}
		return nil
	case "LowCardinality":
		return t.lowCardinality(ct.args[0], rows)
	}
	return fmt.Errorf("no layout for %s", ct.name)
}

// lowCardinality copies rows of a LowCardinality column: a sequence of
// chunks, each an index-type word, optionally a dictionary, then indexes.
func (t *nativeCopier) lowCardinality(dict colType, rows uint64) error {
	const hasAdditionalKeys = 1 << 9
	if dict.name == "Nullable" { // the dictionary holds the non-null type
		dict = dict.args[0]
	}
	for rows > 0 {
		flags, err := t.u64()
		if err != nil {
			return err
		}
		width := uint64(1) << (flags & 0xff)
		if width > 8 {
			return fmt.Errorf("bad LowCardinality index type %d", flags&0xff)
		}
		if flags&hasAdditionalKeys != 0 {
			keys, err := t.u64()
			if err != nil {
				return err
			}
			if err := t.data(dict, keys); err != nil {
				return err
			}
		}
		n, err := t.u64()
		if err != nil {
			return err
		}
		if n == 0 || n > rows {
			return fmt.Errorf("LowCardinality chunk of %d rows where %d remain", n, rows)
		}
		if err := t.copyN(n * width); err != nil {
			return err
		}
		rows -= n
	}
	return nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("truncated block: %w", io.ErrUnexpectedEOF)
	}
	return err
}
