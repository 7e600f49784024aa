package export

import (
	"bytes"
	"sync"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lz4Compressor compresses produce batches with 64 KiB LZ4 blocks. franz-go's
// default LZ4 writers use 4 MiB blocks, about 12 MiB of pooled buffers,
// a third of the agent's memory budget, for batches that are ~100 KiB.
type lz4Compressor struct{ pool sync.Pool }

func newLZ4Compressor() *lz4Compressor {
	return &lz4Compressor{pool: sync.Pool{New: func() any {
		w := lz4.NewWriter(nil)
		_ = w.Apply(lz4.BlockSizeOption(lz4.Block64Kb)) // a valid constant: cannot fail
		return w
	}}}
}

// Compress implements kgo.Compressor. A failure sends the batch
// uncompressed rather than losing it.
func (c *lz4Compressor) Compress(dst *bytes.Buffer, src []byte, _ ...kgo.CompressFlag) ([]byte, kgo.CompressionCodecType) {
	w := c.pool.Get().(*lz4.Writer)
	defer c.pool.Put(w)
	w.Reset(dst)
	if _, err := w.Write(src); err != nil {
		return src, kgo.CodecNone
	}
	if err := w.Close(); err != nil {
		return src, kgo.CodecNone
	}
	return dst.Bytes(), kgo.CodecLz4
}
