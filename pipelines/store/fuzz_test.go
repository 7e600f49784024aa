package store_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/pipelines/store"
)

// Native blocks arrive from the network (the HTTP backend) and from clients
// (serve-clickhouse): any bytes must give blocks or an error, never a panic
// or an unbounded allocation.
func FuzzDecodeNative(f *testing.F) {
	b := newRequestsBatch()
	for i := 0; i < 3; i++ {
		b.add(time.Unix(int64(i), 0), "billy", "h1", "A", "/get", uint32(i), 1)
	}
	var buf proto.Buffer
	if err := store.EncodeNative(&buf, b.input()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Buf)
	f.Add(buf.Buf[:len(buf.Buf)/2])
	f.Add([]byte{0x01, 0x01, 0x01, 'a', 0x06, 'S', 't', 'r', 'i', 'n', 'g', 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{0x02, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = store.DecodeNative(bytes.NewReader(data), func(b store.Block) error {
			for _, c := range b.Columns {
				if c.Rows() != b.Rows {
					t.Fatalf("column has %d rows, block %d", c.Rows(), b.Rows)
				}
			}
			return nil
		})
	})
}

func TestNativeRoundTrip(t *testing.T) {
	b := newRequestsBatch()
	b.add(time.Unix(1, 0), "billy", "h1", "A", "/get", 7, 1)
	var buf proto.Buffer
	if err := store.EncodeNative(&buf, b.input()); err != nil {
		t.Fatal(err)
	}
	var got int
	err := store.DecodeNative(bytes.NewReader(buf.Buf), func(blk store.Block) error {
		got += blk.Rows
		if blk.Col("latency_us").(*proto.ColUInt32).Row(0) != 7 {
			t.Fatal("latency did not survive")
		}
		return nil
	})
	if err != nil || got != 1 {
		t.Fatalf("decoded %d rows, %v", got, err)
	}
	if err := store.DecodeNative(bytes.NewReader(buf.Buf[:len(buf.Buf)-3]), func(store.Block) error { return nil }); err == nil {
		t.Fatal("a truncated block decoded without error")
	}
}
