package intake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"google.golang.org/grpc/codes"
)

// OTLP signals the agent does not use. An app pointed at the agent with
// OTEL_EXPORTER_OTLP_ENDPOINT (the README's advice) sends its metrics and
// logs there too; answered 404 or Unimplemented, its SDK logs an export
// error at every interval. The agent answers them success and discards
// them unread, counting each request in
// spikehunt_intake_discarded_requests_total{source, signal}. An app that
// wants its metrics and logs kept points OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// at the agent and the others at its Collector.
//
// Nothing is decoded, so nothing takes the decode budget beyond what
// grpc-go holds: OTLP/HTTP bodies are read and dropped as they arrive,
// within max_request_bytes on the wire (a compressed body is never
// inflated); a gRPC message, which grpc-go reads whole and decompresses
// before the handler runs, counts against its peer's otlp_streams_per_peer
// as a trace export does.

const (
	signalMetrics = "metrics"
	signalLogs    = "logs"

	metricsServiceName = "opentelemetry.proto.collector.metrics.v1.MetricsService"
	logsServiceName    = "opentelemetry.proto.collector.logs.v1.LogsService"
)

// exportMethodOf reports whether a gRPC method is an OTLP Export, whose
// streams the tap counts: a switch on constant strings, which the tap
// runs for every stream, costs less than hashing the name into a map.
func exportMethodOf(name string) bool {
	switch name {
	case exportMethod, "/" + metricsServiceName + "/Export", "/" + logsServiceName + "/Export":
		return true
	}
	return false
}

// serveOTLPDiscard answers POST /v1/metrics or /v1/logs: the body is read
// to its end within max_request_bytes and dropped, and the answer is an
// empty Export*ServiceResponse (no bytes in protobuf, {} in JSON), which
// is what a receiver that accepted everything sends.
func (in *Intake) serveOTLPDiscard(signal string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		src := in.m.sources[SourceOTLPHTTP]
		ct, ok := acceptOTLPPost(w, r, src, "an OTLP export request")
		if !ok {
			return
		}
		body := &cappedReader{r: r.Body, left: int64(in.cfg.MaxRequestBytes)}
		if _, err := io.Copy(io.Discard, body); err != nil {
			if body.over || errors.Is(err, errTooLarge) {
				src.drop(reasonTooLarge, 1)
				writeStatus(w, ct, http.StatusRequestEntityTooLarge, codes.ResourceExhausted,
					fmt.Sprintf("request body larger than %d bytes: send smaller batches", in.cfg.MaxRequestBytes))
				return
			}
			src.drop(reasonDecode, 1)
			writeStatus(w, ct, http.StatusBadRequest, codes.InvalidArgument, "read body: "+err.Error())
			return
		}
		src.discarded[signal].Inc()
		var answer []byte
		if ct == ctJSON {
			answer = []byte("{}")
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		w.WriteHeader(http.StatusOK)
		w.Write(answer)
	}
}

// discardService is the OTLP/gRPC MetricsService or LogsService: each
// Export is answered with an empty response.
type discardService struct {
	src    *sourceMetrics
	signal string
}

func (s *discardService) export(ctx context.Context, req *grpcRequest) (*grpcResponse, error) {
	if h, _ := ctx.Value(grpcHoldKey{}).(*grpcHold); h != nil {
		h.handled.Store(true)
	}
	s.src.discarded[s.signal].Inc()
	return &grpcResponse{b: []byte{}}, nil
}
