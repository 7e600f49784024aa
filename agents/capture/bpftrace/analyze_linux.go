package bpftrace

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/internal/capture/reportpage"
)

// ExplainFile is the analysis an irq_duration capture adds to its artifact.
const ExplainFile = "explain.json"

// IrqScript is the script whose output the analysis reads.
const IrqScript = "irq_duration"

// Analyze sums the irq_duration script's interval blocks over the window
// (explain.Interrupts): per CPU, softirq and hardirq time and histograms,
// the runs past 100 µs, the vectors that took the time. Other scripts'
// maps are the administrator's own and are left as they are. Every
// script's capture gets report.html: the interrupt tables and histograms,
// or a page saying the script is not one this analysis reads.
func (r *bpftraceRecorder) Analyze(ctx context.Context, in capture.AnalysisInput) (capture.AnalysisOutput, error) {
	if r.spec.Script != IrqScript {
		// Every artifact holds a report, which says so.
		var b bytes.Buffer
		why := fmt.Sprintf("bpftrace script %q is not one this analysis reads (only %s is); its output is in %s and %s", r.spec.Script, IrqScript, BpftracePreFile, BpftracePostFile)
		if err := reportpage.WriteUnanalysedReport(&b, in.Metadata, why); err != nil {
			return capture.AnalysisOutput{}, err
		}
		if err := writeSynced(filepath.Join(r.dir, explain.ReportFile), b.Bytes()); err != nil {
			return capture.AnalysisOutput{}, err
		}
		return capture.AnalysisOutput{Files: []string{explain.ReportFile}}, nil
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
	if err := writeReport(filepath.Join(r.dir, explain.ReportFile), in.Metadata, &a); err != nil {
		return capture.AnalysisOutput{}, err
	}
	return capture.AnalysisOutput{Files: []string{ExplainFile, explain.ReportFile}, Findings: &a.Findings}, nil
}

// writeReport writes the analysis's page (report.html) to path.
func writeReport(path string, md *record.Metadata, a *explain.Analysis) error {
	var b bytes.Buffer
	if err := reportpage.WriteReport(&b, md, a, nil); err != nil {
		return err
	}
	return writeSynced(path, b.Bytes())
}
