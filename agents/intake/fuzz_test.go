package intake

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

func FuzzLineProtocol(f *testing.F) {
	for _, s := range []string{
		"billy /search 5210 200 4bf92f3577b34da6a3ce929d0e0e4736 21560",
		"billy /search 5210 200",
		"billy\t/s 7 ERROR - 42\r",
		"b e 86400000001 200",
		"b e 1 200 - 4294967296",
		"b \xff 1 200",
		"   ",
		"a b c d e f g",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, dgram []byte) {
		// One record for every line, as consumeDatagram does: nothing of a
		// line may leak into the next.
		var rec lineRecord
		for rest := dgram; len(rest) > 0; {
			var line []byte
			line, rest = nextLine(rest)
			err := parseLine(line, &rec)
			if want, wantErr := referenceParse(line); wantErr != err || (err == nil && !sameRecord(rec, want)) {
				t.Fatalf("parseLine(%q) = %+v, %v; the reference parser says %+v, %v", line, rec, err, want, wantErr)
			}
			if err != nil {
				if err != errBlank && err.reason == "" {
					t.Fatalf("parseLine(%q): error %v without a reason", line, err)
				}
				continue
			}
			for _, name := range [][]byte{rec.service, rec.endpoint, rec.status} {
				if len(name) == 0 || !utf8.Valid(name) || bytes.ContainsAny(name, " \t\r\n") {
					t.Fatalf("parseLine(%q) gave field %q: want a non-empty UTF-8 token", line, name)
				}
			}
			if len(rec.service) > maxNameBytes || len(rec.endpoint) > maxNameBytes || len(rec.status) > maxStatusBytes {
				t.Fatalf("parseLine(%q) gave an over-long field", line)
			}
			if rec.latency < 0 || rec.latency.Microseconds() > maxLatencyMicros {
				t.Fatalf("parseLine(%q) latency %s out of range", line, rec.latency)
			}
		}
	})
}

// referenceParse is parseLine written the obvious way, one byte and one
// library call at a time, for the fuzzer to hold the fast one to.
func referenceParse(line []byte) (lineRecord, *lineError) {
	f := rawFields(line)
	switch {
	case len(f) == 0:
		return lineRecord{}, errBlank
	case len(f) < 4 || len(f) > maxLineFields:
		return lineRecord{}, errFields
	}
	if !utf8.Valid(f[0]) || !utf8.Valid(f[1]) || !utf8.Valid(f[3]) {
		return lineRecord{}, errUTF8
	}
	var r lineRecord
	r.service, r.endpoint, r.status = cutName(f[0]), cutName(f[1]), f[3]
	us, err := strconv.ParseUint(string(f[2]), 10, 64)
	if err != nil || us > maxLatencyMicros || f[2][0] == '+' || len(f[2]) > 20 {
		return lineRecord{}, errLatency
	}
	r.latency = time.Duration(us) * time.Microsecond
	if len(r.status) > maxStatusBytes {
		return lineRecord{}, errStatus
	}
	if len(f) > 4 && string(f[4]) != "-" {
		id, err := hex.DecodeString(string(f[4]))
		if err != nil || len(id) != 16 {
			return lineRecord{}, errTraceID
		}
		copy(r.traceID[:], id)
	}
	if len(f) > 5 {
		id, err := strconv.ParseUint(string(f[5]), 10, 32)
		if err != nil || f[5][0] == '+' || len(f[5]) > 20 {
			return lineRecord{}, errThreadID
		}
		r.threadID = uint32(id)
	}
	return r, nil
}

// rawFields splits at bytes ' ', '\t' and '\r'.
func rawFields(line []byte) [][]byte {
	var f [][]byte
	start := -1
	for i, c := range line {
		sep := c == ' ' || c == '\t' || c == '\r'
		switch {
		case sep && start >= 0:
			f = append(f, line[start:i])
			start = -1
		case !sep && start < 0:
			start = i
		}
	}
	if start >= 0 {
		f = append(f, line[start:])
	}
	return f
}

func sameRecord(a, b lineRecord) bool {
	return bytes.Equal(a.service, b.service) && bytes.Equal(a.endpoint, b.endpoint) && bytes.Equal(a.status, b.status) &&
		a.latency == b.latency && a.traceID == b.traceID && a.threadID == b.threadID
}

// FuzzOTLPHTTP feeds the OTLP/HTTP handler arbitrary bodies, content
// types and encodings: every request gets a well-formed answer, and
// anything it could not take is counted.
func FuzzOTLPHTTP(f *testing.F) {
	pb, _ := ptraceotlp.NewExportRequestFromTraces(mixedTraces()).MarshalProto()
	js, _ := ptraceotlp.NewExportRequestFromTraces(mixedTraces()).MarshalJSON()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(pb)
	zw.Close()
	f.Add(uint8(0), false, pb)
	f.Add(uint8(1), false, js)
	f.Add(uint8(0), true, gz.Bytes())
	f.Add(uint8(1), false, []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"kind":2,"startTimeUnixNano":"1","endTimeUnixNano":"0"}]}]}]}`))
	f.Add(uint8(2), false, []byte("x"))
	f.Add(uint8(0), false, []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add(uint8(0), false, emptySpans(100))
	f.Add(uint8(0), false, nestedArrays(70))

	cfg := Config{OTLPHTTP: "127.0.0.1:0", MaxRequestBytes: 64 << 10, QueueSize: 16}
	in, err := New(cfg, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { in.Close() })
	go func() { // a consumer, so the queue does not stay full
		for range in.Out() {
		}
	}()
	h := in.otlpHTTPHandler()
	contentTypes := []string{"application/x-protobuf", "application/json", "text/plain", "application/json; charset=utf-8", ""}

	f.Fuzz(func(t *testing.T, ct uint8, gzipped bool, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(body))
		req.Header.Set("Content-Type", contentTypes[int(ct)%len(contentTypes)])
		if gzipped {
			req.Header.Set("Content-Encoding", "gzip")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			resp := ptraceotlp.NewExportResponse()
			var err error
			if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
				err = resp.UnmarshalJSON(rec.Body.Bytes())
			} else {
				err = resp.UnmarshalProto(rec.Body.Bytes())
			}
			if err != nil {
				t.Fatalf("200 with an undecodable ExportTraceServiceResponse %q: %v", rec.Body.Bytes(), err)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		case http.StatusTooManyRequests: // the decode budget; one request at a time never spends it
			t.Fatalf("429 for a %d-byte body with nothing else in flight", len(body))
		default:
			t.Fatalf("status %d (%q) for a %d-byte body", rec.Code, rec.Body.Bytes(), len(body))
		}
	})
}

// FuzzScanTraceRequest holds the walk that prices a request before it is
// decoded (cost.go) to pdata's decoder: whatever pdata decodes, the walk
// takes too (but for nesting beyond maxProtoDepth and groups), and it counts at
// least the spans pdata finds, so that the span cap and the decode budget
// see every span that will be decoded.
func FuzzScanTraceRequest(f *testing.F) {
	pb, _ := ptraceotlp.NewExportRequestFromTraces(mixedTraces()).MarshalProto()
	f.Add(pb)
	f.Add(emptySpans(3))
	f.Add(nestedArrays(3))
	f.Add(msg(1, msg(1000, repeated(2, nil, 2))))
	f.Add(inSpan(msg(9, msg(2, bytes.Repeat([]byte{0x18, 0x01}, 3)))))
	f.Add(msg(1, msg(1, msg(3, repeated(3, []byte("k"), 2)))))
	f.Fuzz(func(t *testing.T, b []byte) {
		shape, err := scanTraceRequest(b)
		req := ptraceotlp.NewExportRequest()
		pdataErr := req.UnmarshalProto(b)
		switch {
		case pdataErr != nil:
			return
		case errors.Is(err, errTooDeep), errors.Is(err, errGroup):
			return
		case err != nil:
			t.Fatalf("pdata decodes %x, the walk refuses it: %v", b, err)
		}
		if n := req.Traces().SpanCount(); shape.spans < n {
			t.Fatalf("the walk counts %d spans in %x, pdata decodes %d", shape.spans, b, n)
		}
		if shape.cost < int64(len(b)) {
			t.Fatalf("cost %d below the body's %d bytes", shape.cost, len(b))
		}
	})
}

// The word-at-a-time splitter cuts every line where a byte-wise split at
// spaces, tabs and '\r' does: separators at every offset of a word, runs
// across words, other control bytes, a line ending in a field or in
// separators; and isASCII says so exactly when no byte is ≥ 0x80.
func FuzzSplitFieldsMatchesAByteWiseSplit(f *testing.F) {
	for _, s := range []string{
		"billy /search 5210 200 4bf92f3577b34da6a3ce929d0e0e4736 21560",
		"  a\tb\r\rc  ", "\x01\x1f \x00 x\x19y", "abcdefgh ijklmnop", "abcdefg\thijklmn\rop", "        ", "",
		"a b c d e f g", "é ü 1 200", "\x80\x80\x80\x80\x80\x80\x80\x80 x",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var got [maxLineFields + 1][]byte
		n, ok := splitFields(line, &got)
		ascii := isASCII(line)
		want := bytes.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == '\r' })
		if len(want) > len(got) {
			if ok {
				t.Fatalf("%q: %d fields, more than %d, yet ok", line, len(want), len(got))
			}
			return
		}
		if !ok || n != len(want) {
			t.Fatalf("%q: %d fields (ok %v), want %q", line, n, ok, want)
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%q: field %d %q, want %q", line, i, got[i], want[i])
			}
		}
		wantASCII := true
		for _, c := range line {
			if c >= 0x80 {
				wantASCII = false
			}
		}
		if ascii != wantASCII {
			t.Fatalf("%q: ascii %v, want %v", line, ascii, wantASCII)
		}
	})
}
