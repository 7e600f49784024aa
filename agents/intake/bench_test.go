package intake

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

var benchLine = []byte("billy /search/{q} 5210 200 4bf92f3577b34da6a3ce929d0e0e4736 21560")

func BenchmarkLineParse(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchLine)))
	var rec lineRecord
	for b.Loop() {
		if err := parseLine(benchLine, &rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUDPPath measures the whole UDP path: socket, parse, caps,
// sampling (1 in 10) and the queue, with a consumer draining Out. The
// sender keeps at most a window of datagrams in flight, so the figure is
// what the intake sustains, not what the kernel drops.
func BenchmarkUDPPath(b *testing.B) {
	cfg := Config{LineUDP: "127.0.0.1:0", SampleEvery: 10, SlowThreshold: time.Second, QueueSize: 1 << 16}
	in := startIntake(b, cfg)
	go func() {
		for range in.Out() {
		}
	}()
	const perDatagram, window = 64, 64 * 64
	var sb strings.Builder
	for i := range perDatagram {
		fmt.Fprintf(&sb, "billy /search/%d %d 200 4bf92f3577b34da6a3ce929d0e0e%04x 21560\n", i%8, 1000+i*37, i)
	}
	dgram := []byte(sb.String())
	c, err := net.Dial("udp", in.Addrs().LineUDP)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()

	b.ReportAllocs()
	b.SetBytes(int64(len(dgram) / perDatagram))
	start := time.Now()
	sent := 0
	for sent < b.N {
		for sent-int(received(in, SourceUDP)) > window {
			time.Sleep(10 * time.Microsecond)
		}
		if _, err := c.Write(dgram); err != nil {
			b.Fatal(err)
		}
		sent += perDatagram
	}
	deadline := time.Now().Add(5 * time.Second)
	for int(received(in, SourceUDP)) < sent && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
	got := received(in, SourceUDP)
	b.ReportMetric(got/time.Since(start).Seconds(), "requests/s")
	b.ReportMetric(100*(1-got/float64(sent)), "%lost")
}

// BenchmarkConsumeDatagram is the per-line cost of the line path without
// the socket: a 60 KiB datagram of the lines agents/client sends, parsed,
// sampled (1 in 10) and queued, with a consumer draining the queue.
func BenchmarkConsumeDatagram(b *testing.B) {
	in, err := New(Config{LineUDP: "127.0.0.1:0", SampleEvery: 10, SlowThreshold: time.Second, QueueSize: 1 << 16}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close() })
	go func() {
		for range in.Out() {
		}
	}()
	var dgram []byte
	for i := 0; len(dgram) < 60<<10-100; i++ {
		dgram = fmt.Appendf(dgram, "billy /v1/item/%d %d 200 000000000000000000000000%08x %d\n", i%16, 800+i*37%4000, i+1, 100+i%8)
	}
	lines := bytes.Count(dgram, []byte{'\n'})
	src := in.m.sources[SourceUDP]
	from := &telemetry.Sender{Source: SourceUDP, Addr: netip.MustParseAddr("127.0.0.1")}
	in.trust.decide(from)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		in.consumeDatagram(src, dgram, time.Now(), from)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
}

// BenchmarkOTLPHTTPRequest is the OTLP/HTTP path without the socket: an
// SDK's batch of 512 SERVER spans in protobuf, read, priced, decoded,
// sampled (1 in 10) and queued, with a consumer draining the queue.
func BenchmarkOTLPHTTPRequest(b *testing.B) {
	in, err := New(Config{OTLPHTTP: "127.0.0.1:0", SampleEvery: 10, SlowThreshold: time.Second, QueueSize: 1 << 16}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close() })
	go func() {
		for range in.Out() {
		}
	}()
	const spans = 512
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "checkout")
	ss := rs.ScopeSpans().AppendEmpty()
	start := time.Now().Add(-time.Second)
	for i := range spans {
		s := ss.Spans().AppendEmpty()
		s.SetName("POST /pay")
		s.SetKind(ptrace.SpanKindServer)
		s.SetTraceID(pcommon.TraceID{byte(i), byte(i >> 8), 0x4b, 0xf9})
		s.SetSpanID(pcommon.SpanID{byte(i), 1})
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Duration(800+i*37%4000) * time.Microsecond)))
		s.Attributes().PutStr("http.route", fmt.Sprintf("/pay/%d", i%8))
		s.Attributes().PutInt("http.response.status_code", 200)
	}
	body, _ := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	h := in.otlpHTTPHandler()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-protobuf")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*spans), "intake.otlp_http_ns_per_span:ns")
}

// BenchmarkScanTraceRequest is the price of pricing: the walk over an
// SDK's batch of 512 request spans, before it is decoded.
func BenchmarkScanTraceRequest(b *testing.B) {
	body, _ := ptraceotlp.NewExportRequestFromTraces(manySpans(512)).MarshalProto()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := scanTraceRequest(body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*512), "intake.otlp_pricing_ns_per_span:ns")
}

// BenchmarkTrustDecide is the per-datagram cost of the trigger
// allow-list: a UDP sender against four prefixes (matching the last one,
// the worst case of the linear scan), and a unix-socket sender's uid
// against a list of four.
func BenchmarkTrustDecide(b *testing.B) {
	p := newTrustPolicy(TriggerConfig{UIDs: []uint32{1000, 1001, 1002, 1003},
		CIDRs: []string{"10.244.0.0/16", "10.96.0.0/12", "fd00::/8", "192.168.7.0/24"}})
	for _, tc := range []struct {
		name string
		s    telemetry.Sender
	}{
		{"udp", telemetry.Sender{Source: SourceUDP, Addr: netip.MustParseAddr("192.168.7.9")}},
		{"unixgram", telemetry.Sender{Source: SourceUnixgram, HasCred: true, UID: 1003, GID: 1003}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			s := tc.s
			for b.Loop() {
				p.decide(&s)
			}
			if !s.Trusted {
				b.Fatal("not trusted")
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "intake.trust_"+tc.name+"_ns:ns")
		})
	}
}

// BenchmarkGzipBombs is the memory the gzip bomb (4 KiB on the
// wire, 4 MiB of empty spans) costs the intake at its defaults: four at
// once over OTLP/HTTP and four over OTLP/gRPC, each refused. It prints
// the peak RSS growth while they are answered (the intake without a
// decode budget grew by over 2 GiB).
func BenchmarkGzipBombs(b *testing.B) {
	_, gz := gzipBomb(b)
	raw, _ := gzipBomb(b)
	cfg := testConfig(b)
	cfg.LineUDP, cfg.LineUnix = "", ""
	in := startIntake(b, cfg)
	url := "http://" + in.Addrs().OTLPHTTP + "/v1/traces"
	conn := dialGRPC(b, in.Addrs().OTLPGRPC)
	var worst int64
	for b.Loop() {
		grew := peakRSS(b, func() {
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					if code, _ := post(b, url, "application/x-protobuf", "gzip", gz); code < 400 {
						b.Errorf("HTTP bomb answered %d", code)
					}
				})
				wg.Go(func() {
					if err := conn.Invoke(context.Background(), exportMethod, &grpcResponse{b: raw}, &grpcRequest{},
						grpc.ForceCodecV2(otlpCodec{}), grpc.UseCompressor("gzip")); err == nil {
						b.Error("gRPC bomb accepted")
					}
				})
			}
			wg.Wait()
		})
		worst = max(worst, grew)
	}
	b.ReportMetric(float64(worst)/(1<<20), "intake.gzip_bombs_rss_growth_mib:MiB")
}

// BenchmarkOTLPDecodePath is the decode path alone, from an OTel Go SDK's
// batch (256 HTTP server spans, each with a database client span under
// it) to the request spans handed to the sampler: the direct decoder's
// one walk, and beside it, in the same run, the reference path (pricing
// walk, ptraceotlp, requestSpans). Figures are CPU time per span of the
// batch, garbage collection included.
func BenchmarkOTLPDecodePath(b *testing.B) {
	const requests = 256
	body := sdkBatch(b, requests, fuzzNow.Add(-time.Minute))
	const spans = 2 * requests
	hold := budgetHold{b: &decodeBudget{limit: 1 << 40}}
	var sink int
	direct := func() {
		d := getSpanDecoder()
		if err := d.decode(body, fuzzWindow, DefaultMaxSpansPerRequest, &hold); err != nil {
			b.Fatal(err)
		}
		var r telemetry.Request
		for i := range d.spans {
			d.spans[i].fill(&r)
			sink += len(d.services[d.spans[i].resource]) + len(d.spans[i].endpoint)
		}
		putSpanDecoder(d)
		hold.release()
	}
	reference := func() {
		if _, err := scanTraceRequest(body); err != nil {
			b.Fatal(err)
		}
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			b.Fatal(err)
		}
		requestSpans(req.Traces(), fuzzWindow, func(svc, ep string, _ *telemetry.Request) { sink += len(svc) + len(ep) })
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	// The two run one after the other, not interleaved, so that the
	// reference path's garbage is collected on its own time; each is
	// measured in the process's CPU time (its collector's included), which
	// the other work on a shared machine disturbs less than wall time.
	runtime.GC()
	c0 := processCPU()
	for b.Loop() {
		direct()
	}
	runtime.GC()
	c1 := processCPU()
	for range b.N {
		reference()
	}
	runtime.GC()
	directNs, referenceNs := c1-c0, processCPU()-c1
	perSpan := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N*spans) }
	b.ReportMetric(perSpan(directNs), "agent.otlp_ns_per_span:ns")
	b.ReportMetric(perSpan(referenceNs), "agent.otlp_ns_per_span_pdata:ns")
	b.ReportMetric(float64(referenceNs)/float64(directNs), "agent.otlp_decode_speedup:x")
}

// BenchmarkOTLPGRPCExport is the gRPC handler from the message in
// grpc-go's buffer to the queue (price, decode, sample 1 in 10, queue),
// with a consumer draining the queue: the process's CPU time per span of
// an SDK batch, garbage collection included; the "pdata" run is the
// reference decoder (otlp_decoder: pdata).
func BenchmarkOTLPGRPCExport(b *testing.B) {
	const requests = 256
	body := sdkBatch(b, requests, fuzzNow.Add(-time.Minute))
	for _, decoder := range []string{OTLPDecoderDirect, OTLPDecoderPdata} {
		b.Run(decoder, func(b *testing.B) {
			in, err := New(Config{OTLPGRPC: "127.0.0.1:0", OTLPDecoder: decoder, QueueSize: 1 << 16}, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { in.Close() })
			in.now = func() time.Time { return fuzzNow }
			go func() {
				for range in.Out() {
				}
			}()
			svc := &traceService{in: in, src: in.m.sources[SourceOTLPGRPC]}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			runtime.GC()
			c0 := processCPU()
			for b.Loop() {
				req := grpcRequest{data: mem.BufferSlice{mem.SliceBuffer(body)}}
				if _, err := svc.export(context.Background(), &req); err != nil {
					b.Fatal(err)
				}
			}
			runtime.GC()
			name := "agent.otlp_export_cpu_ns_per_span"
			if decoder == OTLPDecoderPdata {
				name += "_pdata"
			}
			b.ReportMetric(float64((processCPU()-c0).Nanoseconds())/float64(b.N*2*requests), name+":ns")
		})
	}
}

// BenchmarkOTLPGRPCRequests is OTLP/gRPC export requests of an SDK's
// batch of 100 spans, end to end over loopback: four clients, one export
// at a time each, as four apps of a node. The client sends bytes
// encoded once, through the agent's own pass-through codec, so most of
// the process's CPU is the server's; the figure is CPU per request,
// client included.
func BenchmarkOTLPGRPCRequests(b *testing.B) {
	body := sdkBatch(b, 50, fuzzNow.Add(-time.Minute)) // 100 spans
	in, err := New(Config{OTLPGRPC: "127.0.0.1:0", QueueSize: 1 << 16}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close() })
	in.now = func() time.Time { return fuzzNow }
	if err := in.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	go func() {
		for range in.Out() {
		}
	}()
	const clients = 4
	var conns [clients]*grpc.ClientConn
	for i := range conns {
		conns[i] = dialGRPC(b, in.Addrs().OTLPGRPC)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	runtime.GC()
	c0 := processCPU()
	var next atomic.Int64
	var wg sync.WaitGroup
	n := int64(b.N)
	b.ResetTimer()
	for i := range clients {
		wg.Go(func() {
			for next.Add(1) <= n {
				if err := conns[i].Invoke(context.Background(), exportMethod, &grpcResponse{b: body}, &grpcRequest{}, grpc.ForceCodecV2(otlpCodec{})); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-c0).Microseconds())/float64(b.N), "intake.otlp_grpc_cpu_us_per_request_batch100:us")
}
