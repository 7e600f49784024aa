package perf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/internal/capture/reportpage"
)

// Files an analysis adds to the artifact.
const (
	ExplainFile      = "explain.json"
	FoldedFile       = "stacks.folded"
	ProfileFile      = "profile.pb.gz"       // the window's on-CPU profile, pprof
	StallProfileFile = "profile-stall.pb.gz" // the slowest explained request's own time
)

// Analyze reads the capture's dumps back with perf script, on this node
// where the symbols are, at the recorder's governance, and writes the
// slow requests' verdicts (explain.json) and the window's on-CPU profile
// as folded stacks (stacks.folded) and as pprof (profile.pb.gz), with the
// slowest request's own time as a second pprof (profile-stall.pb.gz), and
// the page that shows them (report.html).
func (r *perfRecorder) Analyze(ctx context.Context, in capture.AnalysisInput) (capture.AnalysisOutput, error) {
	tr := explain.NewTrace(explain.DefaultLimits)
	// perf record's own CPU is the capture's overhead: the verdicts
	// report it apart, never as who a request waited behind.
	tr.SetRecorder(r.pid)
	for _, f := range r.files {
		if err := r.script(ctx, filepath.Join(r.dir, f), tr); err != nil {
			return capture.AnalysisOutput{}, fmt.Errorf("perf script %s: %w", f, err)
		}
	}
	var host *explain.Host
	if r.cgroups != nil {
		// Read now, at seal time: the request threads and the tasks
		// they waited behind are named with their cgroups while they
		// live.
		host = &explain.Host{Task: r.cgroups.task, Quotas: r.quotas.Quotas(), Listen: r.quotas.Listen()}
	}
	a := explain.AnalyzeOn(tr, host, in.Metadata, in.Requests, in.Threshold)
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return capture.AnalysisOutput{}, err
	}
	if err := writeNew(filepath.Join(r.dir, ExplainFile), func(f *os.File) error { _, err := f.Write(append(b, '\n')); return err }); err != nil {
		return capture.AnalysisOutput{}, err
	}
	folded := tr.Folded()
	if err := writeNew(filepath.Join(r.dir, FoldedFile), func(f *os.File) error { return explain.WriteFolded(f, folded) }); err != nil {
		return capture.AnalysisOutput{}, err
	}
	if err := writeNew(filepath.Join(r.dir, explain.ReportFile), func(f *os.File) error { return reportpage.WriteReport(f, in.Metadata, &a, folded) }); err != nil {
		return capture.AnalysisOutput{}, err
	}
	files := []string{ExplainFile, FoldedFile, explain.ReportFile}
	period := int64(1e9 / max(r.freqHz, 1))
	profiles := map[string][]byte{ProfileFile: tr.Profile(0, 0, period)}
	if len(a.Requests) > 0 {
		q := a.Requests[0].Request
		off := int64(in.Metadata.Clock.Offset)
		profiles[StallProfileFile] = tr.Profile(q.Start.UnixNano()-off, q.End.UnixNano()-off, period)
	}
	for _, name := range []string{ProfileFile, StallProfileFile} {
		b, ok := profiles[name]
		if !ok {
			continue
		}
		if err := writeNew(filepath.Join(r.dir, name), func(f *os.File) error { _, err := f.Write(b); return err }); err != nil {
			return capture.AnalysisOutput{}, err
		}
		files = append(files, name)
	}
	return capture.AnalysisOutput{Files: files, Findings: &a.Findings}, nil
}

// script runs perf script on one dump into tr. Its own process group, as
// perf record's, so that ctx's end kills it and whatever it started.
func (r *perfRecorder) script(ctx context.Context, file string, tr *explain.Trace) error {
	cmd := exec.Command(r.cfg.Binary, "script", "-i", file, "--ns", "-F", explain.ScriptFields)
	cmd.Dir = r.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &limitedWriter{w: &stderr, left: 4096}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := r.spec.StartProcess(cmd); err != nil {
		return err
	}
	if _, err := r.spec.GovernProcess(cmd.Process.Pid); err != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		return fmt.Errorf("govern: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer stop()
	rerr := tr.Read(out)
	if rerr != nil {
		// Stop reading: perf must not block on a full pipe.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	werr := cmd.Wait()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%w (analysis timeout)", ctx.Err())
	case rerr != nil:
		return rerr
	case werr != nil:
		return fmt.Errorf("%w: %s", werr, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// writeNew creates path (it must not exist) and fills it with write.
func writeNew(path string, write func(*os.File) error) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	return errors.Join(write(f), f.Sync(), f.Close())
}

// limitedWriter keeps the first left bytes written to it.
type limitedWriter struct {
	w    *strings.Builder
	left int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.left > 0 {
		n := min(len(p), l.left)
		l.w.Write(p[:n])
		l.left -= n
	}
	return len(p), nil
}
