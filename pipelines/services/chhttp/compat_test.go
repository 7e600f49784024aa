package chhttp

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/ClickHouse/ch-go/compress"
)

// answer is a response as a test looks at it.
type answer struct {
	status int
	code   string // X-ClickHouse-Exception-Code
	body   string
	header http.Header
}

// post sends body to the handler at addr with the URL parameters params
// and the request headers hdr.
func post(t *testing.T, addr string, params url.Values, hdr map[string]string, body []byte) answer {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+addr+"/?"+params.Encode(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	// The raw bytes: no transparent gzip.
	req.Header.Set("Accept-Encoding", "identity")
	if v, ok := hdr["Accept-Encoding"]; ok {
		req.Header.Set("Accept-Encoding", v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header.Get("X-ClickHouse-Exception-Code"), string(b), resp.Header}
}

func query(q string) url.Values { return url.Values{"query": {q}} }

// blocks encodes data as ClickHouse's compressed blocks of at most size
// bytes each, with method m.
func blocks(t testing.TB, m compress.Method, data []byte, size int) []byte {
	t.Helper()
	w := compress.NewWriter(compress.LevelZero, m)
	var out []byte
	for len(data) > 0 {
		n := min(size, len(data))
		if err := w.Compress(data[:n]); err != nil {
			t.Fatal(err)
		}
		out = append(out, w.Data...)
		data = data[n:]
	}
	return out
}

// tsvRows is n rows of "h<i%10>\t<i>".
func tsvRows(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "h%d\t%d\n", i%10, i)
	}
	return b.Bytes()
}

func mustOK(t *testing.T, a answer) {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("status %d code %s: %s", a.status, a.code, a.body)
	}
}

func createHV(t *testing.T, addr, table string) {
	t.Helper()
	ddl(t, addr, "CREATE TABLE "+table+" (host String, v UInt32) ENGINE = MergeTree ORDER BY host")
}

// {name:Type} placeholders take their values from param_name URL
// parameters and from multipart/form-data fields, bound by the engine: a
// value full of quotes, backslashes and a second statement comes back
// unchanged. The old code refused every param_ ("query parameters are
// not supported; inline the values", NOT_IMPLEMENTED).
func TestQueryParametersAreBoundByTheEngineFromTheURLAndForms(t *testing.T) {
	addr, _ := serve(t, Config{})
	createHV(t, addr, "hv")
	// A parameter the INSERT does not use goes through the engine's
	// streaming insert with parameters.
	mustOK(t, post(t, addr, url.Values{"query": {"INSERT INTO hv FORMAT TSV"}, "param_unused": {"1"}}, nil, tsvRows(1000)))
	tricky := `it's a "quote"\ and	tab'); DROP TABLE hv; --`
	// The interface's values are in the escaped text form (TabSeparated).
	escaped := strings.NewReplacer(`\`, `\\`, "\t", `\t`).Replace(tricky)

	a := post(t, addr, url.Values{"query": {"SELECT count(), sum(v) FROM hv WHERE host = {h:String} AND v >= {min:UInt32}"},
		"param_h": {"h3"}, "param_min": {"500"}}, nil, nil)
	mustOK(t, a)
	if a.body != "50\t37400\n" {
		t.Errorf("URL parameters: got %q, want 50 rows summing to 37400", a.body)
	}
	a = post(t, addr, url.Values{"param_s": {escaped}}, nil, []byte("SELECT {s:String} FORMAT RawBLOB"))
	mustOK(t, a)
	if a.body != tricky {
		t.Errorf("a quoted value came back as %q, want %q", a.body, tricky)
	}

	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	mw.WriteField("query", "SELECT count() FROM hv WHERE host = {h:String} AND {s:String} != ''")
	mw.WriteField("param_h", "h7")
	mw.WriteField("param_s", escaped)
	mw.Close()
	a = post(t, addr, nil, map[string]string{"Content-Type": mw.FormDataContentType()}, form.Bytes())
	mustOK(t, a)
	if a.body != "100\n" {
		t.Errorf("form parameters: got %q, want 100", a.body)
	}
	// A statement the engine runs whole, not streamed, binds them too.
	mustOK(t, post(t, addr, url.Values{"param_h": {"h" + escaped}, "param_v": {"4000000000"}}, nil, []byte("INSERT INTO hv SELECT {h:String}, {v:UInt32}")))
	a = post(t, addr, url.Values{"query": {"SELECT count() FROM hv WHERE host = {h:String} AND v = 4000000000"}, "param_h": {"h" + escaped}}, nil, nil)
	if a.body != "1\n" {
		t.Errorf("INSERT … SELECT with parameters: %q rows, want 1", a.body)
	}
	a = post(t, addr, query("SELECT count() FROM hv"), nil, nil)
	if a.body != "1001\n" {
		t.Errorf("the table after the parameters: %q rows, want 1001 (nothing spliced ran)", a.body)
	}
}

// A value its placeholder's type cannot parse, a parameter with no name
// and an external table get ClickHouse's codes, never a misparse.
func TestBadParametersAndUnsupportedPartsAreClearErrors(t *testing.T) {
	addr, _ := serve(t, Config{})
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	mw.WriteField("query", "SELECT * FROM ext")
	fw, _ := mw.CreateFormFile("ext", "ext.tsv")
	fw.Write([]byte("1\n"))
	mw.Close()
	for _, tc := range []struct {
		name     string
		params   url.Values
		hdr      map[string]string
		body     []byte
		wantCode string
		wantText string
	}{
		{"a value its type cannot parse", url.Values{"query": {"SELECT {n:UInt32}"}, "param_n": {"abc"}}, nil, nil, "457", "BAD_QUERY_PARAMETER"},
		{"a placeholder without a value", query("SELECT {n:UInt32}"), nil, nil, "456", "UNKNOWN_QUERY_PARAMETER"},
		{"a parameter without a name", url.Values{"query": {"SELECT 1"}, "param_": {"x"}}, nil, nil, "456", "empty name"},
		{"an external table", nil, map[string]string{"Content-Type": mw.FormDataContentType()}, form.Bytes(), "48", "external tables"},
		{"a brotli body", query("SELECT 1"), map[string]string{"Content-Encoding": "br"}, []byte{1, 2, 3}, "48", "Content-Encoding \"br\" is not implemented"},
		{"an unknown block method for responses", url.Values{"query": {"SELECT 1"}, "compress": {"1"}, "network_compression_method": {"t64"}}, nil, nil, "89", "UNKNOWN_COMPRESSION_METHOD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := post(t, addr, tc.params, tc.hdr, tc.body)
			if a.status < 400 || a.code != tc.wantCode || !strings.Contains(a.body, tc.wantText) {
				t.Fatalf("got %d code %q %q, want code %s and %q", a.status, a.code, a.body, tc.wantCode, tc.wantText)
			}
		})
	}
}

// decompress=1 bodies (client-v2's compressClientRequest, ch-go) are
// ClickHouse's compressed blocks, in every method, one or many: decoded,
// not parsed as SQL. The old code refused them (NOT_IMPLEMENTED).
func TestCompressedBlockInsertsAreDecoded(t *testing.T) {
	addr, _ := serve(t, Config{})
	createHV(t, addr, "blk")
	data := tsvRows(20000) // ~170 KB: several 64 KiB blocks
	for _, m := range []compress.Method{compress.LZ4, compress.ZSTD, compress.None, compress.LZ4HC} {
		a := post(t, addr, url.Values{"query": {"INSERT INTO blk FORMAT TSV"}, "decompress": {"1"}}, nil, blocks(t, m, data, 64<<10))
		mustOK(t, a)
	}
	// The query itself may come compressed too.
	a := post(t, addr, url.Values{"decompress": {"1"}}, nil, blocks(t, compress.LZ4, []byte("SELECT count(), sum(v) FROM blk"), 1<<20))
	mustOK(t, a)
	if want := fmt.Sprintf("%d\t%d\n", 4*20000, 4*(20000*19999/2)); a.body != want {
		t.Fatalf("got %q, want %q", a.body, want)
	}
}

// clickhouse-connect's default insert: the INSERT statement, a newline and
// the data, all in one lz4-framed body (Content-Encoding: lz4). The old
// code read the lz4 frame as SQL ("Unrecognized token").
func TestAnLZ4BodyWithTheInsertAtItsHeadIsInserted(t *testing.T) {
	addr, _ := serve(t, Config{})
	createHV(t, addr, "cc")
	for _, enc := range []string{"lz4", "zstd", "gzip", "deflate", ""} {
		body := append([]byte("INSERT INTO cc (`host`, `v`) FORMAT TabSeparated\n"), tsvRows(1000)...)
		a := post(t, addr, nil, map[string]string{"Content-Encoding": enc}, encodeBody(t, enc, body))
		mustOK(t, a)
	}
	a := post(t, addr, query("SELECT count(), sum(v) FROM cc"), nil, nil)
	if a.body != "5000\t2497500\n" {
		t.Fatalf("got %q, want 5 × 1000 rows", a.body)
	}
}

func encodeBody(t *testing.T, enc string, body []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := encodeResponse(&b, enc)
	if _, err := w.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A block whose checksum does not match, one cut short, one with an
// unknown method and a body that is not blocks at all are each the
// client's error with ClickHouse's code, and an INSERT that had good
// blocks before the bad one inserts nothing.
func TestABadCompressedBlockIsRefusedAndInsertsNothing(t *testing.T) {
	addr, _ := serve(t, Config{})
	createHV(t, addr, "bad")
	good := blocks(t, compress.LZ4, tsvRows(20000), 64<<10)
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-3] ^= 0x40 // in the last block's data
	unknown := append([]byte(nil), good...)
	unknown[16] = 0x91
	for _, tc := range []struct {
		name, wantCode, wantText string
		body                     []byte
	}{
		{"a checksum mismatch", "40", "CHECKSUM_DOESNT_MATCH", flipped},
		{"a body cut inside a block", "271", "ends inside compressed block", good[:len(good)-10]},
		{"an unknown method", "89", "method byte 0x91", unknown},
		{"plain text", "89", "decompress=1 expects ClickHouse's compressed block format", []byte("h1\t1\nh2\t2\nh3\t3\nh4\t4\nh5\t5\nh6\t6\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := post(t, addr, url.Values{"query": {"INSERT INTO bad FORMAT TSV"}, "decompress": {"1"}}, nil, tc.body)
			if a.status != http.StatusBadRequest || a.code != tc.wantCode || !strings.Contains(a.body, tc.wantText) {
				t.Fatalf("got %d code %q %q, want 400, code %s and %q", a.status, a.code, a.body, tc.wantCode, tc.wantText)
			}
		})
	}
	if a := post(t, addr, query("SELECT count() FROM bad"), nil, nil); a.body != "0\n" {
		t.Fatalf("%q rows inserted by refused bodies, want 0", a.body)
	}
}

// A 25-byte block header that declares 127 MiB, compressed and not, is
// refused before anything is allocated for it: ch-go's reader alone takes
// blocks up to 128 MiB and would allocate both sizes for each request.
func TestACompressedBlockBombIsRefusedWithoutAllocating(t *testing.T) {
	addr, _ := serve(t, Config{MaxCompressedBlockBytes: 1 << 20})
	createHV(t, addr, "bomb")
	bomb := blocks(t, compress.LZ4, []byte("h1\t1\n"), 1<<20)
	bomb[17], bomb[18], bomb[19], bomb[20] = 0, 0, 0xf0, 0x07 // compressed size: 127 MiB
	bomb[21], bomb[22], bomb[23], bomb[24] = 0, 0, 0xf0, 0x07 // decompressed: 127 MiB
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var a answer
	for range 20 {
		a = post(t, addr, url.Values{"query": {"INSERT INTO bomb FORMAT TSV"}, "decompress": {"1"}}, nil, bomb)
	}
	runtime.ReadMemStats(&after)
	if a.status != http.StatusBadRequest || a.code != "246" {
		t.Errorf("got %d code %q %q, want 400 and TOO_LARGE_SIZE_COMPRESSED (246)", a.status, a.code, a.body)
	}
	// The test's own client and the engine's parser allocate too: a
	// generous bound, far below one declared block per request (2.5 GiB).
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Fatalf("20 block bombs allocated %d MiB, want well under one declared block", got>>20)
	}
}

// compress=1 responses (client-v2's default) are ClickHouse's compressed
// blocks with valid checksums, LZ4 unless network_compression_method says
// otherwise, inside any HTTP encoding the client accepts. The old code
// refused compress=1 (NOT_IMPLEMENTED).
func TestCompressOneResponsesAreCheckedBlocks(t *testing.T) {
	addr, _ := serve(t, Config{})
	const q = "SELECT number FROM system.numbers LIMIT 300000 FORMAT RowBinary"
	plain := post(t, addr, query(q), nil, nil)
	mustOK(t, plain)
	for _, tc := range []struct {
		method, accept string
		want           byte
	}{{"", "", 0x82}, {"ZSTD", "", 0x90}, {"LZ4", "gzip", 0x82}, {"NONE", "zstd", 0x02}} {
		t.Run(tc.method+"/"+tc.accept, func(t *testing.T) {
			p := url.Values{"query": {q}, "compress": {"1"}}
			if tc.method != "" {
				p.Set("network_compression_method", tc.method)
			}
			a := post(t, addr, p, map[string]string{"Accept-Encoding": tc.accept}, nil)
			mustOK(t, a)
			raw := []byte(a.body)
			if got := a.header.Get("Content-Encoding"); got != tc.accept {
				t.Fatalf("Content-Encoding %q, want %q", got, tc.accept)
			}
			if tc.accept != "" {
				dec, err := requestDecoder(bytes.NewReader(raw), tc.accept, 1<<30)
				if err != nil {
					t.Fatal(err)
				}
				if raw, err = io.ReadAll(dec); err != nil {
					t.Fatal(err)
				}
			}
			if raw[16] != tc.want {
				t.Fatalf("method byte 0x%02x, want 0x%02x", raw[16], tc.want)
			}
			// ch-go's reader checks each block's checksum.
			got, err := decodeBlocks(raw, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, []byte(plain.body)) {
				t.Fatalf("decoded %d bytes differ from the plain answer's %d", len(got), len(plain.body))
			}
		})
	}
}

// A request with compress=1 gets its error as compressed blocks too, as
// from ClickHouse: clickhouse-go up to v2.47 (the OpenTelemetry Collector's
// ClickHouse exporter at v0.165.0, lz4 by default) decodes every answer so,
// and read the old code's plain errors as "data size should be 0 < … <
// 134217728" instead of the reason, for a failed query and for a batch over
// --max-compressed-block-bytes alike (it sends a whole batch as one block).
// Errors before the request is read (bad credentials) stay plain, as the
// engine's are.
func TestErrorsOfCompressOneRequestsAreCompressedBlocks(t *testing.T) {
	addr, _ := serve(t, Config{MaxCompressedBlockBytes: 64 << 10})
	createHV(t, addr, "errs")
	for _, tc := range []struct {
		name   string
		params url.Values
		body   []byte
		want   string
	}{
		{"query", url.Values{"query": {"SELECT * FROM no_such_table"}, "compress": {"1"}}, nil, "UNKNOWN_TABLE"},
		{"block over the bound", url.Values{"query": {"INSERT INTO errs FORMAT TSV"}, "compress": {"1"}, "decompress": {"1"}},
			blocks(t, compress.LZ4, tsvRows(20000), 1<<20), "--max-compressed-block-bytes"},
		{"zstd", url.Values{"query": {"SELECT * FROM no_such_table"}, "compress": {"1"}, "network_compression_method": {"ZSTD"}}, nil, "UNKNOWN_TABLE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := post(t, addr, tc.params, nil, tc.body)
			if a.status == http.StatusOK || a.code == "" {
				t.Fatalf("status %d code %q, want an error", a.status, a.code)
			}
			text, err := decodeBlocks([]byte(a.body), 1<<30)
			if err != nil {
				t.Fatalf("the error body is not compressed blocks (%v): %q", err, a.body)
			}
			if !strings.Contains(string(text), tc.want) {
				t.Fatalf("decoded error %q, want it to name %s", text, tc.want)
			}
		})
	}
}

// HTTP compression of responses follows Accept-Encoding in the engine's
// order (gzip first), and is on unless enable_http_compression=0, as the
// engine's own setting says.
func TestResponsesFollowAcceptEncoding(t *testing.T) {
	addr, _ := serve(t, Config{})
	for _, tc := range []struct{ accept, param, want string }{
		{"lz4,zstd,gzip,deflate", "", "gzip"},
		{"lz4", "", "lz4"},
		{"zstd, lz4", "", "zstd"},
		{"deflate", "1", "deflate"},
		{"gzip", "0", ""},
		{"br", "", ""},
	} {
		p := query("SELECT number FROM numbers(1000)")
		if tc.param != "" {
			p.Set("enable_http_compression", tc.param)
		}
		a := post(t, addr, p, map[string]string{"Accept-Encoding": tc.accept}, nil)
		mustOK(t, a)
		if got := a.header.Get("Content-Encoding"); got != tc.want {
			t.Errorf("Accept-Encoding %q, enable_http_compression %q: Content-Encoding %q, want %q", tc.accept, tc.param, got, tc.want)
			continue
		}
		body := []byte(a.body)
		if tc.want != "" {
			dec, err := requestDecoder(bytes.NewReader(body), tc.want, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			if body, err = io.ReadAll(dec); err != nil {
				t.Fatal(err)
			}
		}
		if n := bytes.Count(body, []byte("\n")); n != 1000 {
			t.Errorf("%s: %d rows, want 1000", tc.want, n)
		}
	}
}

// client-v2 names its output format and database in headers
// (X-ClickHouse-Format, X-ClickHouse-Database); the old code answered
// TabSeparated, which the client could not read.
func TestFormatAndDatabaseHeadersAreHonoured(t *testing.T) {
	addr, db := serve(t, Config{})
	a := post(t, addr, nil, map[string]string{"X-ClickHouse-Format": "JSONEachRow", "X-ClickHouse-Database": db}, []byte("SELECT currentDatabase() AS db"))
	mustOK(t, a)
	if a.body != `{"db":"`+db+`"}`+"\n" || a.header.Get("X-ClickHouse-Format") != "JSONEachRow" {
		t.Fatalf("got %q (format %q), want JSONEachRow of system", a.body, a.header.Get("X-ClickHouse-Format"))
	}
}

// Formats with a header (client-v2's default RowBinaryWithNamesAndTypes,
// CSVWithNames, ...) have it once however many chunks the engine streams,
// and JSON is one document. The old code repeated the header in every
// streamed chunk: client-v2 read 200,005 rows of 200,000.
func TestHeaderedFormatsHaveOneHeaderOverManyChunks(t *testing.T) {
	addr, _ := serve(t, Config{})
	const q = "SELECT number AS n FROM system.numbers LIMIT 200000"
	for _, tc := range []struct {
		format string
		count  func(body string) int // headers seen
	}{
		{"RowBinaryWithNamesAndTypes", func(b string) int { return strings.Count(b, "\x01\x01n\x06UInt64") }},
		{"RowBinaryWithNames", func(b string) int { return strings.Count(b, "\x01\x01n") - strings.Count(b, "\x01\x01n\x06UInt64") }},
		{"CSVWithNames", func(b string) int { return strings.Count(b, "\"n\"\n") }},
		{"TSVWithNamesAndTypes", func(b string) int { return strings.Count(b, "n\nUInt64\n") }},
		{"JSONCompactEachRowWithNames", func(b string) int { return strings.Count(b, "[\"n\"]\n") }},
		{"JSON", func(b string) int { return strings.Count(b, "\"meta\":") }},
	} {
		a := post(t, addr, url.Values{"query": {q}, "default_format": {tc.format}}, nil, nil)
		mustOK(t, a)
		if n := tc.count(a.body); n != 1 {
			t.Errorf("%s: %d headers in %d bytes, want 1", tc.format, n, len(a.body))
		}
	}
	a := post(t, addr, url.Values{"query": {q}, "default_format": {"RowBinaryWithNamesAndTypes"}}, nil, nil)
	if want := len("\x01\x01n\x06UInt64") + 8*200000; len(a.body) != want {
		t.Errorf("RowBinaryWithNamesAndTypes: %d bytes, want %d", len(a.body), want)
	}
}

// Content codings are case-insensitive (RFC 9110, 8.4.1): a body in
// GZIP, Gzip or X-GZIP is inflated as gzip is, and Accept-Encoding's
// names and q-values are read in any case and spelling (q=0, q=0.0,
// Q=0.000 refuse a coding).
func TestContentCodingsAreCaseInsensitive(t *testing.T) {
	addr, _ := serve(t, Config{})
	createHV(t, addr, "cci")
	codings := []struct{ header, enc string }{{"GZIP", "gzip"}, {"Gzip", "gzip"}, {"X-GZIP", "gzip"}, {" gzip ", "gzip"}, {"DEFLATE", "deflate"}, {"ZSTD", "zstd"}, {"LZ4", "lz4"}, {"IDENTITY", ""}}
	for _, c := range codings {
		body := append([]byte("INSERT INTO cci (`host`, `v`) FORMAT TabSeparated\n"), tsvRows(10)...)
		a := post(t, addr, nil, map[string]string{"Content-Encoding": c.header}, encodeBody(t, c.enc, body))
		if a.status != http.StatusOK {
			t.Errorf("Content-Encoding %q: %d %s", c.header, a.status, a.body)
		}
	}
	if a := post(t, addr, query("SELECT count() FROM cci"), nil, nil); a.body != fmt.Sprintf("%d\n", 10*len(codings)) {
		t.Fatalf("rows: %q, want %d", a.body, 10*len(codings))
	}
	for _, tc := range []struct{ accept, want string }{
		{"GZIP", "gzip"},
		{"Deflate, LZ4", "deflate"},
		{"gzip;q=0.0, zstd", "zstd"},
		{"gzip; Q=0, deflate;q=0.000", ""},
		{"gzip;q=0.001", "gzip"},
		{"ZSTD;Q=1", "zstd"},
	} {
		a := post(t, addr, query("SELECT 1"), map[string]string{"Accept-Encoding": tc.accept}, nil)
		mustOK(t, a)
		if got := a.header.Get("Content-Encoding"); got != tc.want {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, want %q", tc.accept, got, tc.want)
		}
	}
}
