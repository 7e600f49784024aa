// Package capture is the agent's flight-recorder engine: the one
// interface (Backend, Recorder) that perf, ftrace, bpftrace and Windows
// Performance Recorder implement in their own packages (capture/perf,
// capture/ftrace, capture/bpftrace, capture/wpr), the Engine that arms them
// within budgets, the local trigger that fires them from the agent's own
// latency stream, the governance that keeps them from loading a struggling
// host, and the control socket's server (docs/design.md §6). The engine
// knows backends only through Backend: the agent's cmd constructs them and
// passes them in EngineConfig.Backends, so the backends import this
// package and never the reverse. Artifacts are sealed and stored by
// capture/artifact; the control API's wire types and client are
// capture/control.
//
// Lifecycle: a Backend checks the machine and makes a Recorder for one
// Spec. Arm starts the tool recording into a ring it overwrites; Fire dumps
// what the ring holds (the pre-window) and returns once the dump is on
// disk; Collect, called after the post-window, dumps again, stops the tool
// and reports the files and the events it lost; Disarm stops the tool and
// keeps nothing. A Recorder owns the child process or tracefs instance it
// made: every path out of Arm that fails releases it, and Disarm is safe
// to call at any time, twice, and after Collect.
package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/vocab"
)

// Backend names.
const (
	Perf     = vocab.BackendPerf
	Ftrace   = vocab.BackendFtrace
	Bpftrace = vocab.BackendBpftrace
	WPR      = vocab.BackendWPR
)

// ErrNotSupported marks a backend this machine cannot run (the tool is
// missing, the kernel lacks the feature, the agent lacks a privilege). The
// error wrapping it says which and how to fix it.
var ErrNotSupported = errors.New("not supported")

// ErrInvalid marks a request that is wrong in itself (an unknown backend,
// profile or script, an absurd size, a bad name): retrying cannot help.
// It is record.ErrInvalid, so that a bad name refused by a store and one
// refused by the engine are the same error.
var ErrInvalid = record.ErrInvalid

// Backend makes recorders of one kind.
type Backend interface {
	Name() string
	// Check reports whether this machine can run the backend; the error
	// wraps ErrNotSupported and says what is missing.
	Check() error
	// New validates spec against the backend and returns a recorder that
	// writes its files into dir, which exists and belongs to it alone.
	New(spec Spec, dir string) (Recorder, error)
}

// Recorder is one capture's tool. Methods are called from one goroutine.
type Recorder interface {
	// Arm starts recording and returns once the ring is live.
	Arm(ctx context.Context) error
	// Fire writes what the ring holds now — the pre-window — to the
	// recorder's dir and returns once it is on disk. Recording goes on
	// for the post-window; a tool that can only write its ring by
	// stopping (WPR in memory mode) restarts at once and says in the
	// Result's notes how long the gap was.
	Fire(ctx context.Context) error
	// Collect ends the capture after the post-window: it writes what the
	// ring gathered since Fire, stops the tool and returns the files.
	Collect(ctx context.Context) (Result, error)
	// Disarm stops the tool without keeping anything further.
	Disarm() error
}

// Analyzer is a Recorder that explains its own trace on the node, after
// Collect and before the artifact is sealed: symbols, kallsyms and build
// ids exist only there. The engine calls it with the sealed-to-be
// metadata and the window's requests; it writes its files into the
// recorder's dir and returns their names, with the summary the captures
// index keeps (record.Findings). It runs at the recorder's
// governance (CPUs, nice, IO class) and within the engine's
// AnalyzeTimeout; a failure is a note in the artifact, never a lost
// capture.
type Analyzer interface {
	Analyze(ctx context.Context, in AnalysisInput) (AnalysisOutput, error)
}

// ReadWindowFiles hands each of names in dir that exists to read, in
// order (a recorder's pre-window file, then its post-window file): what an
// Analyzer reads its trace from. A missing file is skipped; ctx's end
// stops between files.
func ReadWindowFiles(ctx context.Context, dir string, names []string, read func(io.Reader) error) error {
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := os.Open(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		err = read(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// AnalysisOutput is what an Analyzer leaves: its files in the recorder's
// dir, and its findings for the metadata.
type AnalysisOutput struct {
	Files    []string
	Findings *record.Findings
}

// AnalysisInput is what an Analyzer is given.
type AnalysisInput struct {
	Metadata *record.Metadata
	// Requests are the window's requests (requests.jsonl); Threshold is
	// the trigger's latency (0 when it fired for another reason): the
	// requests at or above it are the ones to explain.
	Requests  []record.RequestRecord
	Threshold time.Duration
}

// Result is what a recorder leaves behind.
type Result struct {
	// Files are the recorder's output, as names relative to its dir, in
	// the order they were written.
	Files []string
	// Lost counts events the tool could not record (perf LOST records,
	// bpftrace lost events, WPR lost events); Overruns counts events a
	// ring overwrote before they were read (ftrace's per-CPU overrun).
	// Both go into the metadata: a trace with holes must say so.
	Lost     uint64
	Overruns uint64
	// Clock says how to read the trace's timestamps as wall-clock time:
	// the clock the tool stamps with and that clock's offset from the
	// wall clock when the capture was armed.
	Clock record.Clock
	// Notes are facts a reader of the artifact needs ("perf: 2 dumps").
	Notes []string
}

// Spec asks for one capture.
type Spec struct {
	// ID names the capture; it becomes a directory and object name, so it
	// must match the name rule (ValidName).
	ID      string
	Backend string
	// Profile is a named profile of the backend (events, frequency, call
	// graphs, ring size). Empty means "default".
	Profile string
	// Script is the bpftrace script's name in the allow-listed folder.
	// A capture request never carries program text.
	Script string
	// RingKB overrides the profile's ring size per CPU; 0 keeps it.
	RingKB int
	// Pre and Post bound the window [fire − Pre, fire + Post].
	Pre, Post time.Duration
	// Trigger fires the capture from the agent's latency stream; the zero
	// value arms it for a remote or manual Fire only.
	Trigger Trigger
	// CPUs, when set, pins the recorder's own process there instead of
	// the CPUs the governor chooses.
	CPUs []int
	// Govern is how a recorder that runs a process governs it: the
	// engine fills it from its own configuration and the host's heat. A
	// request's Nice and IOClass count only where they are gentler (a
	// higher nice, idle IO); its CPUs are ignored (see CPUs).
	Govern GovernConfig
}

// StartProcess starts a recorder's process on s.Govern's CPUs from its
// first instruction; GovernProcess then applies all of s.Govern to every
// thread it has. Backends that run a process call both.
func (s Spec) StartProcess(cmd *exec.Cmd) error { return startPinned(cmd, s.Govern.CPUs) }

// GovernProcess applies s.Govern to a recorder's process.
func (s Spec) GovernProcess(pid int) (record.Governance, error) {
	return govern(pid, s.Govern.CPUs, s.Govern.Nice, s.Govern.IOClass)
}

// ValidName checks a name that reaches the filesystem or a bucket (a
// capture id, a profile, a script); the rule is record.ValidName's.
func ValidName(what, s string) error { return record.ValidName(what, s) }

// Bounds on a spec, named so errors can quote them.
const (
	MaxRingKB  = 1 << 20 // 1 GiB per CPU: beyond that a ring is a disk, not a recorder
	MinRingKB  = 64
	MaxWindow  = 10 * time.Minute
	MaxCPUList = 4096
)

// Validate checks what does not depend on a backend.
func (s Spec) Validate() error {
	if err := ValidName("capture id", s.ID); err != nil {
		return err
	}
	switch s.Backend {
	case Perf, Ftrace, Bpftrace, WPR:
	default:
		return fmt.Errorf("%w: unknown backend %q (perf, ftrace, bpftrace or wpr)", ErrInvalid, s.Backend)
	}
	if s.Profile != "" {
		if err := ValidName("profile", s.Profile); err != nil {
			return err
		}
	}
	if s.Script != "" {
		if err := ValidName("script", s.Script); err != nil {
			return err
		}
	}
	if s.Backend == Bpftrace && s.Script == "" {
		return fmt.Errorf("%w: the bpftrace backend needs a script name from the allow-listed folder", ErrInvalid)
	}
	if s.Backend != Bpftrace && s.Script != "" {
		return fmt.Errorf("%w: a script is only for the bpftrace backend", ErrInvalid)
	}
	if s.RingKB != 0 && (s.RingKB < MinRingKB || s.RingKB > MaxRingKB) {
		return fmt.Errorf("%w: ring size %d KiB per CPU is outside [%d, %d]", ErrInvalid, s.RingKB, MinRingKB, MaxRingKB)
	}
	if s.Pre < 0 || s.Post < 0 || s.Pre > MaxWindow || s.Post > MaxWindow {
		return fmt.Errorf("%w: pre %v and post %v must each be in [0, %v]", ErrInvalid, s.Pre, s.Post, MaxWindow)
	}
	if len(s.CPUs) > MaxCPUList {
		return fmt.Errorf("%w: %d CPUs listed", ErrInvalid, len(s.CPUs))
	}
	for _, c := range s.CPUs {
		if c < 0 || c >= MaxCPUList {
			return fmt.Errorf("%w: CPU %d", ErrInvalid, c)
		}
	}
	if err := s.Govern.Validate(); err != nil {
		return err
	}
	return s.Trigger.Validate()
}
