package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/capture/bpftrace"
	"github.com/spikehunt/spikehunt/agents/capture/ftrace"
	"github.com/spikehunt/spikehunt/agents/capture/perf"
	"github.com/spikehunt/spikehunt/agents/capture/wpr"
	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// CaptureConfig configures the flight recorders (agents/capture).
type CaptureConfig struct {
	// Enabled runs the capture engine. It costs one atomic load per
	// request while nothing is armed.
	Enabled bool `yaml:"enabled"`
	// Dir is the volume captures are written to.
	Dir string `yaml:"dir"`
	// Socket is the control socket (`spikehunt-agent capture …`), mode
	// 0600 in a 0700 folder of its own (default
	// /run/spikehunt-agent/capture.sock), and only a root peer's
	// connection is served (SO_PEERCRED): only root arms captures. Keep
	// it out of the line socket's folder, which apps of every user must
	// be able to enter.
	Socket string `yaml:"socket"`
	// FireEvery and FireBurst rate-limit the local trigger per sender (a
	// uid on the unix socket, an address otherwise): FireBurst fires at
	// once, then one more every FireEvery (defaults 30s and 2). Who may
	// fire at all is intake.trigger.
	FireEvery time.Duration `yaml:"fire_every"`
	FireBurst int           `yaml:"fire_burst"`
	// AnalyzeTimeout bounds the analysis a recorder makes of its trace
	// on the node after collection (perf: explain.json, stacks.folded,
	// pprof); past it the capture is kept without one. Default 60s;
	// negative turns the analysis off.
	AnalyzeTimeout time.Duration `yaml:"analyze_timeout"`
	// StoreRetryFor is how long a sealed capture waits for an artifact
	// store that refuses it (S3 down) before it fails, kept on disk
	// meanwhile. Default 15m; at most 24h.
	StoreRetryFor time.Duration `yaml:"store_retry_for"`
	// Backends to enable, of perf, ftrace, bpftrace (Linux) and wpr
	// (Windows).
	Backends []string `yaml:"backends"`
	// PerfBinary, BpftraceBinary and WPRBinary locate the tools.
	PerfBinary     string `yaml:"perf_binary"`
	BpftraceBinary string `yaml:"bpftrace_binary"`
	WPRBinary      string `yaml:"wpr_binary"`
	// ScriptDir is the administrator's allow-list of bpftrace scripts: a
	// capture names a script in it and never carries program text.
	ScriptDir string `yaml:"script_dir"`
	// Profiles are the administrator's profiles, next to the built-in ones.
	Profiles         []capture.Profile `yaml:"profiles"`
	MaxConcurrent    int               `yaml:"max_concurrent"`
	MaxRingKB        int               `yaml:"max_ring_kb"`
	MemoryStallAbort float64           `yaml:"memory_stall_abort"`
	MemoryShortBelow float64           `yaml:"memory_short_below"`
	RequestRing      int               `yaml:"request_ring"`
	// CPUs pins recorders; empty picks the coolest half of the CPUs.
	CPUs    []int  `yaml:"cpus"`
	Nice    int    `yaml:"nice"`
	IOClass string `yaml:"io_class"`
	// Store is where sealed artifacts go: a local folder (default
	// <dir>/store) or an S3 bucket.
	Store artifact.StoreConfig `yaml:"store"`
	// Kube arms this node's Capture objects (capture_kube.go).
	Kube CaptureKubeConfig `yaml:"kube"`
}

// defaultControlSocket is in a folder of its own: the line socket's,
// /run/spikehunt, must stay open to every app (intake.DefaultLineUnix).
const defaultControlSocket = "/run/spikehunt-agent/capture.sock"

func defaultCaptureConfig() CaptureConfig {
	c := CaptureConfig{Enabled: true, Dir: "/var/lib/spikehunt/captures", Socket: defaultControlSocket,
		ScriptDir: "/etc/spikehunt/bpftrace", Nice: 10, IOClass: "idle"}
	if runtime.GOOS == "windows" {
		c.Backends = []string{capture.WPR}
		c.Dir, c.Socket, c.ScriptDir, c.IOClass = `C:\ProgramData\spikehunt\captures`, "", "", ""
	} else {
		c.Backends = []string{capture.Perf, capture.Ftrace, capture.Bpftrace}
	}
	return c
}

// startCapture builds the engine and serves its control socket. A host
// that cannot run captures (no permission for the volume or the socket)
// gets a warning and an agent without captures; a wrong configuration is
// an error.
func startCapture(ctx context.Context, cfg CaptureConfig, tracefs string, res telemetry.Resource, log *slog.Logger, reg prometheus.Registerer) (*capture.Engine, func(), error) {
	if !cfg.Enabled {
		return nil, func() {}, nil
	}
	profiles, err := capture.NewProfiles(cfg.Profiles...)
	if err != nil {
		return nil, nil, fmt.Errorf("capture.profiles: %w", err)
	}
	var backends []capture.Backend
	for _, name := range cfg.Backends {
		b, err := newBackend(name, cfg, tracefs, profiles)
		if err != nil {
			return nil, nil, err
		}
		if err := b.Check(); err != nil {
			log.Warn("capture backend not supported on this host", "backend", name, "err", err)
		}
		backends = append(backends, b)
	}
	if cfg.Store.Local == nil && cfg.Store.S3 == nil {
		dir := filepath.Join(cfg.Dir, "store")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			log.Warn("captures disabled", "err", err)
			return nil, func() {}, nil
		}
		cfg.Store.Local = &artifact.LocalStoreConfig{Dir: dir}
	}
	store, err := artifact.OpenStore(ctx, cfg.Store)
	if errors.Is(err, capture.ErrInvalid) {
		return nil, nil, fmt.Errorf("capture.store: %w", err)
	}
	if err != nil {
		log.Warn("captures disabled: the artifact store does not open", "err", err)
		return nil, func() {}, nil
	}
	eng, err := capture.NewEngine(capture.EngineConfig{
		Store: store,
		Dir:   cfg.Dir, Resource: capture.HostIdentity{Host: res.HostName, Node: res.NodeName, HWClass: res.HWClass},
		Backends: backends, MaxConcurrent: cfg.MaxConcurrent, MaxRingKB: cfg.MaxRingKB,
		MemoryStallAbort: cfg.MemoryStallAbort, MemoryShortBelow: cfg.MemoryShortBelow, RequestRing: cfg.RequestRing, FireEvery: cfg.FireEvery, FireBurst: cfg.FireBurst,
		AnalyzeTimeout: cfg.AnalyzeTimeout, StoreRetryFor: cfg.StoreRetryFor,
		Govern: capture.GovernConfig{CPUs: cfg.CPUs, Nice: cfg.Nice, IOClass: cfg.IOClass}, Log: log,
	})
	if errors.Is(err, capture.ErrInvalid) {
		store.Close()
		return nil, nil, fmt.Errorf("capture: %w", err)
	}
	if err != nil {
		store.Close()
		log.Warn("captures disabled", "err", err)
		return nil, func() {}, nil
	}
	if err := eng.Register(reg); err != nil {
		return nil, nil, err
	}
	stop := func() { eng.Close(); store.Close() }
	if cfg.Socket == "" {
		return eng, stop, nil
	}
	ln, err := listenControl(cfg.Socket)
	if err != nil {
		log.Warn("capture control socket unavailable: arming by hand is off", "socket", cfg.Socket, "err", err)
		return eng, stop, nil
	}
	// The root check runs inside the cap: a refused peer holds no slot.
	srv, capped := newServer(rootPeersOnly(ln, log), eng.Handler(), controlLimits())
	go srv.Serve(capped)
	log.Info("capture engine ready", "dir", cfg.Dir, "socket", cfg.Socket, "backends", cfg.Backends)
	return eng, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		srv.Shutdown(sctx)
		cancel()
		eng.Close()
		store.Close()
		os.Remove(cfg.Socket)
	}, nil
}

// listenControl binds the control socket, owner-only: arming a recorder
// is root's decision. Its folder is made 0700 (the folders above it
// 0755, so that a shared parent such as /run stays open), and an
// existing one must be the agent's and not writable by others, or
// someone else could swap the socket for theirs.
func listenControl(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	if err := checkControlDir(dir); err != nil {
		return nil, err
	}
	// A socket left by a killed agent would refuse the bind; one that a
	// live agent answers on must not be taken over.
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("another agent serves %s", path)
	}
	os.Remove(path)
	old := umask(0o177)
	ln, err := net.Listen("unix", path)
	umask(old)
	if err != nil {
		return nil, err
	}
	return ln, os.Chmod(path, 0o600)
}

func (c CaptureConfig) validate() error {
	if !c.Enabled {
		return nil
	}
	if c.Dir == "" {
		return errors.New("capture.dir is empty")
	}
	if c.StoreRetryFor < 0 || c.StoreRetryFor > 24*time.Hour {
		return fmt.Errorf("capture.store_retry_for = %v, want 0 (the default, 15m) to 24h", c.StoreRetryFor)
	}
	if c.AnalyzeTimeout > time.Hour {
		return fmt.Errorf("capture.analyze_timeout = %v, want at most 1h (negative: no analysis)", c.AnalyzeTimeout)
	}
	if c.FireEvery != 0 && (c.FireEvery < time.Second || c.FireEvery > 24*time.Hour) {
		return fmt.Errorf("capture.fire_every = %v, want 1s–24h", c.FireEvery)
	}
	if c.FireBurst < 0 || c.FireBurst > 64 {
		return fmt.Errorf("capture.fire_burst = %d, want 1–64 (0: the default, %d)", c.FireBurst, capture.DefaultFireBurst)
	}
	for _, b := range c.Backends {
		switch b {
		case capture.Perf, capture.Ftrace, capture.Bpftrace, capture.WPR:
		default:
			return fmt.Errorf("capture.backends: unknown backend %q (perf, ftrace, bpftrace, wpr)", b)
		}
	}
	return c.Kube.validate()
}

// newBackend makes one backend; each reports on Check whether this OS and
// host can run it.
func newBackend(name string, cfg CaptureConfig, tracefs string, profiles *capture.Profiles) (capture.Backend, error) {
	switch name {
	case capture.Perf:
		return perf.New(perf.Config{Binary: cfg.PerfBinary, Profiles: profiles}), nil
	case capture.Ftrace:
		return ftrace.New(ftrace.Config{TraceFS: tracefs, Profiles: profiles}), nil
	case capture.Bpftrace:
		return bpftrace.New(bpftrace.Config{ScriptDir: cfg.ScriptDir, Binary: cfg.BpftraceBinary}), nil
	case capture.WPR:
		return wpr.New(wpr.Config{Path: cfg.WPRBinary, Profiles: profiles}), nil
	}
	return nil, fmt.Errorf("capture.backends: unknown backend %q", name)
}
