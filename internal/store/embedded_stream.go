package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
)

// Streaming reads from the embedded engine: a producer goroutine owns the
// connection and the engine's stream handle, and hands result chunks to the
// caller's reader through a channel.

// stream starts st on a connection owned by a producer goroutine that
// fetches result chunks into a channel; the returned reader hands them out.
func (e *Embedded) stream(ctx context.Context, st RawStatement, format string) (*chunkReader, error) {
	query := st.Query
	c, err := e.acquire(ctx, st.Database, st.Settings)
	if err != nil {
		return nil, err
	}
	r := &chunkReader{ctx: ctx, chunks: make(chan []byte, 4), stop: make(chan struct{}), started: make(chan error, 1)}
	if err := e.begin(c); err != nil {
		return nil, err
	}
	go e.produce(c, query, format, st.Params, r)
	select {
	case err := <-r.started:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		close(r.stop)
		return nil, ctx.Err()
	}
	return r, nil
}

func (e *Embedded) produce(c *chdbConn, query, format string, params []QueryParam, r *chunkReader) {
	defer e.wg.Done()
	defer close(r.chunks)
	framing := chunkFramingOf(format)
	var h uintptr
	var err error
	if !framing.whole {
		q := []byte(query)
		h = e.lib.streamQuery(c.h, q, format, params)
		runtime.KeepAlive(q)
		err = e.lib.resultErr(h)
	}
	if framing.whole || err != nil {
		if h != 0 {
			e.lib.destroyResult(h)
		}
		if !framing.whole && !notStreamable(err) {
			e.release(c)
			r.started <- err
			return
		}
		// DDL, SET, INSERT … VALUES and the like run only as a whole
		// statement, and a format with a prefix and a suffix (JSON,
		// Parquet, ...) is whole only if written in one piece: run it so
		// and hand its output over as one chunk.
		var out bytes.Buffer
		err = e.querySyncParams(c, query, format, params, &out)
		e.release(c)
		r.started <- err
		if err == nil && out.Len() > 0 {
			select {
			case r.chunks <- out.Bytes():
			case <-r.stop:
			}
		}
		return
	}
	r.started <- nil
	cancelled := false
	var header []byte // the first chunk's header, cut from the later ones
	for !cancelled {
		res := e.lib.streamFetch(c.h, h)
		if err := e.lib.resultErr(res); err != nil {
			if res != 0 {
				e.lib.destroyResult(res)
			}
			r.err = err
			break
		}
		b := e.lib.resultBytes(res)
		if len(b) == 0 {
			e.lib.destroyResult(res)
			break
		}
		chunk := framing.join(append([]byte(nil), b...), &header)
		e.lib.destroyResult(res)
		select {
		case r.chunks <- chunk:
		case <-r.stop:
			cancelled = true
		}
	}
	if cancelled {
		e.lib.streamCancel(c.h, h)
		e.lib.destroyResult(h)
		// A cancelled stream spoils its connection: replace it.
		e.disconnect(c)
		nc, err := e.connect()
		if err != nil {
			// The pool shrinks by one; later statements still run on the rest.
			return
		}
		e.pool <- nc
		return
	}
	e.lib.destroyResult(h)
	e.release(c)
}

// notStreamable reports the engine's refusal to stream a statement that is
// not a query.
func notStreamable(err error) bool {
	var ex *Exception
	return errors.As(err, &ex) && strings.Contains(ex.Message, "Streaming query is not supported")
}

// chunkReader is the consumer side of a streaming query. err is written by
// the producer before it closes chunks, so reading it after the channel is
// drained is race-free.
type chunkReader struct {
	ctx     context.Context
	chunks  chan []byte
	stop    chan struct{}
	started chan error
	cur     []byte
	err     error
	closed  bool
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		select {
		case c, ok := <-r.chunks:
			if !ok {
				if r.err != nil {
					return 0, r.err
				}
				return 0, io.EOF
			}
			r.cur = c
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// Close stops the producer if the stream was not read to its end.
func (r *chunkReader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	close(r.stop)
	return nil
}

// chunkFraming is how the engine's streamed chunks of one output format
// join into one output: each chunk is that format written afresh, so a
// format that begins with a header repeats it in every chunk, and one with
// a prefix and a suffix (JSON's meta and statistics, Parquet's footer)
// cannot be joined at all.
type chunkFraming struct {
	whole bool // not streamed: written in one piece
	// header is the length of the header a chunk begins with (nil: none).
	header func(chunk []byte) int
}

// chunkFramingOf classifies an output format by name.
func chunkFramingOf(format string) chunkFraming {
	f := strings.ToLower(format)
	switch f {
	case "native", "rowbinary", "tabseparated", "tsv", "tabseparatedraw", "tsvraw", "raw", "csv",
		"jsoneachrow", "jsonlines", "ndjson", "jsoncompacteachrow", "jsonstringseachrow", "jsoncompactstringseachrow",
		"jsoneachrowwithprogress", "jsonstringseachrowwithprogress", "values", "rawblob", "null":
		return chunkFraming{}
	case "rowbinarywithnames":
		return chunkFraming{header: func(b []byte) int { return rowBinaryHeader(b, 1) }}
	case "rowbinarywithnamesandtypes":
		return chunkFraming{header: func(b []byte) int { return rowBinaryHeader(b, 2) }}
	}
	// The text formats' header is a line of names, and one of types.
	for _, family := range []string{"tabseparated", "tsv", "tabseparatedraw", "tsvraw", "csv", "jsoncompacteachrow", "jsoncompactstringseachrow"} {
		switch strings.TrimPrefix(f, family) {
		case "withnames":
			return chunkFraming{header: func(b []byte) int { return lines(b, 1) }}
		case "withnamesandtypes":
			return chunkFraming{header: func(b []byte) int { return lines(b, 2) }}
		}
	}
	return chunkFraming{whole: true}
}

// join returns chunk as it continues the output: the first chunk's header
// is remembered in *header and cut from every later chunk that repeats it.
func (f chunkFraming) join(chunk []byte, header *[]byte) []byte {
	if f.header == nil {
		return chunk
	}
	if *header == nil {
		*header = chunk[:f.header(chunk)]
		return chunk
	}
	if bytes.HasPrefix(chunk, *header) {
		return chunk[len(*header):]
	}
	return chunk
}

// rowBinaryHeader is the length of RowBinaryWithNames(AndTypes)'s header:
// a column count, then per column its name (and its type) as
// length-prefixed strings.
func rowBinaryHeader(b []byte, stringsPerColumn int) int {
	n, off := binary.Uvarint(b)
	if off <= 0 {
		return 0
	}
	for i := uint64(0); i < n*uint64(stringsPerColumn); i++ {
		l, k := binary.Uvarint(b[off:])
		if k <= 0 || uint64(len(b)-off-k) < l {
			return 0
		}
		off += k + int(l)
	}
	return off
}

// lines is the length of b's first n lines.
func lines(b []byte, n int) int {
	off := 0
	for range n {
		i := bytes.IndexByte(b[off:], '\n')
		if i < 0 {
			return 0
		}
		off += i + 1
	}
	return off
}
