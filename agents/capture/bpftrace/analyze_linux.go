package bpftrace

import (
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/capture/explain"
)

// ExplainFile is the analysis an irq_duration capture adds to its artifact.
const ExplainFile = "explain.json"

// IrqScript is the script whose output the analysis reads.
const IrqScript = "irq_duration"

// Analyze sums the irq_duration script's interval blocks over the window
// (explain.Interrupts): per CPU, softirq and hardirq time and histograms,
// the runs past 100 µs, the vectors that took the time. Other scripts'
// maps are the administrator's own and are left as they are.
func (r *bpftraceRecorder) Analyze(ctx context.Context, in capture.AnalysisInput) (capture.AnalysisOutput, error) {
	if r.spec.Script != IrqScript {
		return capture.AnalysisOutput{}, nil
	}
	var irq explain.Interrupts
	if err := capture.ReadWindowFiles(ctx, r.dir, []string{BpftracePreFile, BpftracePostFile}, irq.ReadIrqBlocks); err != nil {
		return capture.AnalysisOutput{}, err
	}
	a := explain.AnalyzeInterrupts(&irq, in.Metadata, runtime.NumCPU())
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return capture.AnalysisOutput{}, err
	}
	if err := writeSynced(filepath.Join(r.dir, ExplainFile), append(b, '\n')); err != nil {
		return capture.AnalysisOutput{}, err
	}
	return capture.AnalysisOutput{Files: []string{ExplainFile}, Findings: &a.Findings}, nil
}
