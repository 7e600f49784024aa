package chhttp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/ClickHouse/ch-go/compress"

	"github.com/spikehunt/spikehunt/internal/store"
)

// ClickHouse's compressed block format, as clients send it with
// decompress=1 and read it with compress=1: a 16-byte CityHash128 of the
// rest of the block, a method byte (0x02 none, 0x82 LZ4, 0x90 ZSTD), the
// block's size from the method byte on (uint32 LE, the 9-byte header
// included), the decompressed size (uint32 LE), then the data.
// ch-go/compress does the decoding and the checksum; this file bounds what
// a block may declare before ch-go allocates for it, and turns its errors
// into the exceptions ClickHouse answers with.

const (
	blockChecksumBytes = 16
	blockHeaderBytes   = blockChecksumBytes + 9

	// outputBlockBytes is how much of a response goes into one compressed
	// block: ClickHouse's max_compress_block_size.
	outputBlockBytes = 1 << 20
)

// ClickHouse's error codes for a bad compressed block.
const (
	codeChecksumDoesntMatch      = 40
	codeUnknownCompressionMethod = 89
	codeTooLargeSizeCompressed   = 246
	codeCannotDecompress         = 271
)

// blockError is a request body that is not a valid stream of compressed
// blocks: the client's fault (HTTP 400), never the engine's.
type blockError struct{ ex *store.Exception }

func (e *blockError) Error() string { return e.ex.Message }
func (e *blockError) Unwrap() error { return e.ex }

func badBlock(code int, name, format string, args ...any) error {
	return &blockError{exception(code, fmt.Sprintf(format, args...), name)}
}

// blockFrames passes a stream of compressed blocks through unchanged, but
// checks each block's header first: a known method and sizes within max,
// so that the decoder behind it allocates at most max (twice) per block
// whatever a block declares. It says io.EOF only between blocks; a body
// that ends inside one is io.ErrUnexpectedEOF.
type blockFrames struct {
	r      io.Reader
	max    int64
	header [blockHeaderBytes]byte
	hdrOff int   // bytes of header still to hand out: header[len-hdrOff:]
	left   int64 // bytes of the current block's data still to pass
	blocks int
}

func (f *blockFrames) Read(p []byte) (int, error) {
	if f.hdrOff == 0 && f.left == 0 {
		if err := f.next(); err != nil {
			return 0, err
		}
	}
	if f.hdrOff > 0 {
		n := copy(p, f.header[blockHeaderBytes-f.hdrOff:])
		f.hdrOff -= n
		return n, nil
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.r.Read(p)
	f.left -= int64(n)
	if errors.Is(err, io.EOF) {
		if f.left > 0 {
			return n, badBlock(codeCannotDecompress, "CANNOT_DECOMPRESS", "the request body ends inside compressed block %d (%d bytes missing)", f.blocks, f.left)
		}
		err = nil
	}
	return n, err
}

// next reads and checks the next block's header.
func (f *blockFrames) next() error {
	n, err := io.ReadFull(f.r, f.header[:])
	switch {
	case n == 0 && errors.Is(err, io.EOF):
		return io.EOF
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badBlock(codeCannotDecompress, "CANNOT_DECOMPRESS", "the request body ends inside the header of compressed block %d (decompress=1 expects ClickHouse's compressed block format)", f.blocks)
	case err != nil:
		return err
	}
	f.blocks++
	method := f.header[blockChecksumBytes]
	switch method {
	case 0x02, 0x82, 0x90:
	default:
		return badBlock(codeUnknownCompressionMethod, "UNKNOWN_COMPRESSION_METHOD", "compressed block %d has method byte 0x%02x: serve-clickhouse decodes 0x02 (none), 0x82 (LZ4) and 0x90 (ZSTD); decompress=1 expects ClickHouse's compressed block format", f.blocks, method)
	}
	size := int64(binary.LittleEndian.Uint32(f.header[blockChecksumBytes+1:]))
	data := int64(binary.LittleEndian.Uint32(f.header[blockChecksumBytes+5:]))
	if size < 9 || size-9 > f.max || data > f.max {
		return badBlock(codeTooLargeSizeCompressed, "TOO_LARGE_SIZE_COMPRESSED", "compressed block %d declares %d bytes compressed and %d decompressed; serve-clickhouse takes blocks of at most %d bytes: send smaller blocks (smaller batches, for clickhouse-go over HTTP) or raise --max-compressed-block-bytes", f.blocks, size, data, f.max)
	}
	f.hdrOff, f.left = blockHeaderBytes, size-9
	return nil
}

// blockReader decodes a request body of compressed blocks. Its first
// error, io.EOF included, is its answer from then on: ch-go's reader
// would hand out its last block again if read after the end (bufio reads
// on after an error it has reported once).
type blockReader struct {
	frames *blockFrames
	dec    *compress.Reader
	err    error
}

func newBlockReader(r io.Reader, max int64) *blockReader {
	f := &blockFrames{r: r, max: max}
	return &blockReader{frames: f, dec: compress.NewReader(f)}
}

func (b *blockReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.read(p)
	b.err = err
	return n, err
}

func (b *blockReader) read(p []byte) (int, error) {
	n, err := b.dec.Read(p)
	if err == nil {
		return n, nil
	}
	var be *blockError
	var corrupt *compress.CorruptedDataErr
	switch {
	case errors.As(err, &be):
		return n, be
	case errors.Is(err, io.EOF):
		// blockFrames says io.EOF only between blocks.
		return n, io.EOF
	case errors.As(err, &corrupt):
		return n, badBlock(codeChecksumDoesntMatch, "CHECKSUM_DOESNT_MATCH", "checksum of compressed block %d does not match its data (%s): the body was corrupted, or it is not in ClickHouse's compressed block format", b.frames.blocks, err)
	default:
		return n, badBlock(codeCannotDecompress, "CANNOT_DECOMPRESS", "cannot decompress block %d: %s", b.frames.blocks, strings.TrimPrefix(err.Error(), "read next block: "))
	}
}

// decodeBlocks reads a whole stream of compressed blocks (the fuzz test's
// entry point and the handler's, through blockReader).
func decodeBlocks(body []byte, max int64) ([]byte, error) {
	return io.ReadAll(newBlockReader(bytes.NewReader(body), max))
}

// blockWriter writes what it is given as compressed blocks of up to
// outputBlockBytes. Close writes the last, partial block; it does not
// close w.
type blockWriter struct {
	w   io.Writer
	enc *compress.Writer
	buf []byte
}

func newBlockWriter(w io.Writer, m compress.Method) *blockWriter {
	return &blockWriter{w: w, enc: compress.NewWriter(compress.LevelZero, m), buf: make([]byte, 0, outputBlockBytes)}
}

func (b *blockWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), outputBlockBytes-len(b.buf))
		b.buf = append(b.buf, p[:k]...)
		p, n = p[k:], n+k
		if len(b.buf) == outputBlockBytes {
			if err := b.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (b *blockWriter) flush() error {
	if len(b.buf) == 0 {
		return nil
	}
	if err := b.enc.Compress(b.buf); err != nil {
		return fmt.Errorf("compress a response block: %w", err)
	}
	b.buf = b.buf[:0]
	_, err := b.w.Write(b.enc.Data)
	return err
}

// Flush writes the buffered part as a block of its own, so that a
// streaming client sees it; http.Flusher passes through.
func (b *blockWriter) Flush() {
	if b.flush() == nil {
		if f, ok := b.w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

func (b *blockWriter) Close() error { return b.flush() }

// responseBlockMethod is the method of compress=1 responses: ClickHouse's
// network_compression_method setting, LZ4 by default.
func responseBlockMethod(setting string) (compress.Method, error) {
	switch strings.ToLower(setting) {
	case "", "lz4":
		return compress.LZ4, nil
	case "lz4hc":
		return compress.LZ4HC, nil
	case "zstd":
		return compress.ZSTD, nil
	case "none":
		return compress.None, nil
	}
	return 0, exception(codeUnknownCompressionMethod, "network_compression_method = "+setting+" is not one serve-clickhouse writes: use LZ4, LZ4HC, ZSTD or NONE", "UNKNOWN_COMPRESSION_METHOD")
}
