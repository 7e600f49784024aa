package store

import (
	"bufio"
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
func DecodeNative(r io.Reader, fn func(Block) error) error {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 64<<10)
	}
	rd := proto.NewReader(br)
	var (
		res   proto.Results
		names []string
		types []string
		cols  []proto.ColResult
	)
	for n := 0; ; n++ {
		if _, err := br.Peek(1); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read native block %d: %w", n, err)
		}
		var b proto.Block
		var target proto.Result = res.Auto()
		if len(res) > 0 {
			for _, c := range res {
				c.Data.Reset()
			}
			target = res
		}
		if err := decodeBlock(&b, rd, target); err != nil {
			return fmt.Errorf("decode native block %d: %w", n, err)
		}
		if b.Columns == 0 {
			continue
		}
		if names == nil {
			for _, c := range res {
				names = append(names, c.Name)
				types = append(types, string(c.Data.Type()))
				cols = append(cols, c.Data)
			}
		}
		if err := fn(Block{Names: names, Types: types, Columns: cols, Rows: b.Rows}); err != nil {
			return err
		}
	}
}

// decodeBlock shields the caller from panics inside column decoders on
// hostile input (a huge length, an impossible type): they become errors.
func decodeBlock(b *proto.Block, rd *proto.Reader, target proto.Result) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed block: %v", r)
		}
	}()
	if err := b.DecodeRawBlock(rd, 0, target); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("truncated block: %w", err)
		}
		return err
	}
	return nil
}
