package artifacts

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/internal/capture/reportpage"
	"github.com/spikehunt/spikehunt/internal/captures"
	spikehunt "github.com/spikehunt/spikehunt/pipelines/cli"
)

const explainSynopsis = `Arguments: CAPTURE, before or after the flags.

Prints the analysis the agent made of a capture on its node, right after
collecting it (explain.json in the artifact, internal/capture/explain): for
each slow request of the window, what its thread did while it was served —
on CPU, runnable behind whom, blocked in which call chain and woken by whom,
and (ftrace) whether its blocked time was the device's latency or above the
block layer — in one verdict a request; the CPUs' load and softirq share;
the hottest on-CPU stacks; the interrupt work per CPU (bpftrace
irq_duration: softirq and hardirq time, runs past 100 µs, the worst vectors
and IRQ lines); the block devices' issue → complete latencies (ftrace).
Lost events are stated next to each conclusion they could change.

--html FILE writes the self-contained report the agent also leaves in the
artifact as report.html (no network at view time): the slow requests'
thread timelines, the flame graph, the interrupt histograms and the IO
table.`

// Explain is `spikehunt captures explain`.
func Explain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := spikehunt.NewFlags("captures explain", explainSynopsis, stderr)
	htmlPath := fs.String("html", "", "also write the self-contained HTML report (the page the agent left in the artifact as report.html, drawn again from its analysis) to this file, which must not exist")
	force := fs.Bool("force", false, "… or replace it")
	spikehunt.Group(fs, "html", "force")
	output := fs.String("o", "text", "output: text (or table, as the query commands call it), or json (explain.json as the agent wrote it)")
	loc := addLocateFlags(fs)
	id, err := parseWithID(fs, args)
	if err != nil {
		return err
	}
	switch *output {
	case "text", "table", "json":
	default:
		fmt.Fprintf(stderr, "-o %q: want text or json\n", *output)
		return spikehunt.ErrUsage
	}
	if *htmlPath != "" && !*force {
		// Refused before the capture is fetched: nothing is overwritten
		// unless asked, as captures get refuses a folder that is not
		// empty.
		if _, err := os.Lstat(*htmlPath); err == nil {
			fmt.Fprintf(stderr, "--html %s exists: give another file, or --force to replace it\n", *htmlPath)
			return spikehunt.ErrUsage
		}
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
		if err := writeHTML(*htmlPath, x, *force); err != nil {
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
		return x, fmt.Errorf("%w: the artifact (%s/%s) has no explain.json; the agent's perf and ftrace recorders write one with every capture, bpftrace with its irq_duration script, WPR not yet", errNoAnalysis, md.Backend, md.Profile)
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

// printExplanation is the text form: every conclusion of the analysis,
// with the lost events beside each one they could change.
func printExplanation(w io.Writer, c captures.Capture, x explanation) error {
	md, a := x.Metadata, x.Analysis
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "capture %s on %s: %s/%s, window %s–%s UTC, %s, %d events lost\n", c.ID, md.Host, md.Backend, orDefault(md.Profile),
		md.WindowStart.UTC().Format("2006-01-02 15:04:05.000"), md.WindowEnd.UTC().Format("15:04:05.000"), byteSize(md.Bytes), a.Lost)
	lost := func() {
		if a.LostNote != "" {
			fmt.Fprintf(bw, "  note: %s\n", a.LostNote)
		}
	}
	lost()
	for _, n := range a.Notes {
		fmt.Fprintf(bw, "  note: %s\n", n)
	}
	if a.Interrupts == nil {
		if len(a.Requests) == 0 {
			fmt.Fprintln(bw, "\nNo request at or above the trigger was seen in the window: nothing to explain.")
		} else {
			// Requests whose verdicts differ only in their times and
			// thread are one entry: the slowest's verdict, with what
			// the others cover.
			fmt.Fprintf(bw, "\nThe slowest requests of the window (%d), what their threads did:\n", len(a.Requests))
			for i, g := range explain.GroupVerdicts(a.Requests) {
				v := g.Requests[0]
				if len(g.Requests) == 1 {
					fmt.Fprintf(bw, "%2d. %s %s %.0f ms, started %s\n    %s\n", i+1, v.Request.Service, v.Request.Endpoint, v.Request.LatencyMS,
						v.Request.Start.UTC().Format("15:04:05.000"), v.Verdict)
					continue
				}
				fmt.Fprintf(bw, "%2d. %s; the slowest, %s %s %.0f ms, started %s:\n    %s\n", i+1, g.Covers(), v.Request.Service, v.Request.Endpoint,
					v.Request.LatencyMS, v.Request.Start.UTC().Format("15:04:05.000"), v.Verdict)
			}
		}
	}
	if in := a.Interrupts; in != nil {
		fmt.Fprintf(bw, "\nInterrupt work over %.0f s (bpftrace irq_duration, %d interval blocks): %s\n", in.Seconds, in.Intervals, in.Verdict())
		if in.Truncated > 0 {
			fmt.Fprintf(bw, "  note: %d interval blocks lost lines: their maps are partial, so the times and counts are low\n", in.Truncated)
		}
		lost()
		fmt.Fprintf(bw, "  %-4s %12s %8s %10s %10s %9s %10s %10s\n", "CPU", "softirq", "of CPU", "runs", ">100µs", "share", "hardirqs", ">100µs")
		for _, c := range in.CPUs {
			fmt.Fprintf(bw, "  %-4d %12s %7.2f%% %10d %10d %8.3f%% %10d %10d\n", c.CPU, time.Duration(c.SoftirqNS).Round(time.Microsecond),
				100*c.Share(in.Seconds), c.SoftirqRuns, c.SoftirqOver100, 100*ratio(c.SoftirqOver100, c.SoftirqRuns), c.HardirqRuns, c.HardirqOver100)
		}
		fmt.Fprintln(bw, "  the softirq vectors that took the most time:")
		for i, v := range in.Vectors {
			if i == 10 {
				fmt.Fprintf(bw, "  … %d more in -o json\n", len(in.Vectors)-i)
				break
			}
			fmt.Fprintf(bw, "  %-8s on CPU %-3d %5.2f%% of the CPU, %d runs, %d over 100 µs\n", v.Name, v.CPU,
				100*float64(v.NS)/max(in.Seconds*1e9, 1), v.Runs, v.Over100)
		}
		if len(in.HardirqsOver100) == 0 {
			fmt.Fprintln(bw, "  no hardirq handler ran past 100 µs")
		}
		for i, q := range in.HardirqsOver100 {
			if i == 10 {
				fmt.Fprintf(bw, "  … %d more in -o json\n", len(in.HardirqsOver100)-i)
				break
			}
			fmt.Fprintf(bw, "  IRQ %-5d on CPU %-3d %d handlers over 100 µs\n", q.IRQ, q.CPU, q.Count)
		}
	}
	if b := a.BlockIO; b != nil {
		fmt.Fprintf(bw, "\nBlock IO in the window (ftrace), issue → complete; %d completions issued before the window, %d requests in flight at its end:\n",
			b.UnmatchedCompletions, b.InFlightAtEnd)
		lost()
		if b.KeptDropped > 0 {
			fmt.Fprintf(bw, "  note: %d requests during the slow requests were not kept: their waits' device time is low\n", b.KeptDropped)
		}
		if len(b.Devices) == 0 {
			fmt.Fprintln(bw, "  no block request completed in the window")
		} else {
			fmt.Fprintf(bw, "  %-10s %10s %10s %10s %12s\n", "device", "requests", "p50", "p99", "max")
		}
		for _, d := range b.Devices {
			fmt.Fprintf(bw, "  %-10s %10d %7d µs %7d µs %12s\n", d.Dev, d.IOs, d.Quantile(0.5), d.Quantile(0.99), time.Duration(d.MaxNS).Round(time.Microsecond))
		}
		for _, v := range a.Requests {
			if v.IO != nil {
				fmt.Fprintf(bw, "  %s %s %.0f ms (%s): blocked %s, device %s busy %s of it: %s\n", v.Request.Service, v.Request.Endpoint, v.Request.LatencyMS, v.Thread, v.IO.Blocked.Round(time.Microsecond),
					strings.Join(v.IO.Devices, " "), v.IO.Device.Round(time.Microsecond), map[string]string{"device": "the device's latency",
						"above": "above the block layer", "both": "partly the device's, partly above it"}[v.IO.Where])
			}
		}
	}
	// From the CPUs themselves, as the page's table, not from the
	// findings an older agent may have counted otherwise.
	if s := explain.CPUSentence(a.CPUs); s != "" {
		fmt.Fprintf(bw, "\nCPUs: %s.\n", s)
	}
	if len(a.TopStacks) > 0 && a.Samples > 0 {
		fmt.Fprintf(bw, "\nOn CPU in the window (%d samples), the hottest stacks:\n", a.Samples)
		for _, s := range a.TopStacks {
			fmt.Fprintf(bw, "  %5.1f%%  %s\n", 100*float64(s.Samples)/float64(a.Samples), shortFold(s.Stack, 6))
		}
		lost()
	}
	return bw.Flush()
}

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
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

// TimelineSVG and FlameSVG are the report's drawings (explain's), and
// IdleLine what the flame graph leaves out, for the demo's own report.
var (
	TimelineSVG = reportpage.TimelineSVG
	FlameSVG    = reportpage.FlameSVG
	IdleLine    = reportpage.IdleLine
)

// writeHTML writes the capture's report as the agent renders report.html,
// from the artifact's analysis.
// writeHTML writes the report to path, which must not exist unless
// replace. It is written beside path first and put in place whole, so a
// failed write leaves nothing, or the old file, at path: linked when path
// must be new (the link fails if it exists), renamed over it otherwise.
func writeHTML(path string, x explanation, replace bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := errors.Join(reportpage.WriteReport(f, x.Metadata, &x.Analysis, x.Folded), f.Chmod(0o644), f.Close()); err != nil {
		return err
	}
	if replace {
		return os.Rename(f.Name(), path)
	}
	return os.Link(f.Name(), path)
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
