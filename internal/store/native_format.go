package store

import (
	"errors"
	"fmt"
	"io"

	"github.com/ClickHouse/ch-go/proto"
)

// EncodeNative appends cols as one block of ClickHouse's Native format
// (protocol revision 0: no block info, no custom-serialization flags), the
// form the HTTP interface, the file() function and the embedded engine read.
func EncodeNative(buf *proto.Buffer, cols proto.Input) error {
	if len(cols) == 0 {
		return errors.New("insert: no columns")
	}
	rows := cols[0].Data.Rows()
	b := proto.Block{Columns: len(cols), Rows: rows}
	if err := b.EncodeRawBlock(buf, 0, cols); err != nil {
		return fmt.Errorf("encode native block: %w", err)
	}
	return nil
}

// DecodeNative reads a stream of Native blocks (revision 0) from r and calls
// fn for each. Columns are reused between blocks: a block is valid only
// during fn. Truncated or malformed input is an error, never a panic.
//
// The stream ends where a block would begin and r has no byte left, as the
// decoder's own reader sees it: proto.NewReader buffers r (128 KiB ahead),
// so peeking at r itself could find it drained while the next blocks wait
// in that buffer, and a small result of several blocks would end after the
// first.
func DecodeNative(r io.Reader, fn func(Block) error) error {
	d := nativeDecoder{rd: proto.NewReader(r)}
	for n := 0; ; n++ {
		b, err := d.next()
		if errors.Is(err, errEndOfStream) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("decode native block %d: %w", n, err)
		}
		if len(b.Columns) == 0 {
			continue
		}
		if err := fn(b); err != nil {
			return err
		}
	}
}

// Bounds that reject absurd headers before they allocate.
const (
	maxNativeColumns = 10_000
	maxNativeRows    = 10_000_000
)

// errEndOfStream: the stream ended between two blocks.
var errEndOfStream = errors.New("end of the Native stream")

type nativeDecoder struct {
	rd  *proto.Reader
	cur Block
}

// next decodes one block into columns reused from the previous block when
// the structure repeats. Panics inside column decoders on hostile input
// become errors.
func (d *nativeDecoder) next() (b Block, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed block: %v", r)
		}
	}()
	cols, err := d.rd.Int()
	if errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		// Not one byte of a next block.
		return Block{}, errEndOfStream
	}
	if err != nil {
		return Block{}, truncated("column count", err)
	}
	rows, err := d.rd.Int()
	if err != nil {
		return Block{}, truncated("row count", err)
	}
	if cols < 0 || cols > maxNativeColumns {
		return Block{}, fmt.Errorf("invalid column count %d", cols)
	}
	if rows < 0 || rows > maxNativeRows {
		return Block{}, fmt.Errorf("invalid row count %d", rows)
	}
	reuse := len(d.cur.Columns) == cols
	if !reuse {
		d.cur = Block{Names: make([]string, cols), Types: make([]string, cols), Columns: make([]proto.ColResult, cols)}
	}
	for i := 0; i < cols; i++ {
		name, err := d.rd.Str()
		if err != nil {
			return Block{}, truncated("column name", err)
		}
		typ, err := d.rd.Str()
		if err != nil {
			return Block{}, truncated("column type", err)
		}
		col, _ := d.cur.Columns[i].(proto.Column)
		if col == nil || d.cur.Types[i] != typ {
			if col, err = inferColumn(proto.ColumnType(typ)); err != nil {
				return Block{}, fmt.Errorf("column %q: %w", name, err)
			}
		}
		col.Reset()
		if rows > 0 {
			if s, ok := col.(proto.StateDecoder); ok {
				if err := s.DecodeState(d.rd); err != nil {
					return Block{}, fmt.Errorf("column %q state: %w", name, err)
				}
			}
			if err := col.DecodeColumn(d.rd, rows); err != nil {
				return Block{}, fmt.Errorf("column %q: %w", name, err)
			}
		}
		d.cur.Names[i], d.cur.Types[i], d.cur.Columns[i] = name, typ, col
	}
	d.cur.Rows = rows
	return d.cur, nil
}

func truncated(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("truncated block: %s: %w", what, io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("%s: %w", what, err)
}
