package store

import (
	"bytes"
	"context"
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
	e.wg.Add(1)
	go e.produce(c, query, format, r)
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

func (e *Embedded) produce(c *chdbConn, query, format string, r *chunkReader) {
	defer e.wg.Done()
	defer close(r.chunks)
	q := []byte(query)
	h := e.lib.streamQueryN(c.h, bytesPtr(q), uintptr(len(q)), format, uintptr(len(format)))
	runtime.KeepAlive(q)
	if err := e.lib.resultErr(h); err != nil {
		if h != 0 {
			e.lib.destroyResult(h)
		}
		if !notStreamable(err) {
			e.release(c)
			r.started <- err
			return
		}
		// DDL, SET, INSERT … VALUES and the like run only as a whole
		// statement: run it so and hand its output over as one chunk.
		var out bytes.Buffer
		err = e.querySyncFormat(c, query, format, &out)
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
		chunk := append([]byte(nil), b...)
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
