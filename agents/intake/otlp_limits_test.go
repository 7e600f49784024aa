package intake

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// bigTraces is one valid request span padded with an attribute of pad
// bytes.
func bigTraces(pad int) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "billy")
	s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	s.SetName("/upload")
	s.SetKind(ptrace.SpanKindServer)
	s.SetTraceID(traceA)
	s.SetSpanID(spanA)
	s.SetStartTimestamp(pcommon.NewTimestampFromTime(t0))
	s.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Millisecond)))
	s.Attributes().PutStr("pad", strings.Repeat("x", pad))
	return td
}

func TestSizeLimit(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxRequestBytes = 16 << 10
	in := startIntake(t, cfg)
	small, _ := ptraceotlp.NewExportRequestFromTraces(bigTraces(1000)).MarshalProto()
	large, _ := ptraceotlp.NewExportRequestFromTraces(bigTraces(20 << 10)).MarshalProto()
	url := "http://" + in.Addrs().OTLPHTTP + "/v1/traces"

	t.Run("HTTP: over the limit is 413, under it is 200", func(t *testing.T) {
		if code, body := post(t, url, "application/x-protobuf", "", small); code != http.StatusOK {
			t.Fatalf("small request: status %d %q", code, body)
		}
		if code, _ := post(t, url, "application/x-protobuf", "", large); code != http.StatusRequestEntityTooLarge {
			t.Errorf("large request: status %d, want 413", code)
		}
		// 20 KiB of 'x' gzips to well under the limit: the decompressed
		// size counts too.
		if code, _ := post(t, url, "application/x-protobuf", "gzip", gzipped(t, large)); code != http.StatusRequestEntityTooLarge {
			t.Errorf("large gzip request: status %d, want 413", code)
		}
		if got := drops(in, SourceOTLPHTTP, "too_large"); got != 2 {
			t.Errorf("drops{otlp_http, too_large} = %v, want 2", got)
		}
	})
	t.Run("gRPC: over the limit is ResourceExhausted", func(t *testing.T) {
		c := ptraceotlp.NewGRPCClient(dialGRPC(t, in.Addrs().OTLPGRPC))
		if _, err := c.Export(t.Context(), ptraceotlp.NewExportRequestFromTraces(bigTraces(1000))); err != nil {
			t.Fatalf("small request: %v", err)
		}
		_, err := c.Export(t.Context(), ptraceotlp.NewExportRequestFromTraces(bigTraces(20<<10)))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("large request: err = %v, want ResourceExhausted", err)
		}
		_, err = c.Export(t.Context(), ptraceotlp.NewExportRequestFromTraces(bigTraces(20<<10)), grpc.UseCompressor("gzip"))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("large gzip request: err = %v, want ResourceExhausted", err)
		}
		waitFor(t, time.Second, "the stats handler to count", func() bool { return drops(in, SourceOTLPGRPC, "too_large") == 2 })
	})
	collect(t, in, 2, 5*time.Second) // the two small ones
}

func TestOTLPHTTPErrors(t *testing.T) {
	in := startIntake(t, testConfig(t))
	url := "http://" + in.Addrs().OTLPHTTP + "/v1/traces"
	for _, tc := range []struct {
		name, contentType, encoding, body string
		want                              int
		reason                            string
	}{
		{"a body that is not protobuf is 400", "application/x-protobuf", "", "\xff\xff\xff\xff", http.StatusBadRequest, "decode"},
		{"a body that is not JSON is 400", "application/json", "", "{", http.StatusBadRequest, "decode"},
		{"a body that is not gzip is 400", "application/json", "gzip", "{}", http.StatusBadRequest, "decode"},
		{"text/plain is 415", "text/plain", "", "hi", http.StatusUnsupportedMediaType, "content_type"},
		{"brotli is 415", "application/json", "br", "{}", http.StatusUnsupportedMediaType, "content_encoding"},
		{"an empty protobuf body is an empty request", "application/x-protobuf", "", "", http.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(t, url, tc.contentType, tc.encoding, []byte(tc.body))
			if code != tc.want {
				t.Errorf("status %d (%q), want %d", code, body, tc.want)
			}
			if tc.reason != "" && drops(in, SourceOTLPHTTP, tc.reason) == 0 {
				t.Errorf("drops{reason=%s} not counted", tc.reason)
			}
		})
	}
	t.Run("GET is 405", func(t *testing.T) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
			t.Errorf("status %d Allow %q, want 405 POST", resp.StatusCode, resp.Header.Get("Allow"))
		}
	})
	t.Run("a 400 carries a google.rpc.Status in the request's encoding", func(t *testing.T) {
		_, body := post(t, url, "application/json", "", []byte("{"))
		var st spb.Status
		if err := protojson.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("body %q is not a JSON google.rpc.Status: %v", body, err)
		}
		if codes.Code(st.Code) != codes.InvalidArgument || !strings.Contains(st.Message, "decode ExportTraceServiceRequest") {
			t.Errorf("status = %v, want InvalidArgument decode ExportTraceServiceRequest…", &st)
		}
	})
}

func post(t testing.TB, url, contentType, encoding string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
