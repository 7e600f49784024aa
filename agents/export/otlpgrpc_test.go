package export

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"

	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// otlpServer is the receiving side of OTLP/gRPC, built on the same pdata
// service definitions the Collector's otlpreceiver registers.
type otlpServer struct {
	ptraceotlp.UnimplementedGRPCServer
	spans, points atomic.Int64
}

func (s *otlpServer) Export(_ context.Context, r ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	s.spans.Add(int64(r.Traces().SpanCount()))
	return ptraceotlp.NewExportResponse(), nil
}

type metricsServer struct {
	pmetricotlp.UnimplementedGRPCServer
	s *otlpServer
}

func (m *metricsServer) Export(_ context.Context, r pmetricotlp.ExportRequest) (pmetricotlp.ExportResponse, error) {
	m.s.points.Add(int64(r.Metrics().DataPointCount()))
	return pmetricotlp.NewExportResponse(), nil
}

// A Collector that comes up late still gets every request, once: the sink
// retries with backoff instead of dropping.
func TestOTLPSinkRetriesUntilTheCollectorIsUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens yet
	sink, err := NewOTLPSink(OTLPConfig{Endpoint: addr, Insecure: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	res := telemetry.Resource{HostName: "node-7", NodeName: "node-7", HWClass: "gen5"}
	traces, _ := otlpwire.EncodeSpans(res, []telemetry.Request{{Service: "billy", Endpoint: "/get", Start: now, Duration: time.Millisecond}, {Service: "billy", Endpoint: "/put", Start: now, Duration: time.Millisecond}})
	metrics, _ := otlpwire.EncodeMetrics(res, []telemetry.Point{{Metric: "system.cpu.time", Start: now, End: now.Add(time.Second), Value: 1}})
	delivered := make(chan error, 2)
	for kind, p := range map[Kind][]byte{KindTraces: traces, KindMetrics: metrics} {
		if err := sink.Send(kind, p, func(err error) { delivered <- err }); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // a few failed attempts
	srv := &otlpServer{}
	g := grpc.NewServer()
	ptraceotlp.RegisterGRPCServer(g, srv)
	pmetricotlp.RegisterGRPCServer(g, &metricsServer{s: srv})
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	defer g.Stop()
	for i := 0; i < 2; i++ {
		select {
		case err := <-delivered:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("not delivered after the collector came up")
		}
	}
	if srv.spans.Load() != 2 || srv.points.Load() != 1 {
		t.Fatalf("collector got %d spans and %d points, want 2 and 1", srv.spans.Load(), srv.points.Load())
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}
