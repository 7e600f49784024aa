package ftrace

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/capture/explain"
)

// ExplainFile is the analysis a capture adds to its artifact.
const ExplainFile = "explain.json"

// Analyze reads the block events of the window (ftrace-pre.txt, then
// ftrace-post.txt) into each device's issue → complete latencies
// (explain.BlockIO), the slow requests among them kept.
func (r *ftraceRecorder) Analyze(ctx context.Context, in capture.AnalysisInput) (capture.AnalysisOutput, error) {
	var b explain.BlockIO
	if err := capture.ReadWindowFiles(ctx, r.dir, []string{FtracePreFile, FtracePostFile}, b.ReadBlockIO); err != nil {
		return capture.AnalysisOutput{}, err
	}
	a := explain.Analysis{Version: explain.AnalysisVersion, Lost: in.Metadata.Lost + in.Metadata.Overruns, BlockIO: &b}
	a.Findings.HottestCPU = -1
	if len(b.Devices) > 0 {
		d := b.Devices[0]
		for _, x := range b.Devices {
			if x.MaxNS > d.MaxNS {
				d = x
			}
		}
		a.Findings.Verdict = fmt.Sprintf("block device %s: %d requests, p99 under %d µs, slowest %.1f ms", d.Dev, d.IOs, d.Quantile(0.99), float64(d.MaxNS)/1e6)
	}
	raw, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return capture.AnalysisOutput{}, err
	}
	if err := os.WriteFile(filepath.Join(r.dir, ExplainFile), append(raw, '\n'), 0o640); err != nil {
		return capture.AnalysisOutput{}, err
	}
	return capture.AnalysisOutput{Files: []string{ExplainFile}, Findings: &a.Findings}, nil
}
