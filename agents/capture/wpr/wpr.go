// Package wpr is the Windows Performance Recorder backend: an ETW session in memory
// (circular) mode, driven through wpr.exe with a recording profile
// generated from the spec (wprp.go). It implements capture.Backend; the
// agent's cmd constructs it.
//
// The pre- and post-window in memory mode. WPR keeps a memory-mode ring in
// the kernel and writes it to disk only when the session stops; wpr.exe
// has no documented way to save the ring and keep recording (its -flush
// takes no file name). So Fire stops the session into pre.etl, which puts
// the pre-window on disk at once, as the DPC flood (docs/field-stories.md) asks ("stop the trace as
// soon as the problem occurs"), and then, when the spec has a post-window,
// starts a second session with the same profile; Collect stops that one
// into post.etl. The price is a gap between the two files, while wpr
// writes and merges pre.etl and starts the second session: Fire measures
// an upper bound and the capture's notes say it. The alternative, a marker
// at Fire and one stop after the post-window, has no gap but leaves
// nothing on disk until the post-window ends (on a host that may crash)
// and lets the post-window overwrite the pre-window in the ring.
//
// Each capture runs under its own instance name (spikehunt-<id>), which
// WPR uses to name the ETW sessions, so captures do not stop or cancel
// each other's, nor an operator's own `wpr -start`. Windows 10 and later
// allow several kernel (system) sessions at once; older systems allow one.
//
// wpr.exe needs an elevated (Administrator) agent.
package wpr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// Config configures the Windows Performance Recorder backend.
type Config struct {
	// Path is wpr.exe. "" finds "wpr.exe" on PATH; Windows 10 and later
	// ship it in System32. Set an absolute path to be sure which copy runs
	// (the Windows Performance Toolkit's is often newer).
	Path string
	// Profiles are the named profiles a spec may ask for; nil is the
	// built-in ones.
	Profiles *capture.Profiles
	// CPUs is the number of logical processors ETW allocates buffers
	// for, which bounds how small a ring may be; 0 is runtime.NumCPU().
	// Set it when the agent runs with an affinity mask narrower than the
	// machine.
	CPUs int
	// Timeout bounds each wpr command; 0 is DefaultWPRTimeout. -stop
	// writes the ring into an .etl and merges it, seconds for a large ring.
	Timeout time.Duration
	// ManagedSymbols lets -stop generate the NGEN PDBs that resolve .NET
	// frames, in <file>.etl.NGENPDB next to the trace (wpr's own default;
	// that folder is not part of the capture's files). Off, spikehunt
	// passes -skipPdbGen: the generation can take tens of seconds, which
	// delays the pre-window's dump and widens the gap before the
	// post-window. Turn it on for .NET services whose stacks matter.
	ManagedSymbols bool
}

// DefaultWPRTimeout bounds one wpr command.
const DefaultWPRTimeout = 5 * time.Minute

// Validate checks the bounds.
func (c Config) Validate() error {
	if c.CPUs < 0 || c.CPUs > capture.MaxCPUList {
		return fmt.Errorf("%w: wpr: %d CPUs is outside [0, %d]", capture.ErrInvalid, c.CPUs, capture.MaxCPUList)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("%w: wpr: negative command timeout %v", capture.ErrInvalid, c.Timeout)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Path == "" {
		c.Path = "wpr.exe"
	}
	if c.CPUs == 0 {
		c.CPUs = runtime.NumCPU()
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultWPRTimeout
	}
	return c
}

type wprBackend struct {
	cfg Config
	err error // from cfg.Validate, returned by New
}

// New returns the Windows Performance Recorder backend. It builds on
// every OS, since it only runs an executable; Check says whether this
// machine has one.
func New(cfg Config) capture.Backend {
	b := &wprBackend{cfg: cfg.withDefaults(), err: cfg.Validate()}
	if b.cfg.Profiles == nil && b.err == nil {
		b.cfg.Profiles, b.err = capture.NewProfiles()
	}
	return b
}

func (b *wprBackend) Name() string { return capture.WPR }

func (b *wprBackend) Check() error {
	if _, err := exec.LookPath(b.cfg.Path); err != nil {
		hint := "wpr.exe ships with Windows 10 and later, in System32; elsewhere install the Windows Performance Toolkit (Windows ADK) and set its path"
		if runtime.GOOS != "windows" {
			hint = "WPR runs only on Windows; this host runs " + runtime.GOOS
		}
		return fmt.Errorf("%w: wpr: %v (%s)", capture.ErrNotSupported, err, hint)
	}
	return nil
}

func (b *wprBackend) New(spec capture.Spec, dir string) (capture.Recorder, error) {
	if b.err != nil {
		return nil, b.err
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Backend != capture.WPR {
		return nil, fmt.Errorf("%w: spec for %q given to the wpr backend", capture.ErrInvalid, spec.Backend)
	}
	prof, err := b.cfg.Profiles.Get(capture.WPR, spec.Profile)
	if err != nil {
		return nil, err
	}
	ring := prof.RingKB
	if spec.RingKB != 0 {
		ring = spec.RingKB
	}
	if ring == 0 {
		return nil, fmt.Errorf("%w: WPR profile %q has no ring size", capture.ErrInvalid, prof.Name)
	}
	wprp, err := wprProfileXML(prof, ring, b.cfg.CPUs, fmt.Sprintf("spikehunt capture %s, profile %s", spec.ID, prof.Name))
	if err != nil {
		return nil, err
	}
	// wpr.exe runs with our working directory but is handed paths to
	// write; absolute ones leave no doubt where.
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("wpr: capture dir %s: %w", dir, err)
	}
	return &wprRecorder{
		cfg: b.cfg, spec: spec, dir: abs, ringKB: ring, wprp: wprp,
		instance: "spikehunt-" + spec.ID,
		skipPdb:  !b.cfg.ManagedSymbols,
	}, nil
}

// Files a WPR recorder writes into its dir.
const (
	wprProfileFile = "spikehunt.wprp"
	wprPreFile     = "pre.etl"
	wprPostFile    = "post.etl"
	wprLogFile     = "wpr.log" // every wpr command and what it printed
)

type wprState int

const (
	wprNew   wprState = iota
	wprArmed          // a session records the pre-window
	wprFired          // pre.etl is on disk; a second session may record the post-window
	wprDone           // collected or disarmed
)

type wprRecorder struct {
	cfg      Config
	spec     capture.Spec
	dir      string
	instance string // wpr -instancename: names the ETW sessions
	ringKB   int
	wprp     []byte
	skipPdb  bool // pass -skipPdbGen to -stop

	state   wprState
	running bool // a session of ours is live and must be stopped or cancelled
	files   []string
	lost    uint64
	// unknownLost names the sessions whose lost-event count wpr did not
	// print in a form we read.
	unknownLost []string
	notes       []string
	logFailed   bool
}

func (r *wprRecorder) startArgs() []string {
	return []string{"-start", filepath.Join(r.dir, wprProfileFile) + "!" + wprProfileName, "-recordtempto", r.dir}
}

func (r *wprRecorder) Arm(ctx context.Context) error {
	if r.state != wprNew {
		return errors.New("wpr: Arm called twice, or after Disarm")
	}
	if err := os.WriteFile(filepath.Join(r.dir, wprProfileFile), r.wprp, 0o644); err != nil {
		return fmt.Errorf("wpr: write the recording profile: %w", err)
	}
	r.files = append(r.files, wprProfileFile)
	if _, err := r.run(ctx, r.startArgs()...); err != nil {
		// A start that failed halfway (the system collector up, the
		// event collector not) leaves a session behind: cancel it.
		r.run(context.Background(), "-cancel")
		return err
	}
	r.state, r.running = wprArmed, true
	return nil
}

// Fire stops the session into pre.etl and, when the spec has a
// post-window, starts a second one (see the file comment).
func (r *wprRecorder) Fire(ctx context.Context) error {
	switch r.state {
	case wprNew:
		return errors.New("wpr: fire before arm")
	case wprFired:
		return errors.New("wpr: already fired")
	case wprDone:
		return errors.New("wpr: fire after the capture ended")
	}
	// The marker puts the fire's instant into the trace, on the trace's
	// own clock. It is a convenience: the dump matters more, so a marker
	// that fails is only noted.
	if _, err := r.run(ctx, "-marker", "spikehunt fire "+r.spec.ID); err != nil {
		r.notes = append(r.notes, fmt.Sprintf("wpr: no fire marker in the trace: %v", err))
	}
	stopAt := time.Now()
	if err := r.save(ctx, wprPreFile, "spikehunt "+r.spec.ID+" pre-window"); err != nil {
		return err
	}
	r.state = wprFired
	r.notes = append(r.notes, fmt.Sprintf("wpr: %s is the pre-window: what the %d KiB memory ring held when the session was stopped at the fire; it covers less than pre=%v if events came faster than the ring holds them", wprPreFile, r.ringKB, r.spec.Pre))
	if r.spec.Post == 0 {
		return nil
	}
	if _, err := r.run(ctx, r.startArgs()...); err != nil {
		r.run(context.Background(), "-cancel")
		// The pre-window is on disk, which is what Fire promises; the
		// missing post-window is the capture's to report.
		r.notes = append(r.notes, fmt.Sprintf("wpr: no post-window: restarting the session failed: %v", err))
		return nil
	}
	r.running = true
	r.notes = append(r.notes, fmt.Sprintf("wpr: %s is the post-window, a second memory-mode session started after the stop (a post-window longer than its ring holds keeps only its end); at most %v between the two files was not recorded",
		wprPostFile, time.Since(stopAt).Round(time.Millisecond)))
	return nil
}

func (r *wprRecorder) Collect(ctx context.Context) (capture.Result, error) {
	switch r.state {
	case wprNew, wprArmed:
		return capture.Result{}, errors.New("wpr: collect before fire: nothing was dumped (Fire first, or Disarm)")
	case wprDone:
		return capture.Result{}, errors.New("wpr: already collected or disarmed")
	}
	if r.running {
		if err := r.save(ctx, wprPostFile, "spikehunt "+r.spec.ID+" post-window"); err != nil {
			return capture.Result{}, err
		}
	}
	r.state = wprDone
	res := capture.Result{
		Files: append([]string(nil), r.files...),
		Lost:  r.lost,
		// ETW stamps events with the performance counter (QPC). Each
		// .etl's header holds the session's wall-clock start and the
		// counter's frequency, from which WPA and TraceProcessing show
		// wall-clock time; an offset measured here would only repeat it
		// less precisely.
		Clock: record.Clock{Name: "QPC"},
		Notes: append([]string(nil), r.notes...),
	}
	res.Notes = append(res.Notes, "wpr: timestamps are QPC ticks; each .etl carries its own wall-clock start, which WPA uses to show wall-clock time")
	if len(r.unknownLost) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("wpr: lost events unknown for %s: wpr printed no count spikehunt could read (see %s); lost_events counts only the others",
			strings.Join(r.unknownLost, " and "), wprLogFile))
	}
	if len(r.spec.CPUs) > 0 {
		res.Notes = append(res.Notes, "wpr: CPU pinning not applied: the ETW session runs in the kernel and wpr.exe only starts and stops it")
	}
	if _, err := os.Stat(filepath.Join(r.dir, wprLogFile)); err == nil {
		res.Files = append(res.Files, wprLogFile)
	}
	return res, nil
}

func (r *wprRecorder) Disarm() error {
	defer func() { r.state = wprDone }()
	if !r.running {
		return nil
	}
	r.running = false
	_, err := r.run(context.Background(), "-cancel")
	if errors.Is(err, errWPRNotRecording) {
		return nil // gone already: nothing left to release
	}
	return err
}

// save stops the running session into file: it reads the session's lost
// events first (they vanish with it), then stops it.
func (r *wprRecorder) save(ctx context.Context, file, description string) error {
	session := strings.TrimSuffix(file, ".etl")
	var lost, buffers uint64
	var known bool
	if out, err := r.run(ctx, "-status", "collectors"); err == nil {
		lost, buffers, known = parseWPRLost(out)
	}
	path := filepath.Join(r.dir, file)
	args := []string{"-stop", path, description}
	out, err := r.run(ctx, append(args, r.stopFlags()...)...)
	if err != nil && r.skipPdb && !errors.Is(err, capture.ErrNotSupported) && !errors.Is(err, errWPRNotRecording) {
		// Older wpr.exe builds do not know -skipPdbGen and refuse the
		// whole command; the session is still running, so stop it the
		// old way rather than lose the window.
		if out2, err2 := r.run(ctx, args...); err2 == nil {
			r.skipPdb = false
			r.notes = append(r.notes, fmt.Sprintf("wpr: -stop refused -skipPdbGen (%v); stopped without it", err))
			out, err = out2, nil
		}
	}
	if err != nil {
		return err
	}
	r.running = false
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		return fmt.Errorf("wpr: -stop reported success but %s is missing or empty", file)
	}
	r.files = append(r.files, file)
	// The stop may report losses of its own (the kernel's final count,
	// after the status above); the larger count is the later one.
	if stopLost, stopBuffers, ok := parseWPRLost(out); ok {
		lost, known = max(lost, stopLost), true
		buffers = max(buffers, stopBuffers)
	}
	if buffers > 0 {
		r.notes = append(r.notes, fmt.Sprintf("wpr: %s: %d ETW buffers lost; the events in them are not in lost_events", file, buffers))
	}
	if !known {
		r.unknownLost = append(r.unknownLost, session)
		return nil
	}
	r.lost += lost
	return nil
}

func (r *wprRecorder) stopFlags() []string {
	if r.skipPdb {
		return []string{"-skipPdbGen"}
	}
	return nil
}

// errWPRNotRecording marks a wpr command that found no session of the
// instance running.
var errWPRNotRecording = errors.New("no WPR recording of this instance is running")

// wprMaxOutput caps what one wpr command's output may take in memory.
const wprMaxOutput = 1 << 20

// run runs one wpr command for this capture's instance and logs it to
// wpr.log. -instancename goes last: wpr requires it there.
func (r *wprRecorder) run(ctx context.Context, args ...string) ([]byte, error) {
	args = append(append([]string(nil), args...), "-instancename", r.instance)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.cfg.Path, args...)
	var out wprOutput
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	r.log(args, out.Bytes(), err, time.Since(start))
	if err != nil && ctx.Err() != nil {
		return out.Bytes(), fmt.Errorf("wpr %s: %w (limit %v)", args[0], ctx.Err(), r.cfg.Timeout)
	}
	if err != nil {
		return out.Bytes(), wprError(args[0], out.Bytes(), err)
	}
	return out.Bytes(), nil
}

// wprError explains a failed wpr command. The error codes are wpr's own
// HRESULTs, printed as "Error code: 0x…".
func wprError(verb string, out []byte, err error) error {
	text := wprText(out)
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: wpr %s: %v", capture.ErrNotSupported, verb, err)
	case strings.Contains(text, "0xc5585011"):
		return fmt.Errorf("%w: wpr %s: the agent is not elevated: run it as Administrator (wpr: 0xc5585011, cannot enable the system profiling policy)", capture.ErrNotSupported, verb)
	case strings.Contains(text, "0xc5583000"):
		return fmt.Errorf("wpr %s: %w (wpr: 0xc5583000)", verb, errWPRNotRecording)
	}
	return fmt.Errorf("wpr %s: %v: %s", verb, err, wprSummary(text))
}

// wprSummary is the gist of wpr's output for an error message: its
// non-empty lines, without the banner, at most 300 bytes.
func wprSummary(text string) string {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "Microsoft Windows Performance Recorder") || strings.HasPrefix(l, "Copyright") {
			continue
		}
		lines = append(lines, l)
	}
	s := strings.Join(lines, " / ")
	if s == "" {
		return "no output"
	}
	if len(s) > 300 {
		s = strings.ToValidUTF8(s[:300], "") + "…"
	}
	return s
}

func (r *wprRecorder) log(args []string, out []byte, runErr error, took time.Duration) {
	var b bytes.Buffer
	b.WriteString("$ wpr")
	for _, a := range args {
		b.WriteByte(' ')
		if a == "" || strings.ContainsAny(a, " \t\"") {
			a = strconv.Quote(a)
		}
		b.WriteString(a)
	}
	b.WriteByte('\n')
	b.WriteString(wprText(out))
	if len(out) > 0 && out[len(out)-1] != '\n' {
		b.WriteByte('\n')
	}
	status := "ok"
	if runErr != nil {
		status = runErr.Error()
	}
	fmt.Fprintf(&b, "# %s, %v\n\n", status, took.Round(time.Millisecond))
	f, err := os.OpenFile(filepath.Join(r.dir, wprLogFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		_, err = f.Write(b.Bytes())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil && !r.logFailed {
		r.logFailed = true
		r.notes = append(r.notes, fmt.Sprintf("wpr: %s is incomplete: %v", wprLogFile, err))
	}
}

// wprOutput collects a command's output up to wprMaxOutput, dropping the
// rest (a wpr that prints a megabyte has nothing more to tell).
type wprOutput struct{ b bytes.Buffer }

func (o *wprOutput) Write(p []byte) (int, error) {
	if room := wprMaxOutput - o.b.Len(); room > 0 {
		o.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (o *wprOutput) Bytes() []byte { return o.b.Bytes() }

// wprText turns wpr's output into text. Console tools on Windows may write
// UTF-16LE into a pipe; its ASCII (all we read: labels, digits, error
// codes) is the same bytes with NULs between, so dropping NULs is enough.
func wprText(out []byte) string {
	return string(bytes.ReplaceAll(out, []byte{0}, nil))
}

var (
	// `wpr -status collectors` prints, per collector,
	// "Events Lost             : 0" (and lists lost buffers if any).
	wprEventsLostRE = regexp.MustCompile(`(?im)^\s*Events Lost\s*:\s*([0-9][0-9,]*)\s*$`)
	// `wpr -status` prints "Dropped event           : 0" for the whole
	// recording; read only when no per-collector count is there.
	wprDroppedRE = regexp.MustCompile(`(?im)^\s*Dropped events?\s*:\s*([0-9][0-9,]*)\s*$`)
	// The ETW tools' warning on a trace with holes,
	// "336273 Events were lost in this trace.  Data may be unreliable."
	wprLostWarningRE = regexp.MustCompile(`(?im)^\s*([0-9][0-9,]*) Events were lost in this trace`)
	wprBuffersLostRE = regexp.MustCompile(`(?im)^\s*Buffers Lost\s*:\s*([0-9][0-9,]*)\s*$`)
)

// parseWPRLost reads lost events (and lost buffers, whose events are not
// counted) from what a wpr command printed. ok is false when the output
// has no count at all, which is "unknown", not zero: wpr's labels are
// localized on non-English Windows.
func parseWPRLost(out []byte) (events, buffers uint64, ok bool) {
	text := strings.ReplaceAll(wprText(out), "\r", "")
	sum := func(re *regexp.Regexp) (uint64, bool) {
		var total uint64
		found := false
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			n, err := strconv.ParseUint(strings.ReplaceAll(m[1], ",", ""), 10, 64)
			if err != nil {
				n = ^uint64(0) // more digits than fit: saturate, do not drop
			}
			found = true
			if total += n; total < n {
				total = ^uint64(0)
			}
		}
		return total, found
	}
	events, ok = sum(wprEventsLostRE)
	if !ok {
		events, ok = sum(wprDroppedRE)
	}
	if w, found := sum(wprLostWarningRE); found {
		events, ok = max(events, w), true
	}
	buffers, _ = sum(wprBuffersLostRE)
	return events, buffers, ok
}
