package ftrace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// The ftrace recorder needs tracefs instances (Linux 3.10), the "mono"
// trace_clock (CLOCK_MONOTONIC; Check reports a kernel without it; the
// older "perf" clock is a different, per-CPU clock), and either the
// snapshot file (CONFIG_TRACER_SNAPSHOT) or, without it, a second
// instance it relays to at fire time. It runs no process: the agent's
// own goroutine copies the rings, so there is nothing to pin or nice.
//
// Snapshot mode: Arm allocates the instance's snapshot buffer, so that
// Fire costs no allocation. Fire writes 1 to snapshot, which swaps the
// live ring and the snapshot buffer in one step: the pre-window is now in
// the snapshot buffer, frozen, and recording goes on into the other
// buffer without a gap. Collect stops recording and swaps again, so the
// snapshot file holds the post-window.
//
// Relay mode (kernels built without CONFIG_TRACER_SNAPSHOT): Arm makes a
// second instance with the same events and ring, stopped. Fire starts it
// and then stops the first, so nothing falls between the two; events of
// the few microseconds between the two writes are in both files. The
// first instance holds the pre-window, is dumped and removed at once.
//
// Either way the memory is two rings: buffer_size_kb × CPUs × 2.
type ftraceBackend struct{ cfg Config }

// New returns the ftrace backend: a tracefs instance per capture,
// with the profile's events, a sized ring and CLOCK_MONOTONIC timestamps.
func New(cfg Config) capture.Backend {
	if cfg.TraceFS == "" {
		cfg.TraceFS = DefaultTraceFS
	}
	return &ftraceBackend{cfg: cfg}
}

func (b *ftraceBackend) Name() string { return capture.Ftrace }

// Check makes and removes an instance, which proves tracefs is mounted,
// the agent may write it, and the kernel has instances.
func (b *ftraceBackend) Check() error {
	if err := ftraceMounted(b.cfg.TraceFS); err != nil {
		return err
	}
	// "spikehunt+" cannot be the name of a capture's instance.
	probe := filepath.Join(b.cfg.TraceFS, "instances", "spikehunt+check-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: ftrace: cannot make a tracefs instance: %v (the agent needs root or CAP_SYS_ADMIN, and the kernel tracefs instances, Linux 3.10)", capture.ErrNotSupported, err)
	}
	defer os.Remove(probe)
	clocks, err := os.ReadFile(filepath.Join(probe, "trace_clock"))
	if err != nil {
		return fmt.Errorf("%w: ftrace: %v", capture.ErrNotSupported, err)
	}
	if !ftraceHasClock(clocks, "mono") {
		return fmt.Errorf("%w: ftrace: trace_clock has no mono clock (%s), so the trace could not be read as wall-clock time", capture.ErrNotSupported, strings.TrimSpace(string(clocks)))
	}
	return nil
}

// ftraceHasClock finds a clock in trace_clock's "[local] global mono …".
func ftraceHasClock(list []byte, name string) bool {
	for _, f := range strings.Fields(string(list)) {
		if strings.Trim(f, "[]") == name {
			return true
		}
	}
	return false
}

func ftraceMounted(root string) error {
	for _, f := range []string{"instances", "trace_clock"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			return fmt.Errorf("%w: tracefs is not mounted at %s: mount -t tracefs nodev %s (%v)", capture.ErrNotSupported, root, root, err)
		}
	}
	return nil
}

func (b *ftraceBackend) New(spec capture.Spec, dir string) (capture.Recorder, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Backend != capture.Ftrace {
		return nil, fmt.Errorf("%w: spec for %q given to the ftrace backend", capture.ErrInvalid, spec.Backend)
	}
	if b.cfg.Profiles == nil {
		return nil, errors.New("ftrace backend: no profiles configured")
	}
	prof, err := b.cfg.Profiles.Get(capture.Ftrace, spec.Profile)
	if err != nil {
		return nil, err
	}
	if len(prof.Events) == 0 {
		return nil, fmt.Errorf("%w: ftrace profile %q has no events", capture.ErrInvalid, prof.Name)
	}
	events := make([]string, 0, len(prof.Events))
	for _, e := range prof.Events {
		p, err := ftraceEventPath(e)
		if err != nil {
			return nil, fmt.Errorf("ftrace profile %q: %w", prof.Name, err)
		}
		events = append(events, p)
	}
	ring := prof.RingKB
	if spec.RingKB != 0 {
		ring = spec.RingKB
	}
	if ring == 0 {
		return nil, fmt.Errorf("%w: ftrace profile %q has no ring size and the spec gives none", capture.ErrInvalid, prof.Name)
	}
	inst := filepath.Join(b.cfg.TraceFS, "instances", ftraceInstancePrefix+spec.ID)
	return &ftraceRecorder{
		root: b.cfg.TraceFS, dir: dir, profile: prof.Name,
		events: events, ringKB: ring, inst: inst,
		blockingStacks: prof.BlockingStacks && slices.Contains(events, ftraceSwitchEvent),
	}, nil
}

// ftraceSwitchEvent is sched_switch's directory under an instance, and
// ftraceBlockingTrigger the trigger that records a stack at each switch
// into an uninterruptible wait (TASK_UNINTERRUPTIBLE is 2 in prev_state).
const (
	ftraceSwitchEvent     = "events/sched/sched_switch"
	ftraceBlockingTrigger = "stacktrace if prev_state & 2"
)

type ftraceRecorder struct {
	root, dir string
	profile   string
	events    []string // paths under an instance: events/sched/sched_switch
	ringKB    int
	inst      string // the instance recording the pre-window
	// blockingStacks: a stacktrace trigger on sched_switch records the
	// kernel's call chain where a thread enters an uninterruptible wait.
	blockingStacks bool

	relay    string   // relay mode: the instance for the post-window
	made     []string // instances this recorder made and must remove
	snapshot bool
	armed    bool
	fired    bool
	clock    record.Clock
	preLost  []uint64 // per CPU, when known at fire (relay mode)
	files    []string
	notes    []string
}

func (r *ftraceRecorder) Arm(ctx context.Context) error {
	if r.armed {
		return errors.New("ftrace: already armed")
	}
	if err := ftraceMounted(r.root); err != nil {
		return err
	}
	r.armed = true // from here on, release() owns what exists
	if err := r.arm(ctx); err != nil {
		if rerr := r.release(); rerr != nil {
			err = fmt.Errorf("%w (and the cleanup failed: %v)", err, rerr)
		}
		return err
	}
	return nil
}

func (r *ftraceRecorder) arm(ctx context.Context) error {
	if err := r.makeInstance(r.inst); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(r.inst, "snapshot")); err == nil {
		// Allocate the snapshot buffer now, at the ring's size: this
		// first swap exchanges two empty buffers (nothing is enabled yet).
		if err := ftraceWrite(filepath.Join(r.inst, "snapshot"), "1"); err != nil {
			return fmt.Errorf("ftrace: allocate the snapshot buffer (%d KiB per CPU): %w", r.ringKB, err)
		}
		r.snapshot = true
	} else {
		r.relay = r.inst + ftraceRelaySuffix
		if err := r.makeInstance(r.relay); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ftrace: arm: %w", err)
	}
	r.clock = capture.MonotonicClock()
	if err := ftraceWrite(filepath.Join(r.inst, "tracing_on"), "1"); err != nil {
		return fmt.Errorf("ftrace: start recording: %w", err)
	}
	return nil
}

// makeInstance makes a stopped instance with the ring size, clock and
// events of the recorder.
func (r *ftraceRecorder) makeInstance(inst string) error {
	if err := os.Mkdir(inst, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("ftrace: tracefs instance %s exists: a capture with this id is armed, or an agent died and left it (rmdir it)", inst)
		}
		return fmt.Errorf("%w: ftrace: make tracefs instance: %v", capture.ErrNotSupported, err)
	}
	r.made = append(r.made, inst)
	// A new instance records at once; it must not until every event is
	// on, or the ring starts with half a profile.
	steps := []struct{ file, val, what string }{
		{"tracing_on", "0", "stop the new instance"},
		{"buffer_size_kb", strconv.Itoa(r.ringKB), fmt.Sprintf("ring of %d KiB per CPU", r.ringKB)},
		{"trace_clock", "mono", "trace_clock mono"},
		// A flight recorder overwrites its oldest events; an instance
		// inherits this option from the top level, which may be off.
		{"options/overwrite", "1", "overwrite mode"},
	}
	for _, s := range steps {
		if err := ftraceWrite(filepath.Join(inst, s.file), s.val); err != nil {
			return fmt.Errorf("ftrace: %s: %w", s.what, err)
		}
	}
	if r.blockingStacks {
		// The trigger fires after the event, on the same CPU, into this
		// instance's ring (on kernels whose stacktrace trigger writes to
		// the top-level ring instead, the instance holds no stacks and
		// the verdicts say so). A kernel without triggers records on
		// without them.
		if err := ftraceWrite(filepath.Join(inst, ftraceSwitchEvent, "trigger"), ftraceBlockingTrigger); err != nil {
			r.notes = append(r.notes, fmt.Sprintf("ftrace: no blocking stacks: %v", err))
			r.blockingStacks = false
		}
	}
	for _, ev := range r.events {
		err := ftraceWrite(filepath.Join(inst, ev, "enable"), "1")
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: ftrace profile %q: this kernel has no tracefs event %q (see %s)", capture.ErrInvalid, r.profile, strings.TrimPrefix(ev, "events/"), filepath.Join(r.root, "available_events"))
		}
		if err != nil {
			return fmt.Errorf("ftrace: enable %s: %w", ev, err)
		}
	}
	return nil
}

// Fire freezes the pre-window — a snapshot swap, or a relay to the
// second instance — and dumps it to ftrace-pre.txt.
func (r *ftraceRecorder) Fire(ctx context.Context) error {
	if !r.armed {
		return errors.New("ftrace: fire before arm")
	}
	if r.fired {
		return errors.New("ftrace: already fired")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ftrace: fire: %w", err)
	}
	start := time.Now()
	src := filepath.Join(r.inst, "snapshot")
	if r.snapshot {
		if err := ftraceWrite(src, "1"); err != nil {
			return fmt.Errorf("ftrace: snapshot: %w", err)
		}
	} else {
		if err := ftraceWrite(filepath.Join(r.relay, "tracing_on"), "1"); err != nil {
			return fmt.Errorf("ftrace: start the post-window instance: %w", err)
		}
		if err := ftraceWrite(filepath.Join(r.inst, "tracing_on"), "0"); err != nil {
			return fmt.Errorf("ftrace: stop the pre-window instance: %w", err)
		}
		src = filepath.Join(r.inst, "trace")
	}
	r.fired = true
	if err := ftraceDump(src, filepath.Join(r.dir, FtracePreFile)); err != nil {
		return err
	}
	r.files = append(r.files, FtracePreFile)
	if !r.snapshot {
		lost, err := ftraceLost(r.inst)
		if err != nil {
			return err
		}
		r.preLost = lost
		// The pre-window is on disk: give its ring back now.
		if err := ftraceRemove(r.inst); err != nil {
			return err
		}
		r.made = slices.DeleteFunc(r.made, func(s string) bool { return s == r.inst })
	}
	r.notes = append(r.notes, fmt.Sprintf("ftrace: pre-window dumped in %v", time.Since(start).Round(time.Millisecond)))
	return nil
}

// Collect stops recording, dumps the post-window to ftrace-post.txt,
// counts what the rings overwrote and removes the instances.
func (r *ftraceRecorder) Collect(ctx context.Context) (capture.Result, error) {
	if !r.armed {
		return capture.Result{}, errors.New("ftrace: collect before arm")
	}
	if !r.fired {
		if err := r.Fire(ctx); err != nil {
			return capture.Result{}, err
		}
	}
	res, err := r.collect()
	if rerr := r.release(); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return capture.Result{}, err
	}
	return res, nil
}

func (r *ftraceRecorder) collect() (capture.Result, error) {
	post := r.relay
	if r.snapshot {
		post = r.inst
	}
	if err := ftraceWrite(filepath.Join(post, "tracing_on"), "0"); err != nil {
		return capture.Result{}, fmt.Errorf("ftrace: stop recording: %w", err)
	}
	// per_cpu/*/stats describe whichever buffer is live. In snapshot mode
	// that is the post-window's now; after the second swap it is the
	// pre-window's again, whose counters stopped when Fire swapped it
	// out (tracing is off, so it gains nothing while live again).
	postLost, err := ftraceLost(post)
	if err != nil {
		return capture.Result{}, err
	}
	src := filepath.Join(post, "trace")
	mode := "relay: the pre-window instance handed over to a second one at fire; events of the microseconds between the two switches are in both files (this kernel has no CONFIG_TRACER_SNAPSHOT)"
	if r.snapshot {
		if err := ftraceWrite(filepath.Join(post, "snapshot"), "1"); err != nil {
			return capture.Result{}, fmt.Errorf("ftrace: second snapshot: %w", err)
		}
		if r.preLost, err = ftraceLost(post); err != nil {
			return capture.Result{}, err
		}
		src = filepath.Join(post, "snapshot")
		mode = "snapshot: the ring was swapped into the snapshot buffer at fire and again at collect"
	}
	if err := ftraceDump(src, filepath.Join(r.dir, FtracePostFile)); err != nil {
		return capture.Result{}, err
	}
	r.files = append(r.files, FtracePostFile)
	res := capture.Result{Files: slices.Clone(r.files), Clock: r.clock, Notes: append(r.notes, "ftrace mode "+mode)}
	for _, n := range r.preLost {
		res.Overruns += n
	}
	for _, n := range postLost {
		res.Overruns += n
	}
	if res.Overruns > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("ftrace: events overwritten or dropped per CPU: pre %v, post %v (a full ring overwrites its oldest events: the window starts later than asked on those CPUs)", r.preLost, postLost))
	}
	return res, nil
}

// Disarm removes the instances; it keeps the files already written.
func (r *ftraceRecorder) Disarm() error { return r.release() }

func (r *ftraceRecorder) release() error {
	if !r.armed {
		return nil
	}
	var errs []error
	kept := r.made[:0]
	for _, inst := range r.made {
		if err := ftraceRemove(inst); err != nil {
			errs = append(errs, err)
			kept = append(kept, inst)
		}
	}
	r.made = kept
	if len(kept) == 0 {
		r.armed = false
	}
	return errors.Join(errs...)
}

// ftraceRemove stops an instance and removes it; one that is gone is fine.
func ftraceRemove(inst string) error {
	if _, err := os.Stat(inst); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// Best effort: rmdir disables everything itself; these only make the
	// instance quiet at once if rmdir must be retried.
	ftraceWrite(filepath.Join(inst, "tracing_on"), "0")
	ftraceWrite(filepath.Join(inst, "events", "enable"), "0")
	if err := unix.Rmdir(inst); err != nil && err != unix.ENOENT {
		if err == unix.EBUSY {
			return fmt.Errorf("ftrace: remove instance %s: %w (a process has one of its files open; rmdir it when that ends)", inst, err)
		}
		return fmt.Errorf("ftrace: remove instance %s: %w", inst, err)
	}
	return nil
}

// ftraceWrite writes a control file. No O_TRUNC and no O_CREAT: truncating
// a trace file clears the ring, and a missing control file is an error.
func ftraceWrite(path, val string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(val)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", val, path, err)
	}
	return nil
}

// ftraceLost reads what each CPU's ring of an instance lost.
func ftraceLost(inst string) ([]uint64, error) {
	cpus, err := filepath.Glob(filepath.Join(inst, "per_cpu", "cpu*"))
	if err != nil {
		return nil, err
	}
	type cpuLost struct {
		cpu  int
		lost uint64
	}
	var all []cpuLost
	for _, d := range cpus {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "cpu"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "stats"))
		if err != nil {
			return nil, fmt.Errorf("ftrace: %w", err)
		}
		st, err := parseRingStats(b)
		if err != nil {
			return nil, fmt.Errorf("ftrace: %s: %w", d, err)
		}
		all = append(all, cpuLost{n, st.lost()})
	}
	slices.SortFunc(all, func(a, b cpuLost) int { return a.cpu - b.cpu })
	out := make([]uint64, 0, len(all))
	for _, c := range all {
		out = append(out, c.lost)
	}
	return out, nil
}

// ftraceDump copies a trace or snapshot file to dst and returns once the
// copy and its directory entry are on disk.
func ftraceDump(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("ftrace: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("ftrace: %w", err)
	}
	// tracefs hands out at most a page per read; a large buffer only
	// saves write calls.
	_, err = io.CopyBuffer(struct{ io.Writer }{out}, in, make([]byte, 1<<20))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = capture.SyncDir(filepath.Dir(dst))
	}
	if err != nil {
		return fmt.Errorf("ftrace: dump %s to %s: %w", src, dst, err)
	}
	return nil
}
