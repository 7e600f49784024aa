package intake

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip" // OTel SDKs and Collectors may send gzip
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spikehunt/spikehunt/internal/peerconns"
)

// The OTLP/gRPC TraceService is registered by hand, not with
// ptraceotlp.RegisterGRPCServer: there, grpc-go decodes the request into
// pdata before any code of ours runs, so a request's decoded cost could
// not be bounded before it is paid. Here the codec hands the handler the
// message's bytes (grpcRequest), and the handler walks them, takes the
// decode budget and only then files their spans (cost.go,
// decode_spans.go).
//
// The budget is taken when the message has arrived, never when a stream
// opens: a stream that opens and sends nothing holds no budget, only one
// of its peer's otlp_streams_per_peer, until otlp_read_timeout +
// otlp_write_timeout end it (counted as silent_stream). While a message
// arrives grpc-go holds what has come of it, and decompresses it whole
// before the handler sees it; the per-peer stream cap bounds that for one
// peer at otlp_streams_per_peer × 2 × max_request_bytes. Header lists are
// bounded at maxHeaderListBytes, before any of that.

const (
	traceServiceName = "opentelemetry.proto.collector.trace.v1.TraceService"
	exportMethod     = "/" + traceServiceName + "/Export"
)

// listenGRPC binds the OTLP/gRPC receiver and builds its server.
func (in *Intake) listenGRPC(ctx context.Context) (net.Listener, *grpc.Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", in.cfg.OTLPGRPC)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp grpc: %w", err)
	}
	gated, err := in.gateConns(ln, SourceOTLPGRPC)
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("otlp grpc: %w", err)
	}
	src := in.m.sources[SourceOTLPGRPC]
	svc := &traceService{in: in, src: src}
	srv := grpc.NewServer(
		// OTLP clients send a few short headers; grpc-go's default is
		// 16 MiB, decoded before any handler (or budget) sees them. The
		// limit is sent in SETTINGS, so a grpc-go client refuses to send
		// more; a block larger on the wire closes the connection
		// (headerGuard).
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		// grpc-go checks the limit on the wire size and again after
		// decompression, and answers ResourceExhausted itself.
		grpc.MaxRecvMsgSize(in.cfg.MaxRequestBytes),
		grpc.ForceServerCodecV2(otlpCodec{proto: encoding.GetCodecV2("proto")}),
		experimental.BufferPool(recvBuffers),
		// Fixed flow-control windows, a message's worth, instead of
		// grpc-go's estimate of the bandwidth-delay product, which pings
		// the client on each burst of data and moves the windows up to
		// 16 MiB: on loopback the estimate only costs wake-ups.
		grpc.InitialWindowSize(otlpWindowBytes),
		grpc.InitialConnWindowSize(otlpWindowBytes),
		// Exports run on a few goroutines that live on, whose stacks have
		// grown to the decoder's depth, rather than on a new goroutine
		// per call whose stack grows (and is copied) each time.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.InTapHandle(svc.tap),
		grpc.StatsHandler(grpcDrops{src: src, gate: gated}),
		// A client that connects and never finishes the HTTP/2 handshake.
		grpc.ConnectionTimeout(in.cfg.OTLPReadTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     in.cfg.OTLPIdleTimeout,
			MaxConnectionAge:      in.cfg.OTLPMaxConnectionAge,
			MaxConnectionAgeGrace: 30 * time.Second,
		}),
		// OTLP clients send one Export at a time per connection, or a
		// few; this bounds the goroutines one connection can start.
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
	)
	srv.RegisterService(exportServiceDesc(traceServiceName, "opentelemetry/proto/collector/trace/v1/trace_service.proto"), svc)
	srv.RegisterService(exportServiceDesc(metricsServiceName, "opentelemetry/proto/collector/metrics/v1/metrics_service.proto"),
		&discardService{src: src, signal: signalMetrics})
	srv.RegisterService(exportServiceDesc(logsServiceName, "opentelemetry/proto/collector/logs/v1/logs_service.proto"),
		&discardService{src: src, signal: signalLogs})
	return &headerGuardListener{Listener: gated, oversize: func() { src.drop(reasonOversizeMetadata, 1) }}, srv, nil
}

// maxHeaderListBytes bounds a gRPC request's header list, as HTTP/2
// counts it (each field's name and value and 32 bytes): an OTLP exporter
// sends a handful of fields, a few hundred bytes with an API key.
const maxHeaderListBytes = 8 << 10

const maxStreamsPerConn = 64

// otlpWindowBytes is the OTLP/gRPC server's HTTP/2 flow-control window,
// per stream and per connection: an SDK's batch of 512 spans in one
// window.
const otlpWindowBytes = 1 << 20

// traceService is the OTLP TraceService.
type traceService struct {
	in  *Intake
	src *sourceMetrics
}

// exporter is an OTLP/gRPC service's one method, Export, on the message
// still in grpc-go's buffers: traceService decodes it, discardService
// drops it.
type exporter interface {
	export(ctx context.Context, req *grpcRequest) (*grpcResponse, error)
}

// exportServiceDesc describes an OTLP collector service (TraceService,
// MetricsService or LogsService) whose Export is served by an exporter.
func exportServiceDesc(serviceName, protoFile string) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*exporter)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Export",
			Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var req grpcRequest
				if err := dec(&req); err != nil {
					return nil, err
				}
				defer req.data.Free()
				return srv.(exporter).export(ctx, &req)
			},
		}},
		Metadata: protoFile,
	}
}

// grpcRequest is an Export request still in grpc-go's buffers; the
// handler frees them. grpcResponse is an encoded ExportTraceServiceResponse.
type (
	grpcRequest  struct{ data mem.BufferSlice }
	grpcResponse struct{ b []byte }
)

// otlpCodec passes the trace service's messages through as bytes and
// leaves every other message to the proto codec.
type otlpCodec struct{ proto encoding.CodecV2 }

func (c otlpCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*grpcResponse); ok {
		return mem.BufferSlice{mem.SliceBuffer(r.b)}, nil
	}
	return c.proto.Marshal(v)
}

func (c otlpCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*grpcRequest); ok {
		data.Ref() // grpc-go frees data when Unmarshal returns
		r.data = data
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

func (otlpCodec) Name() string { return "proto" }

// recvBuffers holds the gRPC server's message buffers: one per power of
// two, handed out as they were left. grpc-go's default pool clears each
// buffer it hands out, and its sizes jump from 32 KiB to 1 MiB, so an SDK's
// batch of 512 spans (some 200 KiB) would cost the clearing of a whole
// MiB, more CPU than decoding it. grpc-go overwrites every byte of a buffer's length
// before it hands it on (a message, a frame), and nothing here reads past
// a message's length, so what a buffer held before does not show.
var recvBuffers = &bufferTiers{}

type bufferTiers struct{ tiers [maxBufferTier + 1]sync.Pool }

// minBufferTier and maxBufferTier bound the pooled sizes (256 B to
// 1 GiB, max_request_bytes' bound); a larger buffer is not pooled.
const (
	minBufferTier = 8
	maxBufferTier = 30
)

func (p *bufferTiers) Get(n int) *[]byte {
	t := max(bits.Len(uint(n-1)), minBufferTier)
	if n <= 0 || t > maxBufferTier {
		b := make([]byte, max(n, 0))
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<t)
	return &b
}

func (p *bufferTiers) Put(b *[]byte) {
	c := cap(*b)
	t := bits.Len(uint(c - 1))
	if c != 1<<t || t < minBufferTier || t > maxBufferTier {
		return // not one of ours
	}
	p.tiers[t].Put(b)
}

// grpcHoldKey is the context key of an Export stream's budgetHold;
// gateConnKey of its connection's place in the gate.
type (
	grpcHoldKey struct{}
	gateConnKey struct{}
)

// grpcHold is an Export stream's share of the decode budget, from the tap
// to the end of the call, which the stats handler sees however it ends.
// It holds nothing until the message has arrived.
type grpcHold struct {
	budgetHold
	handled atomic.Bool // export ran and counted its own refusals
	ended   atomic.Bool
	conn    *peerconns.Conn
	cancel  context.CancelFunc
}

func (h *grpcHold) end() {
	if h.ended.Swap(true) {
		return
	}
	h.release()
	h.b.unshare(h.p, true)
	if h.conn != nil {
		h.conn.Idle()
	}
	h.cancel()
}

// errSilentStream is the cause a stream's context ends with when its
// message did not arrive in time.
var errSilentStream = errors.New("spikehunt: no Export message within otlp_read_timeout + otlp_write_timeout")

// tap runs as an Export stream (of traces, metrics or logs) opens: it
// counts the stream against its peer's otlp_streams_per_peer, marks the
// connection busy (the gate does not close it for a newcomer), and gives
// the call otlp_read_timeout + otlp_write_timeout. It takes no budget:
// export takes it once the message is there. It runs on the
// connection's reader goroutine: it must not block.
func (s *traceService) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !exportMethodOf(info.FullMethodName) {
		return ctx, nil
	}
	gc, _ := ctx.Value(gateConnKey{}).(*peerconns.Conn)
	if s.in.tokens != nil {
		if !s.in.tokens.accepts(firstOf(info.Header.Get("authorization"))) {
			// Before the message is read, and before the stream counts
			// against its peer.
			s.src.drop(reasonUnauthenticated, 1)
			return nil, status.Error(codes.Unauthenticated, "spikehunt: send the agent's token as the metadata authorization: Bearer <token> (OTEL_EXPORTER_OTLP_HEADERS)")
		}
		if gc != nil {
			gc.Authenticate() // it may now hold the reserved places
		}
	}
	var from netip.Addr
	if p, ok := peer.FromContext(ctx); ok {
		from = peerAddr(p.Addr)
	}
	share := s.in.budget.share(from, true, s.in.cfg.OTLPStreamsPerPeer)
	if share == nil {
		s.src.drop(reasonPeerStreams, 1)
		return nil, overBudgetStatus("spikehunt: this peer has otlp_streams_per_peer Export calls in flight: retry later").Err()
	}
	h := &grpcHold{budgetHold: budgetHold{b: s.in.budget, p: share}}
	if gc != nil {
		gc.Busy()
		h.conn = gc
	}
	ctx, h.cancel = context.WithTimeoutCause(context.WithValue(ctx, grpcHoldKey{}, h),
		s.in.cfg.OTLPReadTimeout+s.in.cfg.OTLPWriteTimeout, errSilentStream)
	return ctx, nil
}

// firstOf is vs[0], or "" for none: a second authorization value is
// ignored, not tried.
func firstOf(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// overBudgetStatus is ResourceExhausted with a RetryInfo: OTLP clients
// retry ResourceExhausted only with one.
func overBudgetStatus(msg string) *status.Status {
	st := status.New(codes.ResourceExhausted, msg)
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfterSeconds * time.Second)}); err == nil {
		return d
	}
	return st
}

// export files the request spans of req. Invalid request spans come back
// as a partial success; they are not retryable.
func (s *traceService) export(ctx context.Context, req *grpcRequest) (*grpcResponse, error) {
	h, _ := ctx.Value(grpcHoldKey{}).(*grpcHold)
	if h == nil { // the tap runs for every Export stream; be safe without it
		h = &grpcHold{budgetHold: budgetHold{b: s.in.budget}, cancel: func() {}}
	}
	h.handled.Store(true)
	defer h.release()
	if !h.grow(int64(req.data.Len())) { // grpc-go's buffers, which arrived
		s.src.drop(reasonOverBudget, 1)
		return nil, overBudgetStatus("spikehunt: " + errOverBudget.Error()).Err()
	}

	held := int64(req.data.Len()) // grpc-go's buffers
	var b []byte
	if len(req.data) == 1 {
		b = req.data[0].ReadOnlyData()
	} else {
		// A message past one buffer (a large or a compressed one) is
		// made contiguous in a pooled buffer, held until the call ends.
		buf := req.data.MaterializeToBuffer(recvBuffers)
		defer buf.Free()
		b = buf.ReadOnlyData()
		held += int64(len(b))
	}
	now := s.in.now()
	shape, d, err := s.in.priceProto(b, now, &h.budgetHold)
	if d != nil {
		defer putSpanDecoder(d)
	}
	if err != nil {
		s.src.drop(reasonDecode, 1)
		return nil, status.Error(codes.InvalidArgument, "decode ExportTraceServiceRequest: "+err.Error())
	}
	if shape.spans > s.in.cfg.MaxSpansPerRequest {
		s.src.drop(reasonTooManySpans, 1)
		return nil, status.Error(codes.ResourceExhausted, tooManySpans(shape.spans, s.in.cfg.MaxSpansPerRequest).Error())
	}
	if err := s.in.reserve(&h.budgetHold, held+shape.cost); err != nil {
		if errors.Is(err, errOverBudget) {
			s.src.drop(reasonOverBudget, 1)
			return nil, overBudgetStatus("spikehunt: " + errOverBudget.Error()).Err()
		}
		s.src.drop(reasonTooLarge, 1)
		return nil, status.Error(codes.ResourceExhausted, err.Error())
	}
	var from net.Addr
	if p, ok := peer.FromContext(ctx); ok {
		from = p.Addr
	}
	var t spanTally
	ok := false
	if d != nil {
		t, ok = s.in.consumeDecoded(s.src, from, d, now)
	} else {
		pr := ptraceotlp.NewExportRequest()
		if err := pr.UnmarshalProto(b); err != nil {
			s.src.drop(reasonDecode, 1)
			return nil, status.Error(codes.InvalidArgument, "decode ExportTraceServiceRequest: "+err.Error())
		}
		t, ok = s.in.consumeTraces(s.src, from, pr.Traces())
	}
	if !ok {
		return nil, status.Error(codes.Unavailable, "spikehunt intake is shutting down")
	}
	if t.rejected() == 0 {
		return &grpcResponse{}, nil // an empty ExportTraceServiceResponse
	}
	body, err := exportResponse(t).MarshalProto()
	if err != nil { // cannot happen for a response this simple
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &grpcResponse{b: body}, nil
}

// grpcDrops counts the requests that grpc-go rejects before export runs:
// too large, in an unknown compression, or silent; it ends every Export
// stream's hold however the call ends; and it finds each connection's
// place in the gate, for the tap to mark it busy.
type grpcDrops struct {
	src  *sourceMetrics
	gate *peerconns.Listener
}

func (grpcDrops) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h grpcDrops) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	if c := h.gate.Lookup(info.RemoteAddr); c != nil {
		return context.WithValue(ctx, gateConnKey{}, c)
	}
	return ctx
}
func (grpcDrops) HandleConn(context.Context, stats.ConnStats) {}

func (h grpcDrops) HandleRPC(ctx context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	if !ok {
		return
	}
	hold, _ := ctx.Value(grpcHoldKey{}).(*grpcHold)
	if hold != nil {
		hold.end()
		if hold.handled.Load() {
			return
		}
	}
	if end.Error == nil {
		return
	}
	if hold != nil && errors.Is(context.Cause(ctx), errSilentStream) {
		h.src.drop(reasonSilentStream, 1)
		return
	}
	switch status.Code(end.Error) {
	case codes.ResourceExhausted:
		h.src.drop(reasonTooLarge, 1)
	case codes.Internal: // grpc-go's "failed to unmarshal"
		h.src.drop(reasonDecode, 1)
	case codes.Unimplemented: // a grpc-encoding without a decompressor
		h.src.drop(reasonContentEncoding, 1)
	}
}
