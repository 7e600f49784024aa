package chhttp

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/ClickHouse/ch-go/compress"
)

// The decoder of decompress=1 bodies, on any bytes: it never panics, its
// only errors are the client's (blockError, answered 400 with a
// ClickHouse code), it never hands out more than the blocks' declared
// sizes allow, and what it accepts ch-go's own reader decodes the same.
func FuzzDecodeBlocks(f *testing.F) {
	// Small seeds, a few blocks of each method: with seeds of a few
	// kilobytes the fuzzer's worker spends its time outside this function
	// and runs a few inputs a minute.
	data := tsvRows(8)
	for _, m := range []compress.Method{compress.LZ4, compress.ZSTD, compress.None} {
		f.Add(blocks(f, m, data, 32))
	}
	f.Add(blocks(f, compress.LZ4, []byte("SELECT 1"), 1<<20))
	f.Add([]byte{})
	f.Add(make([]byte, blockHeaderBytes))
	const max = 64 << 10
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := decodeBlocks(body, max)
		if err != nil {
			var be *blockError
			if !errors.As(err, &be) {
				t.Fatalf("error %v (%T) is not the client's", err, err)
			}
			return
		}
		if len(out) > (len(body)/blockHeaderBytes)*max {
			t.Fatalf("%d bytes decoded from %d: more than the blocks may declare", len(out), len(body))
		}
		ref, err := io.ReadAll(compress.NewReader(bytes.NewReader(body)))
		if !bytes.Equal(ref, out) {
			t.Fatalf("decoded %d bytes, ch-go's reader %d (%v)", len(out), len(ref), err)
		}
	})
}
