package artifacts

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spikehunt/spikehunt/agents/capture/artifact/record"
	"github.com/spikehunt/spikehunt/agents/capture/explain"
	"github.com/spikehunt/spikehunt/pipelines/captures"
	spikehunt "github.com/spikehunt/spikehunt/pipelines/cli"
)

const explainSynopsis = `Arguments: CAPTURE, before or after the flags.

Prints the analysis the agent made of a capture on its node, right after
collecting it (explain.json in the artifact, agents/capture/explain): for
each slow request of the window, what its thread did while it was served —
on CPU, runnable behind whom, blocked in which call chain and woken by whom —
in one verdict a request; the CPUs' load and softirq share; the hottest
on-CPU stacks. Lost events are stated next to the verdicts they could change.

--html FILE writes a self-contained report (no network at view time): the
slow requests' thread timelines and the window's flame graph.`

// Explain is `spikehunt captures explain`.
func Explain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := spikehunt.NewFlags("captures explain", explainSynopsis, stderr)
	htmlPath := fs.String("html", "", "also write a self-contained HTML report to this file")
	output := fs.String("o", "text", "output: text, or json (explain.json as the agent wrote it)")
	loc := addLocateFlags(fs)
	id, err := parseWithID(fs, args)
	if err != nil {
		return err
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "-o %q: want text or json\n", *output)
		fs.Usage()
		return spikehunt.ErrUsage
	}
	c, src, err := loc.locate(ctx, id)
	if err != nil {
		return err
	}
	x, err := readExplanation(ctx, src, c.Checksum)
	if err != nil {
		return fmt.Errorf("capture %s from %s: %w", c.ID, c.URI, err)
	}
	if *htmlPath != "" {
		if err := writeHTML(*htmlPath, c, x); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", *htmlPath)
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(x.Analysis)
	}
	return printExplanation(stdout, c, x)
}

// explanation is what a capture's artifact says of itself.
type explanation struct {
	Metadata *record.Metadata
	Analysis explain.Analysis
	// Folded is the window's on-CPU profile (stacks.folded), most
	// samples first; nil when the artifact has none.
	Folded []explain.StackShare
}

// Bounds on what explain reads of an artifact: the analysis is a few
// hundred KiB, the folded profile a few MiB; an artifact claiming more
// is refused rather than read into memory.
const (
	maxExplainBytes = 64 << 20
	maxFoldedBytes  = 256 << 20
	maxFoldedLines  = 1_000_000
)

// errNoAnalysis marks an artifact without explain.json.
var errNoAnalysis = errors.New("no analysis")

func readExplanation(ctx context.Context, src source, checksum string) (explanation, error) {
	store, md, err := openRecord(ctx, src, checksum)
	if err != nil {
		return explanation{}, err
	}
	defer store.Close()
	x := explanation{Metadata: md}
	f, ok := md.FileNamed("explain.json")
	if !ok {
		return x, fmt.Errorf("%w: the artifact (%s/%s) has no explain.json; the agent's perf recorder writes one with every capture, the other recorders do not yet", errNoAnalysis, md.Backend, md.Profile)
	}
	if f.Bytes > maxExplainBytes {
		return x, fmt.Errorf("explain.json is %d bytes, more than the %d this command reads", f.Bytes, maxExplainBytes)
	}
	rc, err := store.Open(ctx, src.id, f.Name)
	if err != nil {
		return x, err
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return x, err
	}
	if err := json.Unmarshal(b, &x.Analysis); err != nil {
		return x, fmt.Errorf("explain.json: %w", err)
	}
	if x.Analysis.Version != explain.AnalysisVersion {
		return x, fmt.Errorf("explain.json is version %d; this spikehunt reads version %d", x.Analysis.Version, explain.AnalysisVersion)
	}
	if f, ok := md.FileNamed("stacks.folded"); ok && f.Bytes <= maxFoldedBytes {
		rc, err := store.Open(ctx, src.id, f.Name)
		if err != nil {
			return x, err
		}
		x.Folded, err = readFolded(rc)
		rc.Close()
		if err != nil {
			return x, fmt.Errorf("stacks.folded: %w", err)
		}
	}
	return x, nil
}

// readFolded reads "stack count" lines.
func readFolded(r io.Reader) ([]explain.StackShare, error) {
	var out []explain.StackShare
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		if len(out) >= maxFoldedLines {
			return out, fmt.Errorf("more than %d stacks", maxFoldedLines)
		}
		i := strings.LastIndexByte(line, ' ')
		count, err := strconv.Atoi(line[i+1:])
		if i <= 0 || err != nil || count < 0 {
			return out, fmt.Errorf("line %d is not \"stack count\": %.80q", n, line)
		}
		out = append(out, explain.StackShare{Stack: line[:i], Samples: count})
	}
	return out, sc.Err()
}

// printExplanation is the text form.
func printExplanation(w io.Writer, c captures.Capture, x explanation) error {
	md, a := x.Metadata, x.Analysis
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "capture %s on %s: %s/%s, window %s–%s UTC, %s, %d events lost\n", c.ID, md.Host, md.Backend, orDefault(md.Profile),
		md.WindowStart.UTC().Format("2006-01-02 15:04:05.000"), md.WindowEnd.UTC().Format("15:04:05.000"), byteSize(md.Bytes), a.Lost)
	if a.LostNote != "" {
		fmt.Fprintf(bw, "  note: %s\n", a.LostNote)
	}
	for _, n := range a.Notes {
		fmt.Fprintf(bw, "  note: %s\n", n)
	}
	if len(a.Requests) == 0 {
		fmt.Fprintln(bw, "\nNo request at or above the trigger was seen in the window: nothing to explain.")
	} else {
		fmt.Fprintf(bw, "\nThe slowest requests of the window (%d), what their threads did:\n", len(a.Requests))
		for i, v := range a.Requests {
			fmt.Fprintf(bw, "%2d. %s %s %.0f ms, started %s\n    %s\n", i+1, v.Request.Service, v.Request.Endpoint, v.Request.LatencyMS,
				v.Request.Start.UTC().Format("15:04:05.000"), v.Verdict)
		}
	}
	if in := a.Interrupts; in != nil {
		fmt.Fprintf(bw, "\nInterrupt work over %.0f s (bpftrace irq_duration): %s\n", in.Seconds, in.Verdict())
		for _, c := range in.CPUs {
			fmt.Fprintf(bw, "  CPU %-3d softirq %5.1f%% of the CPU, %d runs, %d over 100 µs; hardirq %d runs, %d over 100 µs\n",
				c.CPU, 100*c.Share(in.Seconds), c.SoftirqRuns, c.SoftirqOver100, c.HardirqRuns, c.HardirqOver100)
		}
		for i, v := range in.Vectors {
			if i == 5 {
				break
			}
			fmt.Fprintf(bw, "  %-8s on CPU %-3d %5.1f%% of the CPU, %d runs, %d over 100 µs\n", v.Name, v.CPU,
				100*float64(v.NS)/(in.Seconds*1e9), v.Runs, v.Over100)
		}
		return bw.Flush()
	}
	if f := a.Findings; f.HottestCPU >= 0 {
		fmt.Fprintf(bw, "\nCPUs: the busiest was CPU %d (%.0f%% of its samples not idle); softirq work was %.1f%% of all samples.\n",
			f.HottestCPU, f.HottestCPUBusy*100, f.SoftirqShare*100)
	}
	if len(a.TopStacks) > 0 && a.Samples > 0 {
		fmt.Fprintf(bw, "\nOn CPU in the window (%d samples), the hottest stacks:\n", a.Samples)
		for _, s := range a.TopStacks {
			fmt.Fprintf(bw, "  %5.1f%%  %s\n", 100*float64(s.Samples)/float64(a.Samples), shortFold(s.Stack, 6))
		}
	}
	return bw.Flush()
}

// shortFold is a folded stack's task and its innermost n frames.
func shortFold(s string, n int) string {
	parts := strings.Split(s, ";")
	if len(parts) <= n+1 {
		return strings.Join(parts, " → ")
	}
	return parts[0] + " → … → " + strings.Join(parts[len(parts)-n:], " → ")
}

func orDefault(s string) string {
	if s == "" {
		return "default"
	}
	return s
}

// ReadAnalysis reads the analysis (explain.json) and the window's folded
// stacks of the capture whose record is at uri, a file:// URL as the
// agent reports it, checking them against their sha256 as it reads.
func ReadAnalysis(ctx context.Context, uri string) (explain.Analysis, []explain.StackShare, error) {
	src, err := sourceOf(uri, S3Flags{})
	if err != nil {
		return explain.Analysis{}, nil, err
	}
	x, err := readExplanation(ctx, src, "")
	return x.Analysis, x.Folded, err
}
