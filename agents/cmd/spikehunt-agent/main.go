// Command spikehunt-agent runs on every node: it samples kernel counters,
// takes per-request latency from apps, and exports both as OTLP to Kafka or
// an OpenTelemetry Collector, spooling to disk while the destination is
// down. See agents/ARCHITECTURE.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spikehunt/spikehunt/internal/buildinfo"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spikehunt/spikehunt/agents/collect"
	"github.com/spikehunt/spikehunt/agents/export"
	"github.com/spikehunt/spikehunt/agents/intake"
	"github.com/spikehunt/spikehunt/agents/selfreport"
	"github.com/spikehunt/spikehunt/agents/spool"
	"github.com/spikehunt/spikehunt/internal/memlimit"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/kafkasec"
)

func main() {
	applyTimerSlack(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "spikehunt-agent:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// version is the release, stamped by the image build (-ldflags "-X
// main.version=…"); buildinfo.Describe names a hand build.
var version = "dev"

// errShowVersion is parseFlags' answer to --version.
var errShowVersion = errors.New("version")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "capture" {
		return runCaptureCmd(ctx, args[1:], stdout, stderr)
	}
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, errShowVersion) {
		fmt.Fprintln(stdout, "spikehunt-agent", buildinfo.Describe(version))
		return nil
	}
	if err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Runtime.GoMaxProcs > 0 {
		runtime.GOMAXPROCS(cfg.Runtime.GoMaxProcs)
	}
	log := newLogger(cfg.LogLevel, stderr)
	if limit, from, err := memlimit.Set(cfg.Runtime.MemoryLimitRatio); err != nil {
		log.Warn("the Go memory limit is not set", "error", err)
	} else if limit > 0 {
		log.Info("Go memory limit set from the cgroup's", "limit_mib", limit>>20, "from", from)
	}
	res, err := resolveResource(ctx, cfg.Resource, log)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	for _, p := range []*string{&cfg.Paths.ProcFS, &cfg.Paths.SysFS, &cfg.Paths.CgroupFS, &cfg.Paths.TraceFS} {
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	// The node's name came from the configuration or the downward API, not
	// the host name fallback: the watches that select by node need it.
	nodeGiven := cfg.Resource.NodeName != "" || os.Getenv("NODE_NAME") != ""
	podNamer, stopPodNames, err := startPodNames(ctx, cfg.Collect.PodNames, res.NodeName, nodeGiven, log, reg)
	if err != nil {
		return err
	}
	defer stopPodNames()
	col, err := collect.New(collect.Options{ProcFS: cfg.Paths.ProcFS, SysFS: cfg.Paths.SysFS, CgroupFS: cfg.Paths.CgroupFS,
		Disabled: cfg.Collect.Disabled, DiskIgnore: cfg.Collect.DiskIgnore,
		CgroupTop: cfg.Collect.CgroupTop, CgroupScanLimit: cfg.Collect.CgroupScanLimit, PodNamer: podNamer, Logger: log})
	if err != nil {
		return err
	}
	defer col.Close()
	in, err := intake.New(cfg.Intake, log)
	if err != nil {
		return err
	}
	eng, stopCapture, err := startCapture(ctx, cfg.Capture, cfg.Paths.TraceFS, res, log, reg)
	if err != nil {
		return err
	}
	defer stopCapture()
	if eng != nil {
		in.Tap(eng.ObserveFrom)
	}
	if cfg.Debug.ClockOffsetFile != "" {
		in.SetClock(offsetClock(ctx, cfg.Debug.ClockOffsetFile, log))
	}
	// Deferred after stopCapture, so it runs first: the watcher disarms
	// and reports its captures before the engine closes.
	stopCaptureWatcher, err := startCaptureWatcher(ctx, cfg.Capture.Kube, eng, res.NodeName, nodeGiven, log, reg)
	if err != nil {
		return err
	}
	defer stopCaptureWatcher()
	sp, rec, err := spool.Open(cfg.Spool, log)
	if err != nil {
		return err
	}
	defer sp.Close()
	log.Info("spool opened", "dir", cfg.Spool.Dir, "recovery", rec)
	var sink export.Sink
	if cfg.Sink == "otlp" {
		if _, ok := cfg.OTLP.Headers["host.name"]; !ok {
			cfg.OTLP.Headers = maps.Clone(cfg.OTLP.Headers)
			if cfg.OTLP.Headers == nil {
				cfg.OTLP.Headers = map[string]string{}
			}
			cfg.OTLP.Headers["host.name"] = res.HostName
		}
		sink, err = export.NewOTLPSink(cfg.OTLP)
	} else {
		cfg.Kafka.Key = res.HostName
		var ks *export.KafkaSink
		if ks, err = export.NewKafkaSink(cfg.Kafka, kafkasec.RefusalLog(log, cfg.Kafka.Security)); err == nil {
			sink = ks
			err = checkKafka(ctx, ks, cfg.Kafka.Security, log)
		}
	}
	if err != nil {
		return err
	}
	exp, err := export.New(cfg.Export, res, sink, sp, log)
	if err != nil {
		return err
	}
	for _, r := range []interface {
		Register(prometheus.Registerer) error
	}{col, sp, exp, in} {
		if err := r.Register(reg); err != nil {
			return err
		}
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if err := in.Start(ctx); err != nil {
		ln.Close()
		return err
	}
	a := in.Addrs()
	log.Info("agent started", "host", res.HostName, "hw_class", res.HWClass, "sink", sink.Name(),
		"otlp_grpc", a.OTLPGRPC, "otlp_http", a.OTLPHTTP, "line_udp", a.LineUDP, "line_unix", a.LineUnix, "metrics", ln.Addr().String())
	fmt.Fprintf(stdout, "spikehunt-agent listening: metrics http://%s/metrics otlp-grpc %s otlp-http %s line-udp %s line-unix %s\n",
		ln.Addr(), a.OTLPGRPC, a.OTLPHTTP, a.LineUDP, a.LineUnix)

	srv, capped := newServer(ln, observability(reg, cfg.Debug.Pprof), metricsLimits())
	go srv.Serve(capped)

	points := make(chan []telemetry.Point, 16)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		exp.Run(runCtx, in.Out(), points)
	}()
	self := selfreport.New(in, exp, sp, eng, selfreport.CaptureBudget(cfg.Capture.MaxConcurrent), cfg.Collect.Interval, log)
	col.Run(ctx, cfg.Collect.Interval, cfg.Collect.IRQInterval, func(ps []telemetry.Point) {
		if eng != nil {
			eng.ObservePoints(ps)
		}
		now := time.Now()
		ps, took := self.Take(ps, now)
		select {
		case points <- ps:
			if took {
				self.Commit(now)
			}
		default:
			log.Warn("exporter behind: dropped one sampling pass", "points", len(ps))
		}
	})
	// ctx ended: stop taking requests, let the exporter spool the rest.
	log.Info("shutting down")
	in.Close()
	cancel()
	<-done
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	srv.Shutdown(sctx)
	return sink.Close()
}

func observability(reg prometheus.Gatherer, pprofOn bool) http.Handler {
	mux := http.NewServeMux()
	if pprofOn {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	return mux
}

func newLogger(level string, w io.Writer) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
