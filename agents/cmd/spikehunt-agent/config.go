package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/spikehunt/spikehunt/agents/collect"
	"github.com/spikehunt/spikehunt/agents/export"
	"github.com/spikehunt/spikehunt/agents/intake"
	"github.com/spikehunt/spikehunt/agents/spool"
	"github.com/spikehunt/spikehunt/internal/memlimit"
)

// Config is the agent's configuration file. Flags override it; see flags.go.
type Config struct {
	Resource ResourceConfig `yaml:"resource"`
	Paths    PathsConfig    `yaml:"paths"`
	Collect  CollectConfig  `yaml:"collect"`
	Intake   intake.Config  `yaml:"intake"`
	Export   export.Config  `yaml:"export"`
	// Sink is kafka or otlp.
	Sink  string             `yaml:"sink"`
	Kafka export.KafkaConfig `yaml:"kafka"`
	OTLP  export.OTLPConfig  `yaml:"otlp"`
	Spool spool.Config       `yaml:"spool"`
	// Capture runs the flight recorders (capture.go).
	Capture CaptureConfig `yaml:"capture"`
	// Listen serves /metrics and /healthz.
	Listen   string        `yaml:"listen"`
	LogLevel string        `yaml:"log_level"`
	Runtime  RuntimeConfig `yaml:"runtime"`
	Debug    DebugConfig   `yaml:"debug"`
}

// RuntimeConfig tunes the Go runtime.
type RuntimeConfig struct {
	// GoMaxProcs is GOMAXPROCS (default 1, as node_exporter does). The
	// agent's work is a few milliseconds a second, done by a handful of
	// goroutines that wake in turn; with more Ps every wake-up also wakes
	// an idle thread to look for work, which costs more than the work.
	// 0 keeps Go's default: $GOMAXPROCS, else the CPUs the agent may use.
	GoMaxProcs int `yaml:"gomaxprocs"`
	// TimerSlack is how much later than asked the kernel may end the
	// agent's threads' timed sleeps (Linux; default 1ms, 0 keeps the
	// kernel's 50µs, at most 10ms). The agent's timers tick every 200 ms
	// or more, so 1 ms late is nothing to them; what it changes is the Go
	// runtime's sysmon thread, which polls every 20 µs while the agent's
	// one P is busy after a system call: with 1 ms it polls a few times
	// per busy stretch instead of a dozen, and the agent switches context
	// about 40% less (timerslack_linux.go says how it is applied).
	TimerSlack time.Duration `yaml:"timer_slack"`
	// MemoryLimitRatio is the share of the agent's cgroup memory limit
	// (the DaemonSet's limits.memory) the Go runtime may use before its
	// garbage collector works harder (default 0.9; 0 off; a GOMEMLIMIT in
	// the environment wins). internal/memlimit reads the limit.
	MemoryLimitRatio float64 `yaml:"memory_limit_ratio"`
}

// maxTimerSlack bounds runtime.timer_slack: the agent's shortest timer
// is its 200 ms drain tick.
const maxTimerSlack = 10 * time.Millisecond

// DebugConfig switches on diagnostics that cost nothing until used.
type DebugConfig struct {
	// Pprof serves /debug/pprof/ on the metrics listener. It exposes
	// internals: keep the listener on localhost when it is on.
	Pprof bool `yaml:"pprof"`
	// ClockOffsetFile, when set, is a file holding a duration (e.g. "2h",
	// "-90s") that the intake adds to the wall clock it stamps requests
	// with, re-read every second; a missing or empty file is no offset. It
	// stands in for a wall-clock step of the node in the soak
	// (tests/soak), where stepping the real clock would also step every
	// other process on the test machine. Not for production.
	ClockOffsetFile string `yaml:"-"` // the flag only: no config file should carry it
}

// ResourceConfig names the host (docs/design.md §3).
type ResourceConfig struct {
	HostName string `yaml:"host_name"` // default: the hostname
	NodeName string `yaml:"node_name"` // default: $NODE_NAME (the DaemonSet's downward API), else host_name
	HWClass  string `yaml:"hw_class"`  // default: $SPIKEHUNT_HW_CLASS, else the node label below
	// HWClassLabel is read from this node's labels through the Kubernetes
	// API when hw_class is empty and the agent runs in a cluster.
	HWClassLabel string `yaml:"hw_class_label"`
}

// PathsConfig locates the kernel's file systems (a container mounts the
// host's under /host).
type PathsConfig struct {
	ProcFS   string `yaml:"procfs"`
	SysFS    string `yaml:"sysfs"`
	CgroupFS string `yaml:"cgroupfs"`
	TraceFS  string `yaml:"tracefs"`
}

// CollectConfig sets the samplers' cadence.
type CollectConfig struct {
	Interval    time.Duration `yaml:"interval"`     // default 1s
	IRQInterval time.Duration `yaml:"irq_interval"` // per-IRQ detail, default 10s
	Disabled    []string      `yaml:"disabled"`
	DiskIgnore  string        `yaml:"disk_ignore"`
	// CgroupTop cgroups, the busiest by CPU, get series of their own each
	// interval, besides every throttled one; the rest add up to "other".
	CgroupTop int `yaml:"cgroup_top"` // default 50
	// CgroupScanLimit bounds the workload cgroups found by a walk.
	CgroupScanLimit int `yaml:"cgroup_scan_limit"` // default 2000
	// PodNames names the cgroups of the node's pods from a pod watch
	// (podnames.go).
	PodNames PodNamesConfig `yaml:"pod_names"`
}

// defaultConfig is the configuration with no file.
func defaultConfig() Config {
	return Config{
		Resource: ResourceConfig{HWClassLabel: "spikehunt.io/hw-class"},
		Paths:    PathsConfig{ProcFS: "/proc", SysFS: "/sys", CgroupFS: collect.DefaultCgroupFS, TraceFS: "/sys/kernel/tracing"},
		Collect: CollectConfig{Interval: time.Second, IRQInterval: 10 * time.Second,
			CgroupTop: collect.DefaultCgroupTop, CgroupScanLimit: collect.DefaultCgroupScanLimit},
		Intake:   intake.DefaultConfig(),
		Sink:     "kafka",
		Kafka:    export.KafkaConfig{Brokers: []string{"127.0.0.1:9092"}},
		Spool:    defaultSpool(),
		Capture:  defaultCaptureConfig(),
		Listen:   "127.0.0.1:9464",
		LogLevel: "info",
		Runtime:  RuntimeConfig{GoMaxProcs: 1, TimerSlack: time.Millisecond, MemoryLimitRatio: memlimit.DefaultRatio},
	}
}

func defaultSpool() spool.Config {
	c := spool.DefaultConfig()
	c.Dir = "/var/lib/spikehunt/spool"
	return c
}

// loadConfig reads path over the defaults; unknown keys are an error, so a
// typo does not silently keep a default.
func loadConfig(path string) (Config, error) {
	cfg := defaultConfig()
	if path == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) { // EOF: an empty file, all defaults
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// withDefaults returns c with the defaults of its components filled in
// where it leaves them zero; c itself is not changed.
func (c Config) withDefaults() Config {
	c.Intake = c.Intake.WithDefaults()
	c.Export = c.Export.WithDefaults()
	c.Spool = c.Spool.WithDefaults()
	return c
}

// Validate checks everything the agent will start with. It does not
// change c.
func (c Config) Validate() error {
	if c.Collect.Interval < 100*time.Millisecond || c.Collect.Interval > time.Minute {
		return errors.New("collect.interval must be 100ms–1m")
	}
	if c.Collect.IRQInterval < c.Collect.Interval {
		return errors.New("collect.irq_interval must be at least collect.interval")
	}
	if c.Collect.CgroupTop < 1 || c.Collect.CgroupTop > collect.MaxCgroupTop {
		return fmt.Errorf("collect.cgroup_top must be 1–%d", collect.MaxCgroupTop)
	}
	if c.Collect.CgroupScanLimit < 1 || c.Collect.CgroupScanLimit > collect.MaxCgroupScanLimit {
		return fmt.Errorf("collect.cgroup_scan_limit must be 1–%d", collect.MaxCgroupScanLimit)
	}
	if err := c.Collect.PodNames.validate(); err != nil {
		return err
	}
	if c.Runtime.GoMaxProcs < 0 {
		return errors.New("runtime.gomaxprocs must be 0 (Go's default) or more")
	}
	if c.Runtime.TimerSlack < 0 || c.Runtime.TimerSlack > maxTimerSlack {
		return fmt.Errorf("runtime.timer_slack must be 0 (the kernel's) to %v", maxTimerSlack)
	}
	if memlimit.CheckRatio(c.Runtime.MemoryLimitRatio) != nil {
		return errors.New("runtime.memory_limit_ratio must be 0 (off) to 1")
	}
	if err := c.Intake.Validate(); err != nil {
		return err
	}
	if err := c.Export.Validate(); err != nil {
		return err
	}
	switch c.Sink {
	case "kafka":
		if len(c.Kafka.Brokers) == 0 {
			return errors.New("sink kafka needs kafka.brokers")
		}
		if err := c.Kafka.Security.Validate(); err != nil {
			return err
		}
	case "otlp":
		if c.OTLP.Endpoint == "" {
			return errors.New("sink otlp needs otlp.endpoint")
		}
	default:
		return fmt.Errorf("sink %q: want kafka or otlp", c.Sink)
	}
	if err := c.Capture.validate(); err != nil {
		return err
	}
	return c.Spool.Validate()
}
