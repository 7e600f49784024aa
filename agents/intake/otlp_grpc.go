package intake

import (
	"context"
	"fmt"
	"net"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // OTel SDKs and Collectors may send gzip
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// listenGRPC binds the OTLP/gRPC receiver and builds its server.
func (in *Intake) listenGRPC(ctx context.Context) (net.Listener, *grpc.Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", in.cfg.OTLPGRPC)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp grpc: %w", err)
	}
	src := in.m.sources[SourceOTLPGRPC]
	srv := grpc.NewServer(
		// grpc-go checks the limit on the wire size and again after
		// decompression, and answers ResourceExhausted itself.
		grpc.MaxRecvMsgSize(in.cfg.MaxRequestBytes),
		grpc.StatsHandler(grpcDrops{src}),
	)
	ptraceotlp.RegisterGRPCServer(srv, &traceService{in: in, src: src})
	return ln, srv, nil
}

// traceService is the OTLP TraceService.
type traceService struct {
	ptraceotlp.UnimplementedGRPCServer
	in  *Intake
	src *sourceMetrics
}

// Export files the request spans of req. Invalid request spans come back
// as a partial success; they are not retryable.
func (s *traceService) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	t, ok := s.in.consumeTraces(s.src, req.Traces())
	if !ok {
		return ptraceotlp.NewExportResponse(), status.Error(codes.Unavailable, "spikehunt intake is shutting down")
	}
	return exportResponse(t), nil
}

// grpcDrops counts the requests that grpc-go rejects before Export runs:
// too large, undecodable, or in an unknown compression.
type grpcDrops struct{ src *sourceMetrics }

func (grpcDrops) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (grpcDrops) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (grpcDrops) HandleConn(context.Context, stats.ConnStats)                       {}

func (h grpcDrops) HandleRPC(_ context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	if !ok || end.Error == nil {
		return
	}
	switch status.Code(end.Error) {
	case codes.ResourceExhausted:
		h.src.drop(reasonTooLarge, 1)
	case codes.Internal: // grpc-go's "failed to unmarshal"; Export never returns it
		h.src.drop(reasonDecode, 1)
	case codes.Unimplemented: // a grpc-encoding without a decompressor
		h.src.drop(reasonContentEncoding, 1)
	}
}
