package collect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// sampler reads one kernel source. Implementations live in <source>_linux.go
// (and pdh_windows.go) and register themselves in init.
type sampler interface {
	// sample reads the source once and appends to dst the points of the
	// interval since its previous successful reading (nothing the first
	// time). On error it appends nothing and keeps its previous state, so
	// the next success covers the whole gap.
	sample(dst []telemetry.Point) ([]telemetry.Point, error)
	// takeResets returns the counter resets seen since its previous call.
	takeResets() int
}

type cadence int

const (
	fastCadence cadence = iota // every Sample, 1 Hz by default
	slowCadence                // every SampleSlow: sources that cost milliseconds to read
)

type samplerSpec struct {
	name    string
	cadence cadence
	build   func(*env) (sampler, error)
}

var registry []samplerSpec

// registerSampler is called from the init function of each sampler's file.
func registerSampler(name string, c cadence, build func(*env) (sampler, error)) {
	if !slices.Contains(knownSamplers, name) {
		panic("collect: sampler " + name + " missing from knownSamplers")
	}
	registry = append(registry, samplerSpec{name: name, cadence: c, build: build})
}

// Samplers returns the names of the samplers available on this platform,
// sorted; any of them can be passed in Options.Disabled.
func Samplers() []string {
	names := make([]string, 0, len(registry))
	for _, s := range registry {
		names = append(names, s.name)
	}
	slices.Sort(names)
	return names
}

// env is what every sampler is built from.
type env struct {
	procfs, sysfs string
	tl            *timeline
	log           *slog.Logger
	diskIgnore    *regexp.Regexp
	ethtool       ethtoolSource
	cgroupfs      string
	cgroupTop     int
	cgroupLimit   int
	podNamer      PodNamer
	metrics       *selfMetrics
}

func (e *env) procPath(elem ...string) string {
	return filepath.Join(append([]string{e.procfs}, elem...)...)
}

func (e *env) sysPath(elem ...string) string {
	return filepath.Join(append([]string{e.sysfs}, elem...)...)
}

// Collector runs the enabled samplers. Build it with New; call Close when
// done (the ethtool sampler holds a socket).
//
// Sample and SampleSlow may run concurrently with each other; concurrent
// calls of the same one are serialized. Each returns a fresh slice that the
// caller owns.
type Collector struct {
	log     *slog.Logger
	metrics *selfMetrics
	fastMu  sync.Mutex
	fast    []*samplerRun
	fastLen int // points in the previous fast pass: the next one's capacity
	slowMu  sync.Mutex
	slow    []*samplerRun
	slowLen int
}

// New validates opts and builds the enabled samplers. No file is read yet:
// the first Sample is every sampler's baseline and emits only gauges.
func New(opts Options) (*Collector, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("collect options: %w", err)
	}
	opts = opts.withDefaults()
	c := &Collector{log: opts.Logger, metrics: newSelfMetrics()}
	e := &env{
		cgroupfs:    opts.CgroupFS,
		cgroupTop:   opts.CgroupTop,
		cgroupLimit: opts.CgroupScanLimit,
		podNamer:    opts.PodNamer,
		metrics:     c.metrics,
		procfs:      opts.ProcFS,
		sysfs:       opts.SysFS,
		tl:          newTimeline(opts.Clock),
		log:         opts.Logger,
		diskIgnore:  regexp.MustCompile(opts.DiskIgnore), // checked by Validate
		ethtool:     opts.ethtool,
	}
	for _, spec := range registry {
		if slices.Contains(opts.Disabled, spec.name) {
			continue
		}
		s, err := spec.build(e)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("sampler %s: %w", spec.name, err)
		}
		run := &samplerRun{name: spec.name, s: s, m: c.metrics.forSampler(spec.name)}
		if spec.cadence == slowCadence {
			c.slow = append(c.slow, run)
		} else {
			c.fast = append(c.fast, run)
		}
	}
	if len(c.fast)+len(c.slow) == 0 {
		return nil, fmt.Errorf("collect: no sampler enabled on %s/%s (available: %v)", runtime.GOOS, runtime.GOARCH, Samplers())
	}
	return c, nil
}

// Sample runs one pass over every enabled fast sampler (meant for a 1 Hz
// cadence) and returns their points.
func (c *Collector) Sample() []telemetry.Point {
	c.fastMu.Lock()
	defer c.fastMu.Unlock()
	return c.pass(c.fast, &c.fastLen)
}

// SampleSlow runs the slow samplers: the per-IRQ detail of
// /proc/interrupts, which takes milliseconds to read on a host with many
// IRQs and CPUs. Its own cadence is 10 s by default. It also rescans what
// fast samplers find by walking directories (the cgroup tree), which a
// 1 Hz pass cannot afford; they pick the result up on their next pass.
func (c *Collector) SampleSlow() []telemetry.Point {
	c.slowMu.Lock()
	defer c.slowMu.Unlock()
	for _, r := range c.fast {
		if rs, ok := r.s.(rescanner); ok {
			rs.rescan()
		}
	}
	return c.pass(c.slow, &c.slowLen)
}

// rescanner is a fast sampler whose sources are found by walking
// directories. rescan runs on SampleSlow's goroutine, possibly during the
// sampler's own sample, and hands its result over under the sampler's
// lock.
type rescanner interface {
	rescan()
}

func (c *Collector) pass(runs []*samplerRun, lastLen *int) []telemetry.Point {
	pts := make([]telemetry.Point, 0, *lastLen+*lastLen/8)
	for _, r := range runs {
		began := time.Now()
		var err error
		pts, err = r.s.sample(pts)
		r.m.observe(time.Since(began), err == nil, r.s.takeResets())
		r.report(c, err)
	}
	*lastLen = len(pts)
	return pts
}

// Run samples until ctx is done: Sample every interval and SampleSlow every
// slowInterval (defaults 1 s and 10 s when zero), calling emit with each
// non-empty batch from this goroutine. A pass that runs late only delays
// the next one: points carry their measured intervals, never the nominal.
func (c *Collector) Run(ctx context.Context, interval, slowInterval time.Duration, emit func([]telemetry.Point)) {
	if interval <= 0 {
		interval = time.Second
	}
	if slowInterval <= 0 {
		slowInterval = 10 * time.Second
	}
	send := func(pts []telemetry.Point) {
		if len(pts) > 0 {
			emit(pts)
		}
	}
	send(c.Sample())
	send(c.SampleSlow())
	// Passes tick on the agent's grid (telemetry.UntilTick), with the
	// exporter's drain: the points leave in the same wake-up. The first
	// interval, from the baseline above, is at least half a period, so
	// that no delta is taken over a sliver of time.
	first := func(d time.Duration) *time.Timer {
		now := time.Now()
		wait := telemetry.UntilTick(now, d)
		if wait < d/2 {
			wait += d
		}
		return time.NewTimer(wait)
	}
	fast, slow := first(interval), first(slowInterval)
	defer fast.Stop()
	defer slow.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-fast.C:
			fast.Reset(telemetry.UntilTick(time.Now(), interval))
			send(c.Sample())
		case <-slow.C:
			slow.Reset(telemetry.UntilTick(time.Now(), slowInterval))
			send(c.SampleSlow())
		}
	}
}

// Close releases what samplers hold. The Collector must not be used after.
func (c *Collector) Close() error {
	var errs []error
	for _, r := range slices.Concat(c.fast, c.slow) {
		if cl, ok := r.s.(io.Closer); ok {
			errs = append(errs, cl.Close())
		}
	}
	return errors.Join(errs...)
}

// samplerRun is a sampler with the state the Collector reports about it.
type samplerRun struct {
	name         string
	s            sampler
	m            samplerMetrics
	notSupported bool
	lastErr      string // "" while healthy
}

// report logs a change of state only — a missing feature once, a failure
// when it starts or its message changes, a recovery once — so that a 1 Hz
// loop never floods the log.
func (r *samplerRun) report(c *Collector, err error) {
	switch {
	case err == nil:
		if r.notSupported || r.lastErr != "" {
			c.log.Info("sampler recovered", "sampler", r.name)
		}
		r.notSupported, r.lastErr = false, ""
	case errors.Is(err, ErrNotSupported):
		if !r.notSupported {
			c.log.Info("sampler not supported on this host; it will keep checking quietly", "sampler", r.name, "reason", err.Error())
		}
		r.notSupported, r.lastErr = true, ""
	default:
		if msg := err.Error(); msg != r.lastErr {
			c.log.Warn("sampler failed", "sampler", r.name, "err", msg)
			r.lastErr = msg
		}
		r.notSupported = false
	}
	r.m.notSupported.Set(boolToFloat(r.notSupported))
}
