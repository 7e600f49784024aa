package intake

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	tokenA = "2f1c7e0a9b3d4c5e6f708192a3b4c5d6"
	tokenB = "b7d9e1f3a5c7e9f1b3d5f7a9c1e3f5a7"
)

func writeTokens(t testing.TB, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTokenFileParsing(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       int    // tokens; with wantErr ""
		wantErr    string // substring
	}{
		{"one token and a newline", tokenA + "\n", 1, ""},
		{"two tokens, comments and blank lines", "# rotated on 2026-11-29\n\n" + tokenA + "\n  " + tokenB + "  \n", 2, ""},
		{"no newline at the end", tokenA, 1, ""},
		{"an empty file", "", 0, "holds no token"},
		{"comments only", "# none yet\n", 0, "holds no token"},
		{"a short token", "hunter2\n", 0, "line 1: a token of 7 characters, want at least 16"},
		{"two tokens on a line", tokenA + " " + tokenB + "\n", 0, "line 1: a token with a space"},
		{"too many tokens", strings.Repeat(tokenA+"\n", maxTokens+1), 0, "more than 64 tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := parseTokens([]byte(tc.file))
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("parseTokens: %v, want an error containing %q", err, tc.wantErr)
			case tc.wantErr == "" && err != nil:
				t.Fatalf("parseTokens: %v", err)
			case len(set) != tc.want:
				t.Fatalf("%d tokens, want %d", len(set), tc.want)
			}
		})
	}
	if _, err := loadTokens(filepath.Join(t.TempDir(), "missing"), slog.New(slog.DiscardHandler), time.Now); err == nil || !strings.Contains(err.Error(), "auth.token_file") {
		t.Errorf("a missing file: %v, want an error naming auth.token_file", err)
	}
	big := writeTokens(t, strings.Repeat("#", maxTokenFileBytes+1))
	if _, err := loadTokens(big, slog.New(slog.DiscardHandler), time.Now); err == nil || !strings.Contains(err.Error(), "larger than 64 KiB") {
		t.Errorf("a 64 KiB file: %v, want it refused for its size", err)
	}
}

func TestTheBearerHeaderCarriesTheToken(t *testing.T) {
	tk, err := loadTokens(writeTokens(t, tokenA+"\n"+tokenB+"\n"), slog.New(slog.DiscardHandler), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		header string
		want   bool
	}{
		{"Bearer " + tokenA, true},
		{"Bearer " + tokenB, true},
		{"bearer " + tokenA, true}, // the scheme is case-insensitive (RFC 9110 §11.1)
		{"  Bearer   " + tokenA + " ", true},
		{"Bearer " + strings.ToUpper(tokenA), false}, // the token is not
		{"Bearer " + tokenA[:len(tokenA)-1], false},
		{"Bearer " + tokenA + "0", false},
		{tokenA, false},
		{"Basic " + tokenA, false},
		{"Bearer", false},
		{"Bearer ", false},
		{"", false},
	} {
		if got := tk.accepts(tc.header); got != tc.want {
			t.Errorf("accepts(%q) = %v, want %v", tc.header, got, tc.want)
		}
	}
}

// A token is rotated by listing the new one beside the old in the
// Secret, then dropping the old: the agent follows the file without a
// restart, and a file that breaks keeps the tokens it had.
func TestTokensFollowTheFile(t *testing.T) {
	path := writeTokens(t, tokenA+"\n")
	now := time.Unix(1_800_000_000, 0)
	tk, err := loadTokens(path, slog.New(slog.DiscardHandler), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(tokenB + "\n")
	if !tk.accepts("Bearer "+tokenA) || tk.accepts("Bearer "+tokenB) {
		t.Fatal("the file was read again before tokenRecheckEvery passed")
	}
	now = now.Add(tokenRecheckEvery)
	if tk.accepts("Bearer "+tokenA) || !tk.accepts("Bearer "+tokenB) {
		t.Fatal("after tokenRecheckEvery: want only the new token accepted")
	}
	// Broken: too short a token, then no file at all. The last good set
	// holds.
	for _, broken := range []func(){func() { write("short\n") }, func() { os.Remove(path) }} {
		broken()
		now = now.Add(tokenRecheckEvery)
		if !tk.accepts("Bearer " + tokenB) {
			t.Fatal("a broken token file dropped the tokens read before")
		}
	}
}

func tokenConfig(t testing.TB) (Config, string) {
	cfg := testConfig(t)
	cfg.Auth.TokenFile = writeTokens(t, tokenA+"\n")
	return cfg, tokenA
}

// postAuth posts body to url with an authorization header (none when
// auth is ""), and returns the status and the WWW-Authenticate header.
func postAuth(t testing.TB, client *http.Client, url, auth string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctProtobuf)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
}

func TestOTLPHTTPRefusesARequestWithoutTheToken(t *testing.T) {
	cfg, tok := tokenConfig(t)
	in := startIntake(t, cfg)
	base := "http://" + in.Addrs().OTLPHTTP
	body, _ := ptraceotlp.NewExportRequestFromTraces(manySpans(2)).MarshalProto()
	client := &http.Client{Timeout: 10 * time.Second}

	for _, tc := range []struct{ path, auth string }{
		{"/v1/traces", ""},
		{"/v1/traces", "Bearer " + tokenB},
		{"/v1/traces", "Basic " + tok},
		{"/v1/metrics", ""}, // the discarded signals too
		{"/v1/logs", "Bearer nope"},
	} {
		code, challenge := postAuth(t, client, base+tc.path, tc.auth, body)
		if code != http.StatusUnauthorized || !strings.HasPrefix(challenge, "Bearer") {
			t.Errorf("POST %s with %q: %d, WWW-Authenticate %q; want 401 and a Bearer challenge", tc.path, tc.auth, code, challenge)
		}
	}
	expectNoMore(t, in, 50*time.Millisecond)
	if got := drops(in, SourceOTLPHTTP, reasonUnauthenticated); got != 5 {
		t.Errorf("drops{otlp_http, unauthenticated} = %v, want 5", got)
	}
	if code, _ := postAuth(t, client, base+"/v1/traces", "Bearer "+tok, body); code != http.StatusOK {
		t.Fatalf("with the token: status %d, want 200", code)
	}
	collect(t, in, 2, 5*time.Second)

	// The OTel SDK's own exporter, configured as OTEL_EXPORTER_OTLP_HEADERS
	// would configure it.
	exportWithSDK(t, func(ctx context.Context) (sdktrace.SpanExporter, error) {
		return otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(in.Addrs().OTLPHTTP), otlptracehttp.WithInsecure(),
			otlptracehttp.WithHeaders(map[string]string{"authorization": "Bearer " + tok}))
	})
	collect(t, in, 1, 5*time.Second)
}

func TestOTLPGRPCRefusesAStreamWithoutTheToken(t *testing.T) {
	cfg, tok := tokenConfig(t)
	in := startIntake(t, cfg)
	client := ptraceotlp.NewGRPCClient(dialGRPC(t, in.Addrs().OTLPGRPC))
	req := ptraceotlp.NewExportRequestFromTraces(manySpans(2))
	for _, auth := range []string{"", "Bearer " + tokenB, "Bearer"} {
		ctx := t.Context()
		if auth != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
		}
		if _, err := client.Export(ctx, req); status.Code(err) != codes.Unauthenticated {
			t.Errorf("Export with %q: %v, want Unauthenticated", auth, err)
		}
	}
	expectNoMore(t, in, 50*time.Millisecond)
	if got := drops(in, SourceOTLPGRPC, reasonUnauthenticated); got != 3 {
		t.Errorf("drops{otlp_grpc, unauthenticated} = %v, want 3", got)
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
	if _, err := client.Export(ctx, req); err != nil {
		t.Fatalf("Export with the token: %v", err)
	}
	collect(t, in, 2, 5*time.Second)

	exportWithSDK(t, func(ctx context.Context) (sdktrace.SpanExporter, error) {
		return otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(in.Addrs().OTLPGRPC), otlptracegrpc.WithInsecure(),
			otlptracegrpc.WithHeaders(map[string]string{"authorization": "Bearer " + tok}))
	})
	collect(t, in, 1, 5*time.Second)
}

// exportWithSDK ends one server span through an OTel SDK exporter and
// flushes it.
func exportWithSDK(t testing.TB, newExp func(context.Context) (sdktrace.SpanExporter, error)) {
	t.Helper()
	ctx := context.Background()
	exp, err := newExp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "billy"))))
	defer tp.Shutdown(ctx)
	start := time.Now().Add(-time.Second)
	_, s := tp.Tracer("t").Start(ctx, "GET /", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
	s.End(trace.WithTimestamp(start.Add(5 * time.Millisecond)))
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatalf("the SDK's export: %v", err)
	}
}

// A sender that has shown the token keeps its idle keep-alive
// connection through a flood of silent connections from its own
// address, which would otherwise close it as the idlest of its peer.
func TestAnAuthenticatedConnectionOutlivesAFloodFromItsOwnAddress(t *testing.T) {
	cfg, tok := tokenConfig(t)
	cfg.OTLPMaxConnections, cfg.OTLPMaxConnectionsPerPeer = 64, 4
	in := startIntake(t, cfg)
	addr := in.Addrs().OTLPHTTP
	body, _ := ptraceotlp.NewExportRequestFromTraces(manySpans(1)).MarshalProto()
	tr := &http.Transport{DialContext: dialerFrom("127.0.0.2").DialContext, MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	send := func() (reused bool) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/traces", bytes.NewReader(body))
		req.Header.Set("Content-Type", ctProtobuf)
		req.Header.Set("Authorization", "Bearer "+tok)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return reused
	}
	send()
	collect(t, in, 1, 5*time.Second)

	// Twenty silent connections from the same address: five times its
	// places. Each one past the fourth closes an idle one of the peer's.
	for range 20 {
		c, err := dialerFrom("127.0.0.2").Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	waitFor(t, 10*time.Second, "the flood's connections to be counted", func() bool {
		return testutil.ToFloat64(in.m.connsRefused.WithLabelValues(SourceOTLPHTTP, "evicted_idle"))+testutil.ToFloat64(in.m.connsRefused.WithLabelValues(SourceOTLPHTTP, "peer_full")) >= 17
	})
	if !send() {
		t.Error("the authenticated connection was closed by the flood: the request needed a new one")
	}
	collect(t, in, 1, 5*time.Second)
}

// An agent whose token file cannot be read does not start open.
func TestAnUnreadableTokenFileStopsTheIntake(t *testing.T) {
	cfg := testConfig(t)
	cfg.Auth.TokenFile = filepath.Join(t.TempDir(), "absent")
	if _, err := New(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "auth.token_file") {
		t.Fatalf("New: %v, want an error naming auth.token_file", err)
	}
}

// FuzzBearerHeader: any authorization header and any token file, as a
// sender and an operator could write them: no panic, and a header is
// accepted only when it is "Bearer" (any case), spaces, and a listed
// token exactly.
func FuzzBearerHeader(f *testing.F) {
	f.Add("Bearer "+tokenA, tokenA+"\n")
	f.Add("bearer  "+tokenB, "# old\n"+tokenA+"\n"+tokenB)
	f.Add("Basic "+tokenA, tokenA)
	f.Add("Bearer\t"+tokenA, tokenA)
	f.Add("", "")
	f.Fuzz(func(t *testing.T, header, file string) {
		set, err := parseTokens([]byte(file))
		if err != nil {
			return
		}
		tk := &tokens{log: slog.New(slog.DiscardHandler), now: time.Now}
		tk.set.Store(&set)
		tk.checked.Store(time.Now().Add(time.Hour).UnixNano()) // no re-read: there is no file
		if !tk.accepts(header) {
			return
		}
		scheme, tok, _ := strings.Cut(strings.TrimSpace(header), " ")
		tok = strings.TrimSpace(tok)
		if !strings.EqualFold(scheme, "Bearer") || !slices.Contains(strings.Fields(file), tok) {
			t.Fatalf("accepted %q with tokens %q", header, file)
		}
	})
}

// BenchmarkBearerCheck is what the token costs each OTLP request.
func BenchmarkBearerCheck(b *testing.B) {
	tk, err := loadTokens(writeTokens(b, tokenA+"\n"+tokenB+"\n"), slog.New(slog.DiscardHandler), time.Now)
	if err != nil {
		b.Fatal(err)
	}
	h := "Bearer " + tokenB
	b.ReportAllocs()
	for b.Loop() {
		if !tk.accepts(h) {
			b.Fatal("refused")
		}
	}
}
