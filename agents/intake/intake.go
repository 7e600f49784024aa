package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("intake: closed")

// closeGrace bounds how long Close waits for in-flight OTLP requests.
const closeGrace = 5 * time.Second

// Intake receives per-request latency, samples it and queues what it keeps.
type Intake struct {
	cfg  Config
	log  *slog.Logger
	m    *metrics
	card *cardinality
	// budget is the decode budget shared by the OTLP receivers (cost.go).
	budget *decodeBudget
	now    func() time.Time // the receive clock; tests replace it
	out    chan telemetry.Request
	tap    func(*telemetry.Request, *telemetry.Sender) // set before Start; see Tap
	// trust decides which senders may fire captures (trust.go);
	// unnamed holds, per source, the judged sender of a receiver that
	// does not know its peer.
	trust trustPolicy
	// tokens are the bearer tokens OTLP senders must show; nil when
	// auth.token_file is not set (auth.go).
	tokens  *tokens
	unnamed map[string]*telemetry.Sender
	// malformed logs malformed line-protocol lines, rate-limited.
	malformed *malformedLog

	// mu orders sends on out against Close: senders hold it for reading
	// around a whole batch and check closed; Close takes it for writing
	// to set closed and close out.
	mu     sync.RWMutex
	closed bool

	startMu  sync.Mutex
	started  bool
	addrs    Addrs
	grpcSrv  *grpc.Server
	httpSrv  *http.Server
	packets  []net.PacketConn
	unixPath string // removed on Close
	wg       sync.WaitGroup
	once     sync.Once
}

// Addrs are the bound addresses of the enabled receivers; empty when
// disabled. With port 0 in the config they carry the port the kernel chose.
type Addrs struct {
	OTLPGRPC string // host:port
	OTLPHTTP string // host:port; POST http://<OTLPHTTP>/v1/traces
	LineUDP  string // host:port
	LineUnix string // socket path
}

// Tap has fn see every kept request as it is queued, on the receiving
// goroutine: the capture engine's local trigger must fire within 100 ms
// of a slow request, which a hop through the exporter's batches would
// not allow. from is who sent r, with Trusted set from Config.Trigger:
// only a trusted sender's request may fire a capture. fn must not block
// or keep r or from; call Tap before Start.
func (in *Intake) Tap(fn func(r *telemetry.Request, from *telemetry.Sender)) { in.tap = fn }

// SetClock replaces the wall clock requests are stamped with (default
// time.Now); call it before Start. The agent's --debug.clock-offset-file
// uses it to step one node's clock in the soak without stepping the test
// machine's.
func (in *Intake) SetClock(now func() time.Time) { in.now = now }

// New fills cfg's defaults, checks it and builds an intake; nothing is
// bound until Start.
func New(cfg Config, logger *slog.Logger) (*Intake, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	cfg.ServiceSlowThresholds = maps.Clone(cfg.ServiceSlowThresholds) // the caller may reuse its map
	in := &Intake{cfg: cfg, log: logger, now: time.Now, out: make(chan telemetry.Request, cfg.QueueSize)}
	in.budget = newDecodeBudget(cfg.DecodeBudgetBytes, cfg.DecodeBudgetPerPeerBytes)
	in.m = newMetrics(func() float64 { return float64(len(in.out)) }, func() float64 { return float64(in.budget.used.Load()) })
	in.m.budgetLimit.Set(float64(cfg.DecodeBudgetBytes))
	in.card = newCardinality(&in.cfg, in.m)
	in.trust = newTrustPolicy(cfg.Trigger)
	if cfg.Auth.TokenFile != "" {
		t, err := loadTokens(cfg.Auth.TokenFile, logger, func() time.Time { return in.now() })
		if err != nil {
			return nil, err
		}
		in.tokens = t
	}
	in.unnamed = map[string]*telemetry.Sender{}
	in.malformed = newMalformedLog(logger)
	for _, src := range []string{SourceOTLPGRPC, SourceOTLPHTTP, SourceUDP, SourceUnixgram} {
		s := &telemetry.Sender{Source: src}
		in.trust.decide(s)
		in.unnamed[src] = s
	}
	return in, nil
}

// Register registers the intake's metrics with reg.
func (in *Intake) Register(reg prometheus.Registerer) error { return in.m.register(reg) }

// Start binds every enabled receiver and starts serving. ctx bounds the
// binding only; the receivers run until Close. On any bind error Start
// releases what it bound and returns the error, which names the receiver
// and the address ("otlp grpc: listen tcp 127.0.0.1:4317: bind: address
// already in use"); the intake can then only be closed.
func (in *Intake) Start(ctx context.Context) (err error) {
	in.startMu.Lock()
	defer in.startMu.Unlock()
	in.mu.RLock()
	closed := in.closed
	in.mu.RUnlock()
	switch {
	case closed:
		return ErrClosed
	case in.started:
		return errors.New("intake: already started")
	}
	in.started = true

	var grpcLn, httpLn net.Listener
	defer func() {
		if err != nil {
			for _, ln := range []net.Listener{grpcLn, httpLn} {
				if ln != nil {
					ln.Close()
				}
			}
			in.closePackets()
			in.grpcSrv, in.httpSrv, in.addrs = nil, nil, Addrs{}
		}
	}()
	if in.cfg.OTLPGRPC != "" {
		var srv *grpc.Server
		if grpcLn, srv, err = in.listenGRPC(ctx); err != nil {
			return err
		}
		in.grpcSrv, in.addrs.OTLPGRPC = srv, grpcLn.Addr().String()
	}
	if in.cfg.OTLPHTTP != "" {
		var srv *http.Server
		if httpLn, srv, err = in.listenHTTP(ctx); err != nil {
			return err
		}
		in.httpSrv, in.addrs.OTLPHTTP = srv, httpLn.Addr().String()
	}
	var udp, unix net.PacketConn
	if in.cfg.LineUDP != "" {
		if udp, err = in.listenUDP(ctx); err != nil {
			return err
		}
		in.packets = append(in.packets, udp)
		in.addrs.LineUDP = udp.LocalAddr().String()
	}
	if in.cfg.LineUnix != "" {
		if unix, err = in.listenUnixgram(ctx); err != nil {
			return err
		}
		in.packets = append(in.packets, unix)
		in.unixPath, in.addrs.LineUnix = in.cfg.LineUnix, in.cfg.LineUnix
	}

	// Everything is bound: serve.
	if in.grpcSrv != nil {
		srv := in.grpcSrv
		in.serve("otlp grpc", func() error { return srv.Serve(grpcLn) })
	}
	if in.httpSrv != nil {
		srv := in.httpSrv
		in.serve("otlp http", func() error { return srv.Serve(httpLn) })
	}
	if udp != nil {
		in.wg.Go(func() { in.serveLines(udp, in.m.sources[SourceUDP]) })
	}
	if unix != nil {
		in.wg.Go(func() { in.serveLines(unix, in.m.sources[SourceUnixgram]) })
	}
	in.log.Info("intake: receiving", "otlp_grpc", in.addrs.OTLPGRPC, "otlp_http", in.addrs.OTLPHTTP,
		"line_udp", in.addrs.LineUDP, "line_unix", in.addrs.LineUnix)
	return nil
}

func (in *Intake) serve(name string, serve func() error) {
	in.wg.Go(func() {
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			in.log.Error("intake: receiver stopped", "receiver", name, "err", err)
		}
	})
}

// Addrs returns the bound addresses; valid after Start returned nil.
func (in *Intake) Addrs() Addrs {
	in.startMu.Lock()
	defer in.startMu.Unlock()
	return in.addrs
}

// Close stops every receiver, waits for their goroutines and closes Out.
// OTLP requests in flight get up to 5 s to finish. Close may be called
// more than once, and without Start; only the first call does anything.
func (in *Intake) Close() error {
	var errs []error
	in.once.Do(func() {
		in.mu.Lock()
		in.closed = true
		close(in.out)
		in.mu.Unlock()

		in.startMu.Lock()
		defer in.startMu.Unlock()
		errs = append(errs, in.closePackets())
		ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
		defer cancel()
		if in.grpcSrv != nil {
			stopped := make(chan struct{})
			go func() { in.grpcSrv.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-ctx.Done():
				in.grpcSrv.Stop()
			}
		}
		if in.httpSrv != nil {
			if err := in.httpSrv.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("otlp http: %w", err), in.httpSrv.Close())
			}
		}
		in.wg.Wait()
	})
	return errors.Join(errs...)
}

// closePackets closes the datagram sockets, which ends serveLines, and
// removes the unix socket file.
func (in *Intake) closePackets() error {
	var errs []error
	for _, pc := range in.packets {
		if err := pc.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	in.packets = nil
	if in.unixPath != "" {
		if err := os.Remove(in.unixPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("line unixgram: %w", err))
		}
		in.unixPath = ""
	}
	return errors.Join(errs...)
}
