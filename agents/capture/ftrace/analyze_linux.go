package ftrace

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/internal/capture/reportpage"
)

// ExplainFile is the analysis a capture adds to its artifact.
const ExplainFile = "explain.json"

// Analyze reads the window (ftrace-pre.txt, then ftrace-post.txt) twice:
// its block events into each device's issue → complete latencies
// (explain.BlockIO), keeping every request during a slow request, and its
// sched_switch and sched_wakeup events into the slow requests' thread
// timelines, whose blocked time it holds against the devices; it writes
// explain.json and the page that shows it (report.html).
func (r *ftraceRecorder) Analyze(ctx context.Context, in capture.AnalysisInput) (capture.AnalysisOutput, error) {
	files := []string{FtracePreFile, FtracePostFile}
	var b explain.BlockIO
	for _, w := range explain.RequestWindows(in.Metadata, in.Requests, in.Threshold) {
		b.KeepDuring(w[0], w[1])
	}
	if err := capture.ReadWindowFiles(ctx, r.dir, files, b.ReadBlockIO); err != nil {
		return capture.AnalysisOutput{}, err
	}
	tr := explain.NewTrace(explain.DefaultLimits)
	if err := capture.ReadWindowFiles(ctx, r.dir, files, tr.ReadFtrace); err != nil {
		return capture.AnalysisOutput{}, err
	}
	a := explain.AnalyzeFtrace(tr, &b, in.Metadata, in.Requests, in.Threshold)
	raw, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return capture.AnalysisOutput{}, err
	}
	if err := os.WriteFile(filepath.Join(r.dir, ExplainFile), append(raw, '\n'), 0o640); err != nil {
		return capture.AnalysisOutput{}, err
	}
	if err := writeReport(filepath.Join(r.dir, explain.ReportFile), in, &a); err != nil {
		return capture.AnalysisOutput{}, err
	}
	return capture.AnalysisOutput{Files: []string{ExplainFile, explain.ReportFile}, Findings: &a.Findings}, nil
}

// writeReport writes the analysis's page (report.html) to path.
func writeReport(path string, in capture.AnalysisInput, a *explain.Analysis) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	return errors.Join(reportpage.WriteReport(f, in.Metadata, a, nil), f.Sync(), f.Close())
}
