package export

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// OTLPConfig configures the OTLP/gRPC sink (an OpenTelemetry Collector).
type OTLPConfig struct {
	Endpoint string        `yaml:"endpoint"` // host:port, e.g. otel-gateway:4317
	Insecure bool          `yaml:"insecure"` // plaintext; default TLS
	Timeout  time.Duration `yaml:"timeout"`
	// Headers go with every export as gRPC metadata. The agent adds
	// host.name: the gateway Collector keys its Kafka records by it.
	Headers map[string]string `yaml:"headers"`
}

// OTLPSink exports to a Collector over OTLP/gRPC, one request at a time in
// spool order. A failed export is retried with backoff until it succeeds or
// the sink closes: a Collector that is down holds records in the spool,
// never drops them.
type OTLPSink struct {
	cfg     OTLPConfig
	conn    *grpc.ClientConn
	traces  ptraceotlp.GRPCClient
	metrics pmetricotlp.GRPCClient
	queue   chan otlpItem
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type otlpItem struct {
	kind    Kind
	payload []byte
	done    func(error)
}

// NewOTLPSink dials lazily.
func NewOTLPSink(cfg OTLPConfig) (*OTLPSink, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("otlp: no endpoint configured")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	creds := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	if cfg.Insecure {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(cfg.Endpoint, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("otlp: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &OTLPSink{cfg: cfg, conn: conn, traces: ptraceotlp.NewGRPCClient(conn), metrics: pmetricotlp.NewGRPCClient(conn),
		queue: make(chan otlpItem, 4), ctx: ctx, cancel: cancel}
	s.wg.Add(1)
	go s.loop()
	return s, nil
}

// Name implements Sink.
func (s *OTLPSink) Name() string { return "otlp" }

// Send implements Sink.
func (s *OTLPSink) Send(kind Kind, payload []byte, done func(error)) error {
	select {
	case s.queue <- otlpItem{kind, payload, done}:
		return nil
	default:
		return ErrFull
	}
}

func (s *OTLPSink) loop() {
	defer s.wg.Done()
	for it := range s.queue {
		backoff := 100 * time.Millisecond
		for {
			err := s.export(it)
			if err == nil {
				it.done(nil)
				break
			}
			if s.ctx.Err() != nil {
				it.done(ErrSinkClosed)
				break
			}
			select {
			case <-s.ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}
}

func (s *OTLPSink) export(it otlpItem) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	for k, v := range s.cfg.Headers {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	switch it.kind {
	case KindTraces:
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(it.payload); err != nil {
			return err
		}
		_, err := s.traces.Export(ctx, req)
		return err
	case KindMetrics:
		req := pmetricotlp.NewExportRequest()
		if err := req.UnmarshalProto(it.payload); err != nil {
			return err
		}
		_, err := s.metrics.Export(ctx, req)
		return err
	}
	return fmt.Errorf("otlp: unknown record kind %d", it.kind)
}

// Close stops retrying, drains the queue and closes the connection.
func (s *OTLPSink) Close() error {
	close(s.queue)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.Timeout):
		s.cancel()
		<-done
	}
	s.cancel()
	return s.conn.Close()
}
