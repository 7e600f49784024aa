package chhttp

import (
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// HTTP compression (Content-Encoding and Accept-Encoding), which
// clickhouse-connect and @clickhouse/client use, apart from ClickHouse's
// own block compression (blocks.go). Both may apply to one request: the
// HTTP encoding is the outer layer.

// requestDecoder undoes the request body's Content-Encoding. Names the
// engine's HTTP server accepts and this one does not (br, xz, bz2,
// snappy) are NOT_IMPLEMENTED, never read as the body. maxWindow bounds
// the memory a zstd frame may ask for.
func requestDecoder(body io.Reader, encoding string, maxWindow int64) (io.ReadCloser, error) {
	switch canonicalEncoding(encoding) {
	case "":
		return io.NopCloser(body), nil
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, exception(27, "request body is not valid gzip: "+err.Error(), "CANNOT_PARSE_INPUT")
		}
		return zr, nil
	case "deflate":
		// ClickHouse's deflate is the zlib format (RFC 1950), as HTTP's is.
		zr, err := zlib.NewReader(body)
		if err != nil {
			return nil, exception(27, "request body is not valid deflate (zlib): "+err.Error(), "CANNOT_PARSE_INPUT")
		}
		return zr, nil
	case "zstd":
		zr, err := zstd.NewReader(body, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(uint64(maxWindow)))
		if err != nil {
			return nil, exception(27, "request body is not valid zstd: "+err.Error(), "CANNOT_PARSE_INPUT")
		}
		return zstdCloser{zr}, nil
	case "lz4":
		// The LZ4 frame format, which the engine's HTTP server takes; its
		// blocks are at most 4 MiB.
		return io.NopCloser(lz4.NewReader(body)), nil
	}
	return nil, exception(48, fmt.Sprintf("Content-Encoding %q is not implemented by serve-clickhouse: send gzip, deflate, zstd, lz4 or no encoding", encoding), "NOT_IMPLEMENTED")
}

// canonicalEncoding is a Content-Encoding's name as this file knows it:
// lower case, x-gzip as gzip, "" for none.
func canonicalEncoding(e string) string {
	switch e = strings.ToLower(strings.TrimSpace(e)); e {
	case "identity", "none":
		return ""
	case "x-gzip":
		return "gzip"
	}
	return e
}

type zstdCloser struct{ *zstd.Decoder }

func (z zstdCloser) Close() error { z.Decoder.Close(); return nil }

// responseEncoding picks the response's Content-Encoding from
// Accept-Encoding, in the engine's HTTP server's order of preference
// (gzip over deflate over zstd over lz4; it would pick br first, which
// this server does not write). The embedded engine's
// enable_http_compression is 1, and system.settings says so: clients
// (clickhouse-connect) that read it then send Accept-Encoding alone, so
// only enable_http_compression=0 turns it off.
func responseEncoding(r *http.Request) string {
	if r.URL.Query().Get("enable_http_compression") == "0" {
		return ""
	}
	accept := map[string]bool{}
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if refusedCoding(params) {
			continue
		}
		accept[strings.ToLower(strings.TrimSpace(name))] = true
	}
	for _, e := range []string{"gzip", "deflate", "zstd", "lz4"} {
		if accept[e] {
			return e
		}
	}
	return ""
}

// refusedCoding reports whether an Accept-Encoding entry's parameters
// give it a weight of 0 (RFC 9110, 12.4.2: q=0, q=0.0, … up to three
// decimals; the name q in any case).
func refusedCoding(params string) bool {
	for _, p := range strings.Split(params, ";") {
		k, v, ok := strings.Cut(p, "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		v = strings.TrimSpace(v)
		if v == "0" || strings.HasPrefix(v, "0.") && len(v) <= 5 && strings.Trim(v[2:], "0") == "" {
			return true
		}
	}
	return false
}

// encodeResponse wraps w in the encoder for encoding; the caller closes
// it to write the encoding's end.
func encodeResponse(w io.Writer, encoding string) io.WriteCloser {
	switch encoding {
	case "gzip":
		return gzip.NewWriter(w)
	case "deflate":
		return zlib.NewWriter(w)
	case "zstd":
		zw, err := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
		if err != nil {
			panic(err) // only for invalid options
		}
		return zw
	case "lz4":
		// Write and Close only: io.Copy would call the lz4 writer's
		// ReadFrom, which fails ("unhandled state") on a new writer.
		return writeCloser{lz4.NewWriter(w)}
	}
	return nopWriteCloser{w}
}

type writeCloser struct{ wc io.WriteCloser }

func (w writeCloser) Write(p []byte) (int, error) { return w.wc.Write(p) }
func (w writeCloser) Close() error                { return w.wc.Close() }

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
