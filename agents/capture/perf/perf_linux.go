package perf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

type perfBackend struct{ cfg Config }

// New returns the perf backend: `perf record --overwrite
// --switch-output=signal`, a per-CPU ring perf keeps overwriting until
// SIGUSR2 makes it write the ring to a new file (perf 5.x and later).
// Timestamps are CLOCK_MONOTONIC (-k mono) so they map to wall-clock time.
func New(cfg Config) capture.Backend {
	if cfg.Binary == "" {
		cfg.Binary = "perf"
	}
	return &perfBackend{cfg: cfg}
}

func (b *perfBackend) Name() string { return capture.Perf }

func (b *perfBackend) Check() error {
	path, err := exec.LookPath(b.cfg.Binary)
	if err != nil {
		return fmt.Errorf("%w: perf: %v (Debian: apt-get install linux-perf)", capture.ErrNotSupported, err)
	}
	if _, err := os.Stat("/proc/sys/kernel/perf_event_paranoid"); err != nil {
		return fmt.Errorf("%w: perf: the kernel has no perf events (CONFIG_PERF_EVENTS)", capture.ErrNotSupported)
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: perf: %s --version: %v: %s", capture.ErrNotSupported, path, err, firstLine(out))
	}
	return nil
}

func (b *perfBackend) New(spec capture.Spec, dir string) (capture.Recorder, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Backend != capture.Perf {
		return nil, fmt.Errorf("%w: spec for %q given to the perf backend", capture.ErrInvalid, spec.Backend)
	}
	if b.cfg.Profiles == nil {
		return nil, errors.New("perf backend: no profiles configured")
	}
	prof, err := b.cfg.Profiles.Get(capture.Perf, spec.Profile)
	if err != nil {
		return nil, err
	}
	ring := prof.RingKB
	if spec.RingKB != 0 {
		ring = spec.RingKB
	}
	if len(prof.Events) == 0 {
		return nil, fmt.Errorf("%w: perf profile %q has no events", capture.ErrInvalid, prof.Name)
	}
	return &perfRecorder{cfg: b.cfg, spec: spec, dir: dir, args: perfArgs(prof, ring, filepath.Join(dir, "perf.data")), freqHz: prof.FrequencyHz}, nil
}

// perfArgs builds the command line. The timer event gets the profile's
// frequency as an event term, so that tracepoints keep their default
// period of 1 — a global -F would sample sched_switch at 99 Hz too and
// hide most context switches.
func perfArgs(p capture.Profile, ringKB int, out string) []string {
	args := []string{"record", "--overwrite", "--switch-output=signal", "-a",
		"-m", strconv.Itoa(ringPages(ringKB)), "-k", "mono", "-o", out,
		// No build-id scan at each dump: it reads the whole file back and
		// would stand between the fire and the dump on disk.
		"--no-buildid", "--no-buildid-cache"}
	switch p.CallGraph {
	case "":
	case "fp":
		args = append(args, "-g")
	default:
		args = append(args, "--call-graph", p.CallGraph)
	}
	for _, name := range p.Events {
		e := name
		tracepoint := strings.Contains(e, ":")
		switch {
		case strings.Contains(e, "/"): // the profile spelled its own terms
		case !tracepoint && p.FrequencyHz > 0:
			e = fmt.Sprintf("%s/freq=%d/", e, p.FrequencyHz)
		case tracepoint && p.CallGraph != "" && !p.TracepointStacks:
			e += "/call-graph=no/"
		}
		args = append(args, "-e", e)
		if name == "sched:sched_switch" && p.BlockingStacks && p.CallGraph != "" && !p.TracepointStacks {
			// The same switch again, with its call chain, only where
			// the thread left sleeping (S: 1) or waiting (D: 2); a
			// preempted thread's state reads R+ (TASK_REPORT_MAX).
			args = append(args, "-e", "sched:sched_switch/call-graph="+p.CallGraph+"/", "--filter", "prev_state & 3")
		}
	}
	return args
}

// ringPages turns KiB per CPU into perf's -m page count, which must be a
// power of two: the next one up, at least two pages.
func ringPages(kb int) int {
	pages := max(kb*1024/os.Getpagesize(), 2)
	n := 1
	for n < pages {
		n <<= 1
	}
	return n
}

type perfRecorder struct {
	cfg    Config
	freqHz int // the timer event's rate: a sample is 1/freqHz of CPU time
	spec   capture.Spec
	dir    string
	args   []string

	cmd    *exec.Cmd
	pid    int32 // perf record's, kept for the analysis after it exits
	exited chan struct{}
	dumps  chan string // file names perf reports, in order
	mu     sync.Mutex
	stderr strings.Builder // what perf said that was not a dump line
	files  []string
	clock  record.Clock

	// The host's cgroups (cgroups_linux.go): where they are mounted, and
	// the CPU quotas' sampler while armed; nil where there are none.
	cgroups *cgroupMounts
	quotas  *quotaSampler
	cgNote  string
}

func (r *perfRecorder) Arm(ctx context.Context) error {
	if r.cmd != nil {
		return errors.New("perf: already armed")
	}
	cmd := exec.Command(r.cfg.Binary, r.args...)
	cmd.Dir = r.dir
	// Its own process group: a terminal's ^C must not reach perf before
	// the agent has dumped the ring.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	cmd.Stdout = io.Discard
	r.clock = capture.MonotonicClock()
	if err := r.spec.StartProcess(cmd); err != nil {
		return fmt.Errorf("%w: start perf: %v", capture.ErrNotSupported, err)
	}
	r.cmd = cmd
	r.pid = int32(cmd.Process.Pid)
	r.exited = make(chan struct{})
	r.dumps = make(chan string, 16)
	go r.readStderr(errPipe)
	go func() { cmd.Wait(); close(r.exited) }()
	if _, err := r.spec.GovernProcess(cmd.Process.Pid); err != nil {
		r.Disarm()
		return fmt.Errorf("perf: govern: %w", err)
	}
	// Armed means the events are open: perf holds one perf_event fd per
	// event and CPU once recording has begun.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if n, _ := countPerfEventFDs(cmd.Process.Pid); n > 0 {
			r.watchCgroups()
			return nil
		}
		select {
		case <-r.exited:
			return fmt.Errorf("perf record exited while arming: %s", r.said())
		case <-ctx.Done():
			r.Disarm()
			return fmt.Errorf("perf record did not start recording: %w (perf said: %s)", ctx.Err(), r.said())
		case <-tick.C:
		}
	}
}

func (r *perfRecorder) readStderr(rd io.Reader) {
	sc := bufio.NewScanner(rd)
	for sc.Scan() {
		line := sc.Text()
		if f, ok := parsePerfDump(line); ok {
			r.dumps <- f
			continue
		}
		r.mu.Lock()
		if r.stderr.Len() < 4096 {
			r.stderr.WriteString(line)
			r.stderr.WriteByte('\n')
		}
		r.mu.Unlock()
	}
	close(r.dumps)
}

func (r *perfRecorder) said() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.TrimSpace(r.stderr.String())
}

// parsePerfDump recognizes perf's "[ perf record: Dump <path> ]", which it
// prints after the file is complete.
func parsePerfDump(line string) (string, bool) {
	const pre, post = "[ perf record: Dump ", " ]"
	if !strings.HasPrefix(line, pre) || !strings.HasSuffix(line, post) {
		return "", false
	}
	f := strings.TrimSuffix(strings.TrimPrefix(line, pre), post)
	return f, f != ""
}

// Fire makes perf write the ring and waits for the file.
func (r *perfRecorder) Fire(ctx context.Context) error {
	if r.cmd == nil {
		return errors.New("perf: fire before arm")
	}
	if err := r.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		return fmt.Errorf("perf: signal dump: %w", err)
	}
	err := r.awaitDump(ctx)
	if r.quotas != nil {
		// After the dump: the fire's latency to disk is perf's alone.
		r.quotas.Fire()
	}
	return err
}

// watchCgroups finds the cgroup hierarchies and starts sampling the CPU
// quotas; without them the verdicts name no cgroup, and a note says why.
func (r *perfRecorder) watchCgroups() {
	m, err := mountedCgroups()
	if err != nil {
		r.cgNote = "cgroups: not read, the verdicts name no cgroup nor throttling: " + err.Error()
		return
	}
	r.cgroups = &m
	r.quotas = newQuotaSampler(m, r.spec.Pre)
	r.quotas.Start()
}

func (r *perfRecorder) awaitDump(ctx context.Context) error {
	select {
	case f, ok := <-r.dumps:
		if !ok {
			return fmt.Errorf("perf exited before dumping: %s", r.said())
		}
		r.files = append(r.files, filepath.Base(f))
		return nil
	case <-r.exited:
		// The dump line may have raced the exit.
		select {
		case f, ok := <-r.dumps:
			if ok {
				r.files = append(r.files, filepath.Base(f))
				return nil
			}
		default:
		}
		return fmt.Errorf("perf exited before dumping: %s", r.said())
	case <-ctx.Done():
		return fmt.Errorf("perf: waiting for the dump: %w", ctx.Err())
	}
}

// Collect stops perf, which writes what it gathered since the last dump
// (the post-window) to one more file, and counts lost events.
func (r *perfRecorder) Collect(ctx context.Context) (capture.Result, error) {
	if r.cmd == nil {
		return capture.Result{}, errors.New("perf: collect before arm")
	}
	r.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-r.exited:
	case <-ctx.Done():
		r.Disarm()
		return capture.Result{}, fmt.Errorf("perf did not stop: %w", ctx.Err())
	}
	for f := range r.dumps {
		r.files = append(r.files, filepath.Base(f))
	}
	if r.quotas != nil {
		r.quotas.Stop()
		r.cgNote = r.quotas.note()
	}
	if len(r.files) == 0 {
		return capture.Result{}, fmt.Errorf("perf wrote nothing: %s", r.said())
	}
	res := capture.Result{Files: r.files, Clock: r.clock,
		Notes: []string{fmt.Sprintf("perf: %d dumps; the first holds the ring at fire time (the pre-window), the rest what followed", len(r.files))}}
	if r.cgNote != "" {
		res.Notes = append(res.Notes, r.cgNote)
	}
	for _, f := range r.files {
		n, err := perfLost(ctx, r.cfg.Binary, filepath.Join(r.dir, f))
		if err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("lost events of %s unknown: %v", f, err))
			continue
		}
		res.Lost += n
	}
	return res, nil
}

// perfLost sums the PERF_RECORD_LOST records of a file.
func perfLost(ctx context.Context, bin, file string) (uint64, error) {
	out, err := exec.CommandContext(ctx, bin, "script", "-i", file, "--show-lost-events", "-F", "cpu").Output()
	if err != nil {
		return 0, fmt.Errorf("perf script: %w", err)
	}
	return parsePerfLost(out), nil
}

// parsePerfLost sums N over lines "… PERF_RECORD_LOST lost N".
func parsePerfLost(out []byte) uint64 {
	var sum uint64
	for line := range strings.Lines(string(out)) {
		i := strings.Index(line, "PERF_RECORD_LOST lost ")
		if i < 0 {
			continue
		}
		f := strings.Fields(line[i+len("PERF_RECORD_LOST lost "):])
		if len(f) == 0 {
			continue
		}
		if n, err := strconv.ParseUint(f[0], 10, 64); err == nil {
			sum += n
		}
	}
	return sum
}

func (r *perfRecorder) Disarm() error {
	if r.quotas != nil {
		r.quotas.Stop()
	}
	if r.cmd == nil || r.cmd.Process == nil {
		return nil
	}
	select {
	case <-r.exited:
		return nil
	default:
	}
	r.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-r.exited:
	case <-time.After(5 * time.Second):
		r.cmd.Process.Kill()
		<-r.exited
	}
	return nil
}

// countPerfEventFDs counts a process's perf_event file descriptors.
func countPerfEventFDs(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == "anon_inode:[perf_event]" {
			n++
		}
	}
	return n, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}
