package capture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// Engine runs the host's captures: it arms recorders within the budgets,
// fires them from the latency stream (Observe) or on request, collects
// them after the post-window, writes the requests of the window beside
// the trace, seals and publishes the artifact, and aborts recorders under
// memory pressure (ObservePoints). Each armed capture has one goroutine;
// Close disarms them all and waits for them.
type Engine struct {
	cfg      EngineConfig
	backends map[string]Backend
	heat     *Heat

	anyArmed atomic.Bool // Observe's fast path
	mu       sync.Mutex
	caps     map[string]*armed
	ring     *requestRing
	wg       sync.WaitGroup
	closed   bool
	onChange []func(id string)
	m        *engineMetrics
	limit    *fireLimiter // under mu
	hits     []fireHit    // ObserveFrom's scratch, under mu
	// lastRefusalLog rate-limits the log line of a refused trigger, so
	// that a flood of untrusted requests cannot flood the log. Under mu.
	lastRefusalLog time.Time
}

// Reasons of spikehunt_capture_trigger_refused_total.
const (
	reasonUntrusted   = "untrusted_sender"
	reasonRateLimited = "rate_limited"
)

// refusalLogEvery bounds the log lines about refused triggers.
const refusalLogEvery = time.Minute

// localSender is who Observe's requests come from: the agent's own
// process, trusted.
var localSender = telemetry.Sender{Source: "local", Trusted: true}

type armed struct {
	spec   Spec
	status control.Status
	rec    Recorder
	dir    string
	watch  *watch
	fire   chan record.FireCause
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// NewEngine checks cfg and makes the work directory.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "work"), 0o750); err != nil {
		return nil, fmt.Errorf("capture dir: %w", err)
	}
	e := &Engine{cfg: cfg, backends: map[string]Backend{}, heat: NewHeat(), caps: map[string]*armed{}, m: newEngineMetrics(),
		limit: newFireLimiter(cfg.FireEvery, cfg.FireBurst)}
	for _, b := range cfg.Backends {
		e.backends[b.Name()] = b
	}
	return e, nil
}

// Backends reports each backend and whether this machine can run it.
func (e *Engine) Backends() map[string]error {
	out := map[string]error{}
	for n, b := range e.backends {
		out[n] = b.Check()
	}
	return out
}

// ErrBusy is returned when arming would exceed a budget.
var ErrBusy = errors.New("capture budget exhausted")

var errNoCapture = errors.New("no capture")

// Arm starts a capture. It returns once the recorder is recording, with
// ErrInvalid for a bad spec, ErrNotSupported for a backend this host
// cannot run, and ErrBusy when the host already runs MaxConcurrent.
func (e *Engine) Arm(ctx context.Context, spec Spec) (control.Status, error) {
	if err := spec.Validate(); err != nil {
		return control.Status{}, err
	}
	b, ok := e.backends[spec.Backend]
	if !ok {
		return control.Status{}, fmt.Errorf("%w: backend %q is not enabled on this agent (enabled: %v)", ErrNotSupported, spec.Backend, e.backendNames())
	}
	if err := b.Check(); err != nil {
		return control.Status{}, err
	}
	if spec.RingKB > e.cfg.MaxRingKB {
		return control.Status{}, fmt.Errorf("%w: ring %d KiB per CPU is over this agent's cap of %d KiB", ErrInvalid, spec.RingKB, e.cfg.MaxRingKB)
	}
	if free, err := freeBytes(e.cfg.Dir); err == nil && free < e.cfg.MinFreeBytes {
		return control.Status{}, fmt.Errorf("%w: %s has %d MiB free, under the %d MiB floor", ErrBusy, e.cfg.Dir, free>>20, e.cfg.MinFreeBytes>>20)
	}
	spec.Govern = e.cfg.Govern.gentler(spec.Govern)
	if len(spec.CPUs) > 0 {
		spec.Govern.CPUs = spec.CPUs
	} else if len(spec.Govern.CPUs) == 0 {
		spec.Govern.CPUs = e.heat.Coolest()
	}

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return control.Status{}, errors.New("capture engine closed")
	}
	if _, dup := e.caps[spec.ID]; dup {
		e.mu.Unlock()
		return control.Status{}, fmt.Errorf("%w: capture %q exists", ErrInvalid, spec.ID)
	}
	if n := e.activeLocked(); n >= e.cfg.MaxConcurrent {
		e.mu.Unlock()
		e.m.refused.Inc()
		return control.Status{}, fmt.Errorf("%w: %d captures running, the most this host allows", ErrBusy, n)
	}
	c := &armed{spec: spec, fire: make(chan record.FireCause, 1), done: make(chan struct{}),
		status: control.Status{ID: spec.ID, Backend: spec.Backend, State: "Arming"}}
	e.caps[spec.ID] = c // reserves the id and a slot while arming
	e.mu.Unlock()

	fail := func(err error) (control.Status, error) {
		e.mu.Lock()
		delete(e.caps, spec.ID)
		e.mu.Unlock()
		return control.Status{}, err
	}
	c.dir = filepath.Join(e.cfg.Dir, "work", spec.ID)
	if err := os.Mkdir(c.dir, 0o750); err != nil {
		return fail(fmt.Errorf("capture %s: %w", spec.ID, err))
	}
	rec, err := b.New(spec, c.dir)
	if err != nil {
		os.RemoveAll(c.dir)
		return fail(err)
	}
	actx, cancel := context.WithTimeout(ctx, e.cfg.ArmTimeout)
	err = rec.Arm(actx)
	cancel()
	if err != nil {
		rec.Disarm()
		os.RemoveAll(c.dir)
		return fail(fmt.Errorf("arm %s: %w", spec.ID, err))
	}
	c.rec = rec
	runCtx, runCancel := context.WithCancelCause(context.Background())
	c.cancel = runCancel
	e.mu.Lock()
	c.status.State, c.status.ArmedAt = control.Armed, e.cfg.Now()
	if spec.Trigger.Enabled() {
		c.watch = &watch{t: spec.Trigger}
		if e.ring == nil {
			e.ring = newRequestRing(e.cfg.RequestRing)
		}
	}
	e.refreshArmedLocked()
	st := c.status
	e.wg.Add(1)
	e.mu.Unlock()
	e.m.armed.Inc()
	e.cfg.Log.Info("capture armed", "id", spec.ID, "backend", spec.Backend, "profile", spec.Profile, "cpus", spec.Govern.CPUs)
	go e.run(runCtx, c)
	e.changed(spec.ID)
	return st, nil
}

// OnChange registers fn to be told the id of a capture whose state
// changed: armed, fired, or ended (Collected, Failed, Aborted, Disarmed).
// fn runs on the goroutine that made the change, after the engine's lock
// is released, so it may call Get; it must return quickly, and it may be
// told of two changes of one capture out of order: Get has the latest.
func (e *Engine) OnChange(fn func(id string)) {
	e.mu.Lock()
	e.onChange = append(e.onChange, fn)
	e.mu.Unlock()
}

func (e *Engine) changed(id string) {
	e.mu.Lock()
	fns := e.onChange
	e.mu.Unlock()
	for _, fn := range fns {
		fn(id)
	}
}

func (e *Engine) backendNames() []string {
	var out []string
	for n := range e.backends {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (e *Engine) activeLocked() int {
	n := 0
	for _, c := range e.caps {
		if !c.status.State.Terminal() {
			n++
		}
	}
	return n
}

// refreshArmedLocked keeps Observe's fast path honest: requests are kept
// and watched only while some capture is armed.
func (e *Engine) refreshArmedLocked() {
	any := false
	for _, c := range e.caps {
		if c.status.State == control.Armed || c.status.State == control.Fired {
			any = true
		}
	}
	e.anyArmed.Store(any)
}

// Observe takes one request from a caller in the agent's own process:
// trusted, and not rate-limited (the limit is for senders outside it).
// See ObserveFrom.
func (e *Engine) Observe(q *telemetry.Request) { e.ObserveFrom(q, &localSender) }

// ObserveFrom takes one request from the intake, sent by from. It is
// called on the intake's goroutines for every kept request and costs one
// atomic load while nothing is armed. Every request goes into the ring of
// the window's requests; only a trusted sender's request may fire a
// capture, at most FireBurst times at once and once more every FireEvery
// per sender. An untrusted one does not feed the triggers at all (it
// could not fire them, nor skew a p99 either way).
func (e *Engine) ObserveFrom(q *telemetry.Request, from *telemetry.Sender) {
	if !e.anyArmed.Load() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ring != nil {
		e.ring.add(q)
	}
	if !from.Trusted {
		for id, c := range e.caps {
			if c.watch != nil && c.status.State == control.Armed && c.watch.wouldMatch(q) {
				e.m.untrusted.Inc()
				e.logRefusalLocked(reasonUntrusted, id, q, from)
				break
			}
		}
		return
	}
	// Two passes: find the captures q fires, then ask the sender's
	// limiter once for all of them.
	hits := e.hits[:0]
	for _, c := range e.caps {
		if c.watch == nil || c.status.State != control.Armed {
			continue
		}
		if f, ok := c.watch.observe(q); ok {
			hits = append(hits, fireHit{c, f})
		}
	}
	e.hits = hits[:0]
	defer clear(hits) // the scratch must not keep finished captures alive
	if len(hits) == 0 {
		return
	}
	if from != &localSender && !e.limit.allow(from.Key(), e.cfg.Now()) {
		e.m.rateLimited.Inc()
		e.logRefusalLocked(reasonRateLimited, hits[0].c.spec.ID, q, from)
		return
	}
	for _, h := range hits {
		h.c.watch.fired(h.f.RequestAt)
		select {
		case h.c.fire <- h.f:
		default:
		}
	}
}

type fireHit struct {
	c *armed
	f record.FireCause
}

// logRefusalLocked logs a refused trigger, at most once a minute.
func (e *Engine) logRefusalLocked(reason, id string, q *telemetry.Request, from *telemetry.Sender) {
	now := e.cfg.Now()
	if now.Sub(e.lastRefusalLog) < refusalLogEvery {
		return
	}
	e.lastRefusalLog = now
	fix := "list the sender in intake.trigger (uids, gids or cidrs) if its requests should fire captures"
	if reason == reasonRateLimited {
		fix = fmt.Sprintf("the sender has used its burst of %d fires; it gets one more every %v (capture.fire_burst, capture.fire_every); the capture stays armed", e.cfg.FireBurst, e.cfg.FireEvery)
	}
	e.cfg.Log.Warn("capture trigger: a request met an armed capture's trigger and did not fire it",
		"reason", reason, "capture", id, "sender", from.String(), "service", q.Service, "endpoint", q.Endpoint,
		"latency", q.Duration, "fix", fix, "counted_in", "spikehunt_capture_trigger_refused_total")
}

// ObservePoints takes one sampling pass: it updates the CPU heat the
// governor pins by, and aborts every running capture when tasks stalled
// on memory for more than MemoryStallAbort of the interval while the host
// is short of memory (EngineConfig.MemoryShortBelow).
func (e *Engine) ObservePoints(pts []telemetry.Point) {
	e.heat.Observe(pts)
	stall, _ := e.heat.MemoryStall()
	if stall <= e.cfg.MemoryStallAbort {
		return
	}
	avail, err := e.cfg.MemAvailable()
	if err == nil && avail >= e.cfg.MemoryShortBelow {
		return
	}
	why := fmt.Sprintf("%.0f%% of memory available", 100*avail)
	if err != nil {
		// Unreadable: fail safe, as the stall alone used to.
		why = "available memory unknown: " + err.Error()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.caps {
		if !c.status.State.Terminal() && c.cancel != nil {
			c.cancel(fmt.Errorf("%w: memory pressure: tasks stalled %.0f%% of the last interval (limit %.0f%%), %s (limit %.0f%%)",
				errAbort, 100*stall, 100*e.cfg.MemoryStallAbort, why, 100*e.cfg.MemoryShortBelow))
		}
	}
}

var (
	errAbort  = errors.New("aborted")
	errDisarm = errors.New("disarmed")
)

// Fire fires an armed capture by hand or for the operator.
func (e *Engine) Fire(id, reason string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.caps[id]
	if !ok {
		return fmt.Errorf("%w: %w %q", ErrInvalid, errNoCapture, id)
	}
	if c.status.State != control.Armed {
		return fmt.Errorf("capture %s is %s, not Armed", id, c.status.State)
	}
	kind := "remote"
	if reason == "" {
		kind, reason = "manual", "fired by hand"
	}
	select {
	case c.fire <- record.FireCause{Kind: kind, Reason: reason, RequestAt: e.cfg.Now()}:
	default:
	}
	return nil
}

// Disarm stops a capture that has not been collected; its files are
// dropped.
func (e *Engine) Disarm(id string) error {
	e.mu.Lock()
	c, ok := e.caps[id]
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %w %q", ErrInvalid, errNoCapture, id)
	}
	if c.cancel != nil {
		c.cancel(errDisarm)
	}
	<-c.done
	return nil
}

// Get returns one capture's status.
func (e *Engine) Get(id string) (control.Status, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.caps[id]
	if !ok {
		return control.Status{}, false
	}
	return c.status, true
}

// List returns every capture the engine knows, oldest first.
func (e *Engine) List() []control.Status {
	e.mu.Lock()
	out := make([]control.Status, 0, len(e.caps))
	for _, c := range e.caps {
		out = append(out, c.status)
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ArmedAt.Before(out[j].ArmedAt) })
	return out
}

// Wait blocks until capture id ends or ctx does.
func (e *Engine) Wait(ctx context.Context, id string) (control.Status, error) {
	e.mu.Lock()
	c, ok := e.caps[id]
	e.mu.Unlock()
	if !ok {
		return control.Status{}, fmt.Errorf("%w: %w %q", ErrInvalid, errNoCapture, id)
	}
	select {
	case <-c.done:
		st, _ := e.Get(id)
		return st, nil
	case <-ctx.Done():
		return control.Status{}, ctx.Err()
	}
}

// Forget drops a finished capture from the list (its artifact stays
// where it was published).
func (e *Engine) Forget(id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.caps[id]
	if !ok {
		return fmt.Errorf("%w: %w %q", ErrInvalid, errNoCapture, id)
	}
	if !c.status.State.Terminal() {
		return fmt.Errorf("capture %s is %s: disarm it first", id, c.status.State)
	}
	delete(e.caps, id)
	return nil
}

// Close disarms every capture and waits for their goroutines.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	for _, c := range e.caps {
		if c.cancel != nil {
			c.cancel(errDisarm)
		}
	}
	e.mu.Unlock()
	e.wg.Wait()
	return nil
}

func (e *Engine) setState(c *armed, s control.State, err error) {
	e.mu.Lock()
	c.status.State = s
	if err != nil {
		c.status.Error = err.Error()
	}
	e.refreshArmedLocked()
	e.mu.Unlock()
	e.changed(c.spec.ID)
}
