package intake

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/fakeclock"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The hostile-input suite of the intake: each test is a way an app, or
// anyone who can reach the agent's ports, could stall or exhaust it.

// rssBytes is the process's resident set now.
func rssBytes(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		testenv.RequirePrivileged(t, "/proc/self/statm (the RSS these tests bound)", err)
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// peakRSS samples the RSS every millisecond while f runs and returns the
// peak's growth over the RSS before f.
func peakRSS(t testing.TB, f func()) int64 {
	base := rssBytes(t)
	var peak atomic.Int64
	peak.Store(base)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if r := rssBytes(t); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	f()
	close(done)
	wg.Wait()
	return peak.Load() - base
}

// gzipBomb is the request: 4 KiB of gzip that decompresses to
// 4 MiB of empty spans, two million of them.
func gzipBomb(t testing.TB) (raw, gz []byte) {
	raw = emptySpans((4<<20 - 64) / 2) // pdata adds an empty scope when the client marshals it
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	zw.Write(raw)
	zw.Close()
	if len(raw) > DefaultMaxRequestBytes || b.Len() > 16<<10 {
		t.Fatalf("bomb of %d bytes, %d gzipped: not the issue's", len(raw), b.Len())
	}
	return raw, b.Bytes()
}

// memoryBound is the RSS growth the bomb tests allow: four bodies of
// 4 MiB, their buffers and the GC's slack fit with room to spare; the
// old intake grew by 300 MB per bomb.
const memoryBound = 200 << 20

func TestGzipBombIsRefusedWithRSSBounded(t *testing.T) {
	_, gz := gzipBomb(t)
	for _, tc := range []struct {
		name     string
		maxSpans int
		reason   string
	}{
		{"over the span cap", 0, reasonTooManySpans},
		// With the span cap out of the way, the budget refuses it: decoded,
		// it would need a gigabyte.
		{"over the whole decode budget", 1 << 22, reasonTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.MaxSpansPerRequest = tc.maxSpans
			in := startIntake(t, cfg)
			url := "http://" + in.Addrs().OTLPHTTP + "/v1/traces"
			raw, _ := gzipBomb(t)

			// Each bomb from a peer of its own: one peer's four at once
			// would pass its share of the budget and be told to retry.
			const atOnce = 4
			var codes4xx, grpcCodes [atOnce]int
			var retryInfo [atOnce]bool
			var conns [atOnce]*grpc.ClientConn
			for i := range atOnce {
				conns[i] = dialGRPCFrom(t, in.Addrs().OTLPGRPC, fmt.Sprintf("127.0.0.%d", i+1))
			}
			grew := peakRSS(t, func() {
				var wg sync.WaitGroup
				for i := range atOnce {
					conn := conns[i]
					wg.Go(func() {
						codes4xx[i], _ = postFrom(t, fmt.Sprintf("127.0.0.%d", i+1), url, "application/x-protobuf", "gzip", gz)
					})
					wg.Go(func() {
						// The bomb's bytes as they are (pdata would marshal each
						// empty span in 10 bytes), gzipped by grpc-go.
						err := conn.Invoke(t.Context(), exportMethod, &grpcResponse{b: raw}, &grpcRequest{},
							grpc.ForceCodecV2(otlpCodec{}), grpc.UseCompressor("gzip"))
						grpcCodes[i] = int(status.Code(err))
						retryInfo[i] = hasRetryInfo(err)
					})
				}
				wg.Wait()
			})
			t.Logf("%d bombs at once over HTTP and %d over gRPC: RSS grew by %d MiB", atOnce, atOnce, grew>>20)
			for i := range atOnce {
				if codes4xx[i] != http.StatusRequestEntityTooLarge {
					t.Errorf("HTTP bomb %d: status %d, want 413 (retrying cannot help)", i, codes4xx[i])
				}
				if codes.Code(grpcCodes[i]) != codes.ResourceExhausted || retryInfo[i] {
					t.Errorf("gRPC bomb %d: %s (RetryInfo %v), want ResourceExhausted without RetryInfo", i, codes.Code(grpcCodes[i]), retryInfo[i])
				}
			}
			if grew > memoryBound {
				t.Errorf("RSS grew by %d MiB, want at most %d MiB", grew>>20, memoryBound>>20)
			}
			for _, src := range []string{SourceOTLPHTTP, SourceOTLPGRPC} {
				if got := drops(in, src, tc.reason); got != atOnce {
					t.Errorf("drops{%s, %s} = %v, want %d; %s", src, tc.reason, got, atOnce, dropSummary(in))
				}
			}
			waitFor(t, 5*time.Second, "the budget to be given back", func() bool { return in.budget.used.Load() == 0 })
		})
	}
}

func dropSummary(in *Intake) string {
	var b strings.Builder
	for _, src := range []string{SourceOTLPHTTP, SourceOTLPGRPC} {
		for _, r := range []string{reasonTooLarge, reasonTooManySpans, reasonOverBudget, reasonDecode, reasonContentEncoding} {
			if n := drops(in, src, r); n > 0 {
				fmt.Fprintf(&b, "%s/%s=%v ", src, r, n)
			}
		}
	}
	return b.String()
}

func hasRetryInfo(err error) bool {
	for _, d := range status.Convert(err).Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

func TestRequestsBeyondTheDecodeBudgetGet429WithRetryAfter(t *testing.T) {
	cfg := testConfig(t)
	cfg.DecodeBudgetBytes = 2 * DefaultMaxRequestBytes
	cfg.DecodeBudgetPerPeerBytes = cfg.DecodeBudgetBytes
	in := startIntake(t, cfg)
	url := "http://" + in.Addrs().OTLPHTTP + "/v1/traces"
	grpcClient := ptraceotlp.NewGRPCClient(dialGRPC(t, in.Addrs().OTLPGRPC))
	small := ptraceotlp.NewExportRequestFromTraces(manySpans(10))
	body, _ := small.MarshalProto()

	// Requests in flight of other senders hold the whole budget.
	others := budgetHold{b: in.budget}
	if !others.grow(cfg.DecodeBudgetBytes) {
		t.Fatal("could not take the budget")
	}

	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("HTTP: status %d, Retry-After %q; want 429 with a Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	_, err = grpcClient.Export(t.Context(), small)
	if status.Code(err) != codes.ResourceExhausted || !hasRetryInfo(err) {
		t.Errorf("gRPC: %v, want ResourceExhausted with a RetryInfo", err)
	}
	for _, src := range []string{SourceOTLPHTTP, SourceOTLPGRPC} {
		if got := drops(in, src, reasonOverBudget); got != 1 {
			t.Errorf("drops{%s, over_budget} = %v, want 1", src, got)
		}
	}

	// The others end and give the budget back; the clients' retries are
	// taken.
	others.release()
	if code, msg := post(t, url, "application/x-protobuf", "", body); code != http.StatusOK {
		t.Errorf("HTTP retry: status %d %q, want 200", code, msg)
	}
	if _, err := grpcClient.Export(t.Context(), small); err != nil {
		t.Errorf("gRPC retry: %v", err)
	}
	collect(t, in, 20, 5*time.Second)

	t.Run("many requests at once stay within the budget", func(t *testing.T) {
		// 8 requests of 16,000 empty spans at once, each about half the
		// budget decoded: what is taken fits, the rest is 429.
		req := emptySpans(16000)
		var ok, refused atomic.Int32
		var wg sync.WaitGroup
		var peak atomic.Int64
		stop := make(chan struct{})
		go func() {
			for {
				if u := in.budget.used.Load(); u > peak.Load() {
					peak.Store(u)
				}
				select {
				case <-stop:
					return
				default:
					time.Sleep(50 * time.Microsecond)
				}
			}
		}()
		for range 8 {
			wg.Go(func() {
				switch code, msg := post(t, url, "application/x-protobuf", "", req); code {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				default:
					t.Errorf("status %d %q, want 200 or 429", code, msg)
				}
			})
		}
		wg.Wait()
		close(stop)
		t.Logf("%d taken, %d refused with 429; budget peak %d of %d bytes", ok.Load(), refused.Load(), peak.Load(), cfg.DecodeBudgetBytes)
		if ok.Load() == 0 {
			t.Error("no request taken")
		}
		if peak.Load() > cfg.DecodeBudgetBytes {
			t.Errorf("budget peak %d, over its limit %d", peak.Load(), cfg.DecodeBudgetBytes)
		}
		waitFor(t, 5*time.Second, "the budget to be given back", func() bool { return in.budget.used.Load() == 0 })
	})
}

// daySpans is the request: n SERVER spans, one per day from 2001.
func daySpans(n int) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "billy")
	ss := rs.ScopeSpans().AppendEmpty()
	start := time.Date(2001, 1, 1, 12, 0, 0, 0, time.UTC)
	for i := range n {
		s := ss.Spans().AppendEmpty()
		s.SetName("/day")
		s.SetKind(ptrace.SpanKindServer)
		s.SetTraceID(traceA)
		s.SetSpanID(pcommon.SpanID{byte(i), 1})
		at := start.AddDate(0, 0, i)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(at))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(at.Add(5 * time.Millisecond)))
	}
	return td
}

func TestSpansFarFromTheAgentClockAreRejectedAndCounted(t *testing.T) {
	in := startIntake(t, testConfig(t))
	td := daySpans(120)
	spans := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	now := time.Now()
	add := func(name string, start time.Time) {
		s := spans.AppendEmpty()
		s.SetName(name)
		s.SetKind(ptrace.SpanKindServer)
		s.SetTraceID(traceA)
		s.SetSpanID(spanB)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(10 * time.Millisecond)))
	}
	add("/future", now.Add(2*time.Hour))
	add("/tomorrow", now.AddDate(0, 0, 1))
	add("/now", now.Add(-time.Second))
	add("/last-hour", now.Add(-50*time.Minute))

	for _, via := range []string{"http", "grpc"} {
		t.Run(via, func(t *testing.T) {
			var resp ptraceotlp.ExportResponse
			src := SourceOTLPHTTP
			if via == "http" {
				body, _ := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
				code, msg := post(t, "http://"+in.Addrs().OTLPHTTP+"/v1/traces", "application/x-protobuf", "", body)
				if code != http.StatusOK {
					t.Fatalf("status %d %q", code, msg)
				}
				resp = ptraceotlp.NewExportResponse()
				if err := resp.UnmarshalProto([]byte(msg)); err != nil {
					t.Fatal(err)
				}
			} else {
				src = SourceOTLPGRPC
				var err error
				resp, err = ptraceotlp.NewGRPCClient(dialGRPC(t, in.Addrs().OTLPGRPC)).Export(t.Context(), ptraceotlp.NewExportRequestFromTraces(td))
				if err != nil {
					t.Fatal(err)
				}
			}
			if got := resp.PartialSuccess().RejectedSpans(); got != 122 {
				t.Errorf("rejected spans = %d (%q), want 122", got, resp.PartialSuccess().ErrorMessage())
			}
			if msg := resp.PartialSuccess().ErrorMessage(); !strings.Contains(msg, "120 that started more than max_span_age") {
				t.Errorf("partial success %q does not say why", msg)
			}
			if got := drops(in, src, "too_old"); got != 120 {
				t.Errorf("drops{too_old} = %v, want 120", got)
			}
			if got := drops(in, src, "in_future"); got != 2 {
				t.Errorf("drops{in_future} = %v, want 2", got)
			}
			got := collect(t, in, 2, 5*time.Second)
			for _, r := range got {
				if r.Endpoint != "/now" && r.Endpoint != "/last-hour" {
					t.Errorf("exported %s at %s", r.Endpoint, r.Start)
				}
			}
			expectNoMore(t, in, 50*time.Millisecond)
		})
	}
}

func TestSpanWindow(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	w := newSpanWindow(now, time.Hour, 5*time.Minute)
	for _, tc := range []struct {
		name       string
		start, end time.Time
		want       string
	}{
		{"just now", now.Add(-time.Second), now, ""},
		{"started an hour ago to the ns", now.Add(-time.Hour), now, ""},
		{"started an hour and a ns ago", now.Add(-time.Hour - 1), now, "too_old"},
		{"ends 5m ahead", now, now.Add(5 * time.Minute), ""},
		{"ends 5m and a ns ahead", now, now.Add(5*time.Minute + 1), "in_future"},
		{"1970", time.Unix(0, 1), time.Unix(0, 2), "too_old"},
		{"2262", time.Unix(0, 1<<63-2), time.Unix(0, 1<<63-1), "in_future"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ptrace.NewSpan()
			s.SetTraceID(traceA)
			s.SetSpanID(spanA)
			s.SetStartTimestamp(pcommon.NewTimestampFromTime(tc.start))
			s.SetEndTimestamp(pcommon.NewTimestampFromTime(tc.end))
			var r telemetry.Request
			f, bad := spanToRequest(s, w, &r)
			got := ""
			if bad {
				got = faultReasons[f]
			}
			if got != tc.want {
				t.Errorf("fault %q, want %q", got, tc.want)
			}
		})
	}
}

// spansOf is n SERVER spans of svc at ep, starting at at.
func spansOf(svc, ep string, n int, at time.Time) []byte {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", svc)
	ss := rs.ScopeSpans().AppendEmpty()
	for i := range n {
		s := ss.Spans().AppendEmpty()
		s.SetName(ep)
		s.SetKind(ptrace.SpanKindServer)
		s.SetTraceID(pcommon.TraceID{byte(i), byte(i >> 8), 7})
		s.SetSpanID(spanA)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(at.Add(-time.Second)))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(at.Add(-time.Second + 3*time.Millisecond)))
	}
	b, _ := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	return b
}

// squatHarness is an intake on a fake clock with the capture trigger's
// tap, fed through the OTLP/HTTP handler.
type squatHarness struct {
	t      *testing.T
	in     *Intake
	clock  *fakeclock.Clock
	h      http.Handler
	mu     sync.Mutex
	tapped map[string]int // service/endpoint → kept requests the tap saw
}

func newSquatHarness(t *testing.T) *squatHarness {
	cfg := Config{OTLPHTTP: "127.0.0.1:0", SampleEvery: 1, SampledPerSecond: -1, SlowThreshold: -1, TailQuantile: -1, QueueSize: 1 << 16}
	in, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	s := &squatHarness{t: t, in: in, clock: fakeclock.New(time.Now()), h: in.otlpHTTPHandler(), tapped: map[string]int{}}
	in.now = s.clock.Now
	in.Tap(func(r *telemetry.Request, _ *telemetry.Sender) {
		s.mu.Lock()
		s.tapped[r.Service+" "+r.Endpoint]++
		s.mu.Unlock()
	})
	go func() {
		for range in.Out() {
		}
	}()
	return s
}

func (s *squatHarness) send(svc, ep string, n int) {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(spansOf(svc, ep, n, s.clock.Now())))
	req.Header.Set("Content-Type", "application/x-protobuf")
	rec := &responseRecorder{header: http.Header{}}
	s.h.ServeHTTP(rec, req)
	if rec.code != http.StatusOK {
		s.t.Fatalf("status %d", rec.code)
	}
}

func (s *squatHarness) seen(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.tapped[key]
	delete(s.tapped, key)
	return n
}

type responseRecorder struct {
	header http.Header
	code   int
}

func (r *responseRecorder) Header() http.Header { return r.header }
func (r *responseRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return len(b), nil
}
func (r *responseRecorder) WriteHeader(code int) { r.code = code }

func TestSquattedServiceSlotsGoToTheServiceWithTraffic(t *testing.T) {
	s := newSquatHarness(t)
	squat := func() {
		for i := range DefaultMaxServices {
			s.send(fmt.Sprintf("squatter-%02d", i), "/", 1)
		}
	}
	squat()
	// checkout serves 10 requests a second, in a batch each second; the
	// 64 squatters send one request each every 10 minutes, forever.
	tracked := 0
	for sec := 1; sec <= 3600; sec++ {
		s.clock.Advance(time.Second)
		if sec%600 == 0 {
			squat()
		}
		s.send("checkout", "/pay", 10)
		if s.seen("checkout /pay") == 10 {
			tracked++
		} else if sec > 5 {
			t.Fatalf("second %d: checkout is not tracked (%d overflow requests seen by the tap)", sec, s.seen(Overflow+" "+Overflow))
		}
	}
	t.Logf("checkout tracked in %d of 3600 seconds", tracked)
	if got := testutil.ToFloat64(s.in.m.evictService); got < 1 {
		t.Errorf("service evictions = %v, want at least 1", got)
	}
	// Memory stays bounded: the table holds the cap, the sketch as many.
	s.in.card.mu.RLock()
	n, m := len(s.in.card.services.slots), len(s.in.card.services.sketch.heap)
	s.in.card.mu.RUnlock()
	if n > DefaultMaxServices || m > DefaultMaxServices {
		t.Errorf("%d slots and %d sketch entries, want at most %d each", n, m, DefaultMaxServices)
	}
}

func TestSquattedEndpointSlotsGoToTheEndpointWithTraffic(t *testing.T) {
	s := newSquatHarness(t)
	squat := func() {
		for i := range DefaultMaxEndpoints {
			s.send("checkout", fmt.Sprintf("/squat/%03d", i), 1)
		}
	}
	squat()
	for sec := 1; sec <= 1800; sec++ {
		s.clock.Advance(time.Second)
		if sec%600 == 0 {
			squat()
		}
		s.send("checkout", "/pay", 10)
		if got := s.seen("checkout /pay"); got != 10 && sec > 5 {
			t.Fatalf("second %d: /pay is not tracked (%d of 10)", sec, got)
		}
	}
	if got := testutil.ToFloat64(s.in.m.evictEndpoint); got < 1 {
		t.Errorf("endpoint evictions = %v, want at least 1", got)
	}
}

func TestAFloodOfNewNamesDoesNotEvictTheBusyServices(t *testing.T) {
	s := newSquatHarness(t)
	for sec := 1; sec <= 120; sec++ {
		s.clock.Advance(time.Second)
		for i := range 8 {
			s.send(fmt.Sprintf("real-%d", i), "/", 5)
		}
		for i := range 200 { // a new name per request
			s.send(fmt.Sprintf("flood-%d-%d", sec, i), "/", 1)
		}
		for i := range 8 {
			if got := s.seen(fmt.Sprintf("real-%d /", i)); got != 5 {
				t.Fatalf("second %d: real-%d is not tracked (%d of 5)", sec, i, got)
			}
		}
	}
}

// openIdleHTTP makes n connections that each send one keep-alive request
// and then idle, and n that never send anything.
func openIdleHTTP(t *testing.T, addr string, n int, body []byte) []net.Conn {
	var conns []net.Conn
	for i := range 2 * n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
		if i%2 == 1 {
			continue
		}
		fmt.Fprintf(c, "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	return conns
}

// closedByPeer reports whether the server closed c: reading what it sent
// (a gRPC server's SETTINGS) ends in EOF or a reset, not a timeout.
func closedByPeer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func TestIdleOTLPConnectionsAreClosed(t *testing.T) {
	cfg := testConfig(t)
	cfg.OTLPIdleTimeout = 300 * time.Millisecond
	cfg.OTLPReadTimeout = 300 * time.Millisecond
	in := startIntake(t, cfg)
	body, _ := ptraceotlp.NewExportRequestFromTraces(manySpans(1)).MarshalProto()

	httpConns := openIdleHTTP(t, in.Addrs().OTLPHTTP, 100, body)
	var grpcConns []*grpc.ClientConn
	for range 100 { // gRPC clients that exported once and then idle
		conn, err := grpc.NewClient(in.Addrs().OTLPGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := ptraceotlp.NewGRPCClient(conn).Export(t.Context(), ptraceotlp.NewExportRequestFromTraces(manySpans(1))); err != nil {
			t.Fatal(err)
		}
		grpcConns = append(grpcConns, conn)
	}
	var rawGRPC []net.Conn
	for range 100 { // connections that never start HTTP/2
		c, err := net.Dial("tcp", in.Addrs().OTLPGRPC)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		rawGRPC = append(rawGRPC, c)
	}
	open := func(server string) float64 { return testutil.ToFloat64(in.m.conns.WithLabelValues(server)) }
	waitFor(t, 10*time.Second, "every idle connection to be closed by the server", func() bool {
		return open(SourceOTLPHTTP) == 0 && open(SourceOTLPGRPC) == 0
	})
	for i, c := range append(httpConns, rawGRPC...) {
		if !closedByPeer(c) {
			t.Errorf("connection %d still open", i)
		}
	}
	for i, c := range grpcConns {
		if s := c.GetState(); s != connectivity.Idle {
			t.Errorf("gRPC client %d in state %s, want IDLE (the server went away)", i, s)
		}
	}
}

func TestOTLPConnectionsBeyondTheCapAreClosed(t *testing.T) {
	cfg := testConfig(t)
	cfg.OTLPMaxConnections = 10
	cfg.OTLPMaxConnectionsPerPeer = 5
	in := startIntake(t, cfg)
	refused := func(server, reason string) float64 {
		return testutil.ToFloat64(in.m.connsRefused.WithLabelValues(server, reason))
	}
	for _, server := range []struct{ name, addr string }{{SourceOTLPHTTP, in.Addrs().OTLPHTTP}, {SourceOTLPGRPC, in.Addrs().OTLPGRPC}} {
		// 15 idle connections of three peers: the server keeps 10, each
		// newcomer past them taking the place of an idle one.
		var conns []net.Conn
		for i := range 15 {
			c, err := dialerFrom(fmt.Sprintf("127.0.0.%d", 2+i%3)).Dial("tcp", server.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conns = append(conns, c)
		}
		waitFor(t, 2*time.Second, "5 idle connections closed", func() bool { return refused(server.name, "evicted_idle") == 5 })
		closed := 0
		for _, c := range conns {
			if closedByPeer(c) {
				closed++
			}
		}
		if closed != 5 || testutil.ToFloat64(in.m.conns.WithLabelValues(server.name)) != 10 {
			t.Errorf("%s: %d of 15 connections closed, %v open; want 5 and 10", server.name, closed, testutil.ToFloat64(in.m.conns.WithLabelValues(server.name)))
		}
		for _, c := range conns {
			c.Close()
		}
		waitFor(t, 2*time.Second, "the places to be given back", func() bool {
			return testutil.ToFloat64(in.m.conns.WithLabelValues(server.name)) == 0
		})
	}

	// Busy connections are never closed for a newcomer: HTTP requests
	// whose body has not all come hold their places, and one more peer's
	// connection is closed on accept.
	var busy []net.Conn
	for i := range 10 {
		c, err := dialerFrom(fmt.Sprintf("127.0.0.%d", 2+i%2)).Dial("tcp", in.Addrs().OTLPHTTP)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 100\r\n\r\n")
		busy = append(busy, c)
	}
	waitFor(t, 2*time.Second, "10 open", func() bool { return testutil.ToFloat64(in.m.conns.WithLabelValues(SourceOTLPHTTP)) == 10 })
	time.Sleep(50 * time.Millisecond) // the server reads the headers: busy
	c, err := dialerFrom("127.0.0.4").Dial("tcp", in.Addrs().OTLPHTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 2*time.Second, "a refusal", func() bool { return refused(SourceOTLPHTTP, "server_full") == 1 })
	if !closedByPeer(c) {
		t.Error("a connection beyond the cap of busy ones was kept")
	}
	for _, c := range busy {
		c.Close()
	}
	waitFor(t, 2*time.Second, "the places to be given back", func() bool {
		return testutil.ToFloat64(in.m.conns.WithLabelValues(SourceOTLPHTTP)) == 0
	})
	// Places given back are taken again.
	if code, _ := post(t, "http://"+in.Addrs().OTLPHTTP+"/v1/traces", "application/x-protobuf", "", nil); code != http.StatusOK {
		t.Errorf("status %d after the flood, want 200", code)
	}
}

func TestDeeplyNestedAttributesAreRefused(t *testing.T) {
	in := startIntake(t, testConfig(t))
	body := nestedArrays(1000) // pdata would recurse 2,000 deep; 500,000 fit in 4 MiB
	code, msg := post(t, "http://"+in.Addrs().OTLPHTTP+"/v1/traces", "application/x-protobuf", "", body)
	if code != http.StatusBadRequest || !strings.Contains(msg, "nested deeper") {
		t.Errorf("status %d %q, want 400 nested deeper", code, msg)
	}
	js, err := decodeToJSON(nestedArrays(60)) // pdata decodes and encodes it, 180 brackets deep
	if err != nil {
		t.Fatal(err)
	}
	code, msg = post(t, "http://"+in.Addrs().OTLPHTTP+"/v1/traces", "application/json", "", js)
	if code != http.StatusBadRequest || !strings.Contains(msg, "nested deeper") {
		t.Errorf("JSON: status %d %q, want 400 nested deeper", code, msg)
	}
	conn := dialGRPC(t, in.Addrs().OTLPGRPC)
	err = conn.Invoke(t.Context(), exportMethod, &grpcResponse{b: body}, &grpcRequest{}, grpc.ForceCodecV2(otlpCodec{}))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("gRPC: %v, want InvalidArgument nested deeper", err)
	}
}

func TestSlowOTLPBodiesAreCutOff(t *testing.T) {
	cfg := testConfig(t)
	cfg.OTLPReadTimeout = 300 * time.Millisecond
	in := startIntake(t, cfg)
	var conns []net.Conn
	for range 20 { // each promises 1 MiB and sends 10 bytes of it
		c, err := net.Dial("tcp", in.Addrs().OTLPHTTP)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: %d\r\n\r\n0123456789", 1<<20)
		conns = append(conns, c)
	}
	// The server counts a connection once it has accepted it: until all 20
	// are counted, a count of 0 says nothing (under load, that was before
	// the first accept).
	waitFor(t, 5*time.Second, "the server to hold every slow request", func() bool {
		return in.budget.used.Load() > 0 || drops(in, SourceOTLPHTTP, reasonDecode) == 20
	})
	waitFor(t, 5*time.Second, "the slow requests to be cut off", func() bool {
		return testutil.ToFloat64(in.m.conns.WithLabelValues(SourceOTLPHTTP)) == 0 && drops(in, SourceOTLPHTTP, reasonDecode) == 20
	})
	for i, c := range conns {
		if !closedByPeer(c) {
			t.Errorf("connection %d still open", i)
		}
	}
	if used := in.budget.used.Load(); used != 0 {
		t.Errorf("%d bytes of the budget still held", used)
	}
	if got := drops(in, SourceOTLPHTTP, reasonDecode); got != 20 {
		t.Errorf("drops{decode} = %v, want 20 (a body cut off is unreadable)", got)
	}
}
