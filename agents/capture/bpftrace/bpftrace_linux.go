package bpftrace

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// The bpftrace recorder runs one script of the allow-listed folder as a
// child process and keeps its output, not its events: a script summarizes
// each second into maps (histograms, counts) and prints them between
// marker lines (see bpftraceMarker). The recorder reads the child's stdout
// all the time, so that bpftrace never blocks on a full pipe, and keeps
// the blocks of the last Spec.Pre in memory; Fire writes them out.
//
// Lifecycle hazards: Arm starts bpftrace and two goroutines that read its
// stdout and stderr until it exits; a third waits for it. Collect and
// Disarm stop it (SIGINT, then SIGKILL after StopGrace), which ends all
// three. bpftrace runs in its own process group, with SIGKILL as its
// parent-death signal, so an agent that dies does not leave it running.
//
// Needs bpftrace 0.9 or later (reading the program from stdin, "-B line")
// running as root, and whatever the script itself needs (irq_duration:
// the irq tracepoints, present on every kernel bpftrace supports).
type bpftraceBackend struct{ cfg Config }

// New returns the bpftrace backend.
func New(cfg Config) capture.Backend {
	if cfg.Binary == "" {
		cfg.Binary = "bpftrace"
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultBpftraceMaxBytes
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = defaultBpftraceGrace
	}
	return &bpftraceBackend{cfg: cfg}
}

func (b *bpftraceBackend) Name() string { return capture.Bpftrace }

func (b *bpftraceBackend) Check() error {
	if err := b.cfg.validate(); err != nil {
		return err
	}
	path, err := exec.LookPath(b.cfg.Binary)
	if err != nil {
		return fmt.Errorf("%w: bpftrace: %v (Debian: apt-get install bpftrace)", capture.ErrNotSupported, err)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: bpftrace runs only as root", capture.ErrNotSupported)
	}
	if err := bpftraceCheckDir(b.cfg.ScriptDir); err != nil {
		return err
	}
	if out, err := exec.Command(path, "--version").CombinedOutput(); err != nil {
		return fmt.Errorf("%w: bpftrace: %s --version: %v: %s", capture.ErrNotSupported, path, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (b *bpftraceBackend) New(spec capture.Spec, dir string) (capture.Recorder, error) {
	if err := b.cfg.validate(); err != nil {
		return nil, err
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Backend != capture.Bpftrace {
		return nil, fmt.Errorf("%w: spec for %q given to the bpftrace backend", capture.ErrInvalid, spec.Backend)
	}
	if spec.Profile != "" && spec.Profile != "default" {
		return nil, fmt.Errorf("%w: bpftrace runs a script; profile %q does not apply", capture.ErrInvalid, spec.Profile)
	}
	if spec.RingKB != 0 {
		return nil, fmt.Errorf("%w: bpftrace keeps interval summaries, not a ring of events; a ring size does not apply", capture.ErrInvalid)
	}
	program, err := loadBpftraceScript(b.cfg.ScriptDir, spec.Script)
	if err != nil {
		return nil, err
	}
	return &bpftraceRecorder{cfg: b.cfg, spec: spec, dir: dir, program: program}, nil
}

// bpftraceCheckDir checks the allow-listed folder. The agent runs what is
// in it as root, so root must own it and no one else may write it: nor
// the folders above it, whose owner could swap the whole folder (a
// folder with the sticky bit, such as /tmp, is safe: only an entry's
// owner may rename it).
func bpftraceCheckDir(dir string) error {
	if dir == "" {
		return fmt.Errorf("%w: bpftrace: no script folder is configured", capture.ErrNotSupported)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%w: bpftrace script folder: %v", capture.ErrNotSupported, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: bpftrace script folder %s is not a directory", capture.ErrNotSupported, dir)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: bpftrace script folder %s is writable by group or others (mode %o): chmod go-w %s", capture.ErrNotSupported, dir, st.Mode().Perm(), dir)
	}
	if err := rootOwned(st, "bpftrace script folder", dir); err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%w: bpftrace script folder: %v", capture.ErrNotSupported, err)
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		pst, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%w: bpftrace script folder: %v", capture.ErrNotSupported, err)
		}
		if pst.Mode().Perm()&0o022 != 0 && pst.Mode()&fs.ModeSticky == 0 {
			return fmt.Errorf("%w: %s, above the bpftrace script folder %s, is writable by group or others (mode %o): whoever can write it can replace the folder; chmod go-w %s", capture.ErrNotSupported, p, dir, pst.Mode().Perm(), p)
		}
		if err := rootOwned(pst, "folder above the bpftrace script folder", p); err != nil {
			return err
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// rootOwned refuses what uid 0 does not own: the agent runs the scripts
// as root, and whoever owns a file or folder may change its mode and so
// its contents.
func rootOwned(fi fs.FileInfo, what, path string) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: %s %s: no owner to check", capture.ErrNotSupported, what, path)
	}
	if st.Uid != 0 {
		return fmt.Errorf("%w: %s %s is owned by uid %d, not root: chown root %s (the agent runs its scripts as root)", capture.ErrNotSupported, what, path, st.Uid, path)
	}
	return nil
}

// loadBpftraceScript reads ScriptDir/<name>.bt through an os.Root, so that
// neither the name nor a symlink in the folder can reach a file outside
// it, and returns its text. The recorder hands bpftrace this text rather
// than the path, so the file cannot change between check and run.
func loadBpftraceScript(dir, name string) ([]byte, error) {
	if err := capture.ValidName("script", name); err != nil {
		return nil, err
	}
	if err := bpftraceCheckDir(dir); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: bpftrace script folder: %v", capture.ErrNotSupported, err)
	}
	defer root.Close()
	f, err := root.Open(name + ".bt")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no bpftrace script %q in %s (have %v)", capture.ErrInvalid, name, dir, bpftraceScripts(dir))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: bpftrace script %q: %v (a script must be a file inside %s)", capture.ErrInvalid, name, err, dir)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("bpftrace script %q: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: bpftrace script %q is not a regular file", capture.ErrInvalid, name)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%w: bpftrace script %s is writable by group or others (mode %o): chmod go-w it", capture.ErrNotSupported, filepath.Join(dir, name+".bt"), st.Mode().Perm())
	}
	if err := rootOwned(st, "bpftrace script", filepath.Join(dir, name+".bt")); err != nil {
		return nil, err
	}
	program, err := io.ReadAll(io.LimitReader(f, MaxBpftraceScriptBytes+1))
	if err != nil {
		return nil, fmt.Errorf("bpftrace script %q: %w", name, err)
	}
	if len(program) > MaxBpftraceScriptBytes {
		return nil, fmt.Errorf("%w: bpftrace script %q is over %d bytes", capture.ErrInvalid, name, MaxBpftraceScriptBytes)
	}
	return program, nil
}

// bpftraceScripts lists the names a request may use.
func bpftraceScripts(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".bt"); ok && capture.ValidName("script", n) == nil {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

type bpftraceRecorder struct {
	cfg     Config
	spec    capture.Spec
	dir     string
	program []byte

	cmd    *exec.Cmd
	exited chan struct{}
	flight *bpftraceFlight
	clock  record.Clock
	fired  bool
	killed bool
	files  []string

	mu   sync.Mutex
	said []byte // the start of bpftrace's stderr
}

func (r *bpftraceRecorder) scriptFile() string { return "bpftrace-" + r.spec.Script + ".bt" }

func (r *bpftraceRecorder) Arm(ctx context.Context) error {
	if r.cmd != nil {
		return errors.New("bpftrace: already armed")
	}
	// "-" reads the program from stdin: the text checked in New, not
	// whatever the path holds by now.
	cmd := exec.Command(r.cfg.Binary, "-B", "line", "-")
	cmd.Stdin = bytes.NewReader(r.program)
	cmd.Dir = r.dir
	// Its own process group: a terminal's ^C must not stop it before the
	// agent has the last interval.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	r.flight = newBpftraceFlight(r.spec.Pre, r.cfg.MaxBytes, time.Now)
	r.clock = capture.MonotonicClock()
	if err := r.spec.StartProcess(cmd); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("%w: start bpftrace: %v", capture.ErrNotSupported, err)
		}
		return fmt.Errorf("start bpftrace: %w", err)
	}
	r.cmd = cmd
	r.exited = make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		bpftraceReadLines(stdout, r.flight.Line)
	}()
	go func() {
		defer readers.Done()
		bpftraceReadLines(stderr, r.stderrLine)
	}()
	go func() {
		// Wait closes the pipes: only after both readers reached EOF.
		readers.Wait()
		cmd.Wait()
		close(r.exited)
	}()
	// bpftrace starts with one thread; those it makes later inherit
	// the affinity, nice level and IO class.
	if _, err := r.spec.GovernProcess(cmd.Process.Pid); err != nil {
		r.stop(context.Background())
		return fmt.Errorf("bpftrace: govern: %w", err)
	}
	// bpftrace prints "Attaching N probes..." just before it attaches
	// them, back to back, and exits if one fails. The first interval
	// marker comes a whole interval after the interval probe attached,
	// long after the rest: that is the proof the probes are live, and
	// why Arm takes about a second.
	for _, step := range []struct {
		ch   chan struct{}
		what string
	}{{r.flight.attaching, "attaching its probes"}, {r.flight.firstMark, "printing its first interval"}} {
		select {
		case <-step.ch:
		case <-r.exited:
			return fmt.Errorf("bpftrace exited before %s: %s", step.what, r.stderrText())
		case <-ctx.Done():
			r.stop(context.Background())
			return fmt.Errorf("bpftrace: waiting for it to start %s: %w (bpftrace said: %s)", step.what, ctx.Err(), r.stderrText())
		}
	}
	// The artifact keeps the program that ran, byte for byte.
	if err := writeSynced(filepath.Join(r.dir, r.scriptFile()), r.program); err != nil {
		r.stop(context.Background())
		return fmt.Errorf("bpftrace: %w", err)
	}
	r.files = append(r.files, r.scriptFile())
	return nil
}

func (r *bpftraceRecorder) stderrLine(line []byte, cut bool) {
	if n, ok := bpftraceLostLine(line); ok {
		r.flight.AddLost(n)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.said) < 8<<10 {
		r.said = append(r.said, line...)
		if cut {
			r.said = append(r.said, "…\n"...)
		}
	}
}

func (r *bpftraceRecorder) stderrText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.said) == 0 {
		return "(nothing on stderr)"
	}
	return strings.TrimSpace(string(r.said))
}

// Fire writes the blocks of the pre-window to bpftrace-pre.txt. The
// interval running at fire time is not in it: it ends up as the first
// block of the post-window.
func (r *bpftraceRecorder) Fire(ctx context.Context) error {
	if r.cmd == nil {
		return errors.New("bpftrace: fire before arm")
	}
	if r.fired {
		return errors.New("bpftrace: already fired")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bpftrace: fire: %w", err)
	}
	blocks := r.flight.Fire()
	r.fired = true
	head := fmt.Appendf(nil, "# spikehunt bpftrace capture %s: script %s, pre-window %v, %d interval blocks\n%s",
		r.spec.ID, r.spec.Script, r.spec.Pre, len(blocks), bpftraceFileNote)
	if err := writeSynced(filepath.Join(r.dir, BpftracePreFile), appendBpftraceBlocks(head, blocks)); err != nil {
		return fmt.Errorf("bpftrace: %w", err)
	}
	r.files = append(r.files, BpftracePreFile)
	return nil
}

const bpftraceFileNote = "# Each block is one interval of the script's maps. \"received\" is the agent's wall clock when the block\n" +
	"# arrived; the number after \"begin\" is CLOCK_MONOTONIC ns when the script printed it (the interval's end).\n"

// Collect stops bpftrace, which prints the last, partial interval on its
// way out, writes the blocks since Fire to bpftrace-post.txt and reports
// the events bpftrace lost.
func (r *bpftraceRecorder) Collect(ctx context.Context) (capture.Result, error) {
	if r.cmd == nil {
		return capture.Result{}, errors.New("bpftrace: collect before arm")
	}
	if !r.fired {
		if err := r.Fire(ctx); err != nil {
			r.Disarm()
			return capture.Result{}, err
		}
	}
	stoppedEarly := false
	select {
	case <-r.exited:
		stoppedEarly = true
	default:
	}
	r.stop(ctx)
	blocks, tally := r.flight.Finish()
	head := fmt.Appendf(nil, "# spikehunt bpftrace capture %s: script %s, post-window %v, %d interval blocks\n%s",
		r.spec.ID, r.spec.Script, r.spec.Post, len(blocks), bpftraceFileNote)
	if err := writeSynced(filepath.Join(r.dir, BpftracePostFile), appendBpftraceBlocks(head, blocks)); err != nil {
		return capture.Result{}, fmt.Errorf("bpftrace: %w", err)
	}
	r.files = append(r.files, BpftracePostFile)
	res := capture.Result{Files: slices.Clone(r.files), Lost: tally.Lost, Clock: r.clock,
		Notes: []string{fmt.Sprintf("bpftrace: script %s; the post file holds %d interval blocks", r.spec.Script, len(blocks))}}
	if tally.Lost > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("bpftrace: lost %d output events (its perf ring overflowed): some interval blocks are incomplete", tally.Lost))
	}
	if tally.Dropped > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("bpftrace: %d interval blocks not kept, to stay within %d bytes per window", tally.Dropped, r.cfg.MaxBytes))
	}
	if tally.Truncated > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("bpftrace: %d interval blocks truncated (marked in the files)", tally.Truncated))
	}
	if len(tally.Unprinted) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("bpftrace: interval %v missing before the last, partial one: bpftrace stopped before it printed it", tally.Unprinted))
	}
	if tally.Stray > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("bpftrace: %d output lines outside interval blocks were not kept", tally.Stray))
	}
	if stoppedEarly {
		res.Notes = append(res.Notes, fmt.Sprintf("bpftrace exited before collect (%v): %s", r.cmd.ProcessState, r.stderrText()))
	} else if r.killed {
		res.Notes = append(res.Notes, fmt.Sprintf("bpftrace did not exit within %v of SIGINT and was killed: the last, partial interval is missing", r.cfg.StopGrace))
	}
	return res, nil
}

// Disarm stops bpftrace; the blocks it printed are not written.
func (r *bpftraceRecorder) Disarm() error {
	if r.cmd == nil {
		return nil
	}
	r.stop(context.Background())
	return nil
}

// stop asks bpftrace to exit (SIGINT runs its END probe, which prints the
// last interval) and kills its process group when it has not within the
// grace or by ctx's end. It returns once the output is read to its end.
func (r *bpftraceRecorder) stop(ctx context.Context) {
	select {
	case <-r.exited:
		return
	default:
	}
	r.cmd.Process.Signal(syscall.SIGINT)
	grace := time.NewTimer(r.cfg.StopGrace)
	defer grace.Stop()
	select {
	case <-r.exited:
		return
	case <-grace.C:
	case <-ctx.Done():
	}
	r.killed = true
	syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	<-r.exited
}

// bpftraceReadLines calls fn with each line of rd until EOF. A line longer
// than the reader's 64 KiB buffer comes as its start, with cut set; the
// rest of it is skipped. fn must not keep the slice.
func bpftraceReadLines(rd io.Reader, fn func(line []byte, cut bool)) {
	br := bufio.NewReaderSize(rd, 64<<10)
	skipping := false
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if !skipping {
				fn(line, true)
				skipping = true
			}
			continue
		}
		if len(line) > 0 && !skipping {
			fn(line, false)
		}
		skipping = false
		if err != nil {
			return
		}
	}
}

// writeSynced creates path (it must not exist) with data and returns once
// the file and its directory entry are on disk.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = capture.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
