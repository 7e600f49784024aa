// Package explain turns a capture's trace into answers on the node that
// recorded it, where the symbols are: for each slow request, what its
// thread did while it was served (on CPU, runnable behind whom, blocked
// where and woken by whom), and the on-CPU profile of the window as folded
// stacks. It reads perf script's text (perfscript.go) or ftrace's
// (ftracesched.go), rebuilds threads' timelines from sched_switch and
// sched_wakeup (timeline.go) and words one verdict per request
// (verdict.go), with the everyday causes read from its chains and, when
// the recorder read them, the host's cgroups and listen queues
// (causes.go), and what its process's other threads and its CPU's softirq
// work did meanwhile (meanwhile.go); with ftrace's block events
// (blockio.go) it holds a blocked wait against the devices (waitio.go);
// it sums the bpftrace irq_duration script's blocks (interrupts.go); and
// it draws all of it as one self-contained page, report.html (report.go,
// svg.go). Standard library and the artifact's record only: the
// recorders and the CLI import it, never the reverse.
//
// Why one package: a verdict is one sentence that reads the events, the
// threads' timelines, the chains' causes and the host's readings
// together. The readers (perf script, ftrace) fill the one Trace that the
// rest reads; split apart, they would export that Trace's insides (its
// interned chains, its thread-to-process map, its sample period) to one
// another.
package explain

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// Analysis is what explain.json holds.
type Analysis struct {
	Version int `json:"version"`
	// Requests are the verdicts of the slowest requests at or above the
	// trigger (at most MaxRequests), slowest first.
	Requests []RequestVerdict `json:"requests"`
	// Events and Samples count what the trace held; Lost is the capture's
	// lost and overrun events, repeated here because each conclusion
	// above may be missing a piece of its timeline when it is not zero.
	Events  int    `json:"events"`
	Samples int    `json:"samples"`
	Lost    uint64 `json:"lost_events"`
	// LostNote is what Lost means for the verdicts, "" when nothing was
	// lost.
	LostNote string `json:"lost_note,omitempty"`
	// TopStacks are the hottest on-CPU call chains of the window.
	TopStacks []StackShare `json:"top_stacks"`
	// CPUs are each CPU's samples: how busy it was, and how much of it
	// was softirq work.
	CPUs []CPUUse `json:"cpus"`
	// Interrupts is the interrupt work of the window, from the bpftrace
	// irq_duration script's histograms (nil for other recorders).
	Interrupts *Interrupts `json:"interrupts,omitempty"`
	// BlockIO is the window's block requests, issue → complete per device,
	// from the ftrace profile (nil for other recorders).
	BlockIO *BlockIO `json:"block_io,omitempty"`
	// Cgroups is what the verdicts used of the host's cgroups (the
	// recorder's Host): nil when it read none.
	Cgroups *Cgroups `json:"cgroups,omitempty"`
	// Findings are the summary the captures index keeps.
	Findings record.Findings `json:"findings"`
	Notes    []string        `json:"notes,omitempty"`
}

// CPUUse is one CPU's samples over the window.
type CPUUse struct {
	CPU     int32 `json:"cpu"`
	Samples int   `json:"samples"`
	Idle    int   `json:"idle"`    // in the idle task (swapper)
	Softirq int   `json:"softirq"` // with softirq work in the chain
}

// AnalysisVersion is bumped on an incompatible change of Analysis.
const AnalysisVersion = 1

// MaxRequests is how many requests an analysis explains.
const MaxRequests = 20

// StackShare is one folded stack's samples.
type StackShare struct {
	Stack   string `json:"stack"` // comm;outermost;…;innermost
	Samples int    `json:"samples"`
}

// Analyze explains the requests at or above threshold with the trace.
func Analyze(tr *Trace, md *record.Metadata, reqs []record.RequestRecord, threshold time.Duration) Analysis {
	return analyze(tr, nil, nil, md, reqs, threshold)
}

// AnalyzeOn is Analyze with what the recorder read of the host around the
// capture (h, nil for none): the verdicts then name a throttling CPU quota
// and the cgroups of the tasks a request waited behind.
func AnalyzeOn(tr *Trace, h *Host, md *record.Metadata, reqs []record.RequestRecord, threshold time.Duration) Analysis {
	return analyze(tr, nil, h, md, reqs, threshold)
}

// AnalyzeFtrace explains the requests at or above threshold with the
// ftrace profile's scheduler events (tr, from ReadFtrace) and block
// requests (io, from ReadBlockIO after KeepDuring of each request in
// RequestWindows): each verdict also says whether the blocked time is the
// device's latency or lies above the block layer.
func AnalyzeFtrace(tr *Trace, io *BlockIO, md *record.Metadata, reqs []record.RequestRecord, threshold time.Duration) Analysis {
	a := analyze(tr, io, nil, md, reqs, threshold)
	a.BlockIO = io
	if len(a.Requests) == 0 {
		a.Findings.Verdict = io.Verdict()
		if a.Findings.Verdict != "" && a.LostNote != "" {
			a.Findings.Verdict += fmt.Sprintf(" [%d events lost in this capture]", a.Lost)
		}
	}
	if a.LostNote != "" {
		a.LostNote = fmt.Sprintf("the trace lost %d events (a ring overwrote its oldest, or dropped some): a timeline may miss a switch or a wakeup, and a block request its issue or completion, so a wait's device time may be lower than it was", a.Lost)
	}
	return a
}

// RequestWindows are the trace-time spans of the requests an analysis
// explains: what BlockIO.KeepDuring must be given before the block
// events are read.
func RequestWindows(md *record.Metadata, reqs []record.RequestRecord, threshold time.Duration) [][2]int64 {
	var out [][2]int64
	for _, q := range SlowRequests(reqs, threshold, MaxRequests) {
		off := int64(md.Clock.Offset)
		out = append(out, [2]int64{q.Start.UnixNano() - off, q.End.UnixNano() - off})
	}
	return out
}

func analyze(tr *Trace, io *BlockIO, h *Host, md *record.Metadata, reqs []record.RequestRecord, threshold time.Duration) Analysis {
	tr.SortEvents()
	a := Analysis{Version: AnalysisVersion, Events: len(tr.Events), Lost: md.Lost + md.Overruns}
	if tr.Truncated != "" {
		a.Notes = append(a.Notes, "the trace was cut: "+tr.Truncated)
	}
	if a.Lost > 0 {
		a.LostNote = fmt.Sprintf("the trace lost %d events: a timeline may miss a switch or a wakeup, so a stretch read as blocked or runnable may be longer or shorter than it was", a.Lost)
	}
	var used *Cgroups
	if h != nil {
		used = &Cgroups{}
	}
	for _, q := range SlowRequests(reqs, threshold, MaxRequests) {
		v := tr.explainRequest(q, md.Clock, io, h, used)
		if a.LostNote != "" {
			v.Verdict += " [" + fmt.Sprint(a.Lost) + " events lost in this capture]"
		}
		a.Requests = append(a.Requests, v)
	}
	if used != nil && (len(used.Tasks) > 0 || len(used.Quotas) > 0) {
		a.Cgroups = used
	}
	folded := tr.Folded()
	a.Samples = 0
	for _, s := range folded {
		a.Samples += s.Samples
	}
	if len(folded) > 10 {
		folded = folded[:10]
	}
	a.TopStacks = folded
	a.CPUs = tr.CPUUse()
	a.Findings = findings(a)
	return a
}

// findings sums an analysis up for the captures index.
func findings(a Analysis) record.Findings {
	f := record.Findings{HottestCPU: -1}
	if len(a.Requests) > 0 {
		v := a.Requests[0]
		f.Verdict = v.Verdict
		f.BlockingStack = strings.Join(v.BlockedIn, " ← ")
		if len(f.BlockingStack) > 512 {
			f.BlockingStack = f.BlockingStack[:512]
		}
	}
	if c, ok := Busiest(a.CPUs); ok {
		f.HottestCPU, f.HottestCPUBusy = int(c.CPU), c.Busy()
	}
	f.SoftirqShare = SoftirqShare(a.CPUs)
	return f
}

// Busy is the share of the CPU's samples that were not idle: the figure
// the report's CPU table shows.
func (u CPUUse) Busy() float64 {
	if u.Samples == 0 {
		return 0
	}
	return float64(u.Samples-u.Idle) / float64(u.Samples)
}

// Busiest is the CPU whose samples were least idle (Busy), the one with
// more busy samples on a tie; false when no CPU had a busy sample. It
// compares shares, not counts: CPUs do not hold as many samples each
// (a ring that lost events keeps fewer, an idle CPU may be sampled less),
// so the most busy samples can be a CPU that was mostly idle while
// another ran all the time.
func Busiest(cpus []CPUUse) (CPUUse, bool) {
	var best CPUUse
	found := false
	for _, c := range cpus {
		busy := c.Samples - c.Idle
		if busy <= 0 {
			continue
		}
		if !found || c.Busy() > best.Busy() || (c.Busy() == best.Busy() && busy > best.Samples-best.Idle) {
			best, found = c, true
		}
	}
	return best, found
}

// SoftirqShare is the share of all the CPUs' samples that ran softirq
// work.
func SoftirqShare(cpus []CPUUse) float64 {
	total, softirq := 0, 0
	for _, c := range cpus {
		total += c.Samples
		softirq += c.Softirq
	}
	if total == 0 {
		return 0
	}
	return float64(softirq) / float64(total)
}

// CPUSentence is what the CPU table says, in one sentence that the text
// output and the page both print (so that neither names another CPU
// than the table): "the busiest was CPU 1 (100% of its 50 samples not
// idle); softirq work was 5.0% of all samples"; "" without samples.
func CPUSentence(cpus []CPUUse) string {
	c, ok := Busiest(cpus)
	if !ok {
		return "" // no busy sample, so no softirq one either
	}
	return fmt.Sprintf("the busiest was CPU %d (%.0f%% of its %d samples not idle); softirq work was %.1f%% of all samples",
		c.CPU, 100*c.Busy(), c.Samples, 100*SoftirqShare(cpus))
}

// softirqFrames mark a sample taken in softirq work, whichever thread's
// context it borrowed.
var softirqFrames = []string{"__do_softirq", "handle_softirqs", "do_softirq", "run_ksoftirqd"}

// CPUUse counts each CPU's samples, idle ones and softirq ones, by CPU.
func (tr *Trace) CPUUse() []CPUUse {
	by := map[int32]*CPUUse{}
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.Kind != KindSample {
			continue
		}
		u := by[e.CPU]
		if u == nil {
			u = &CPUUse{CPU: e.CPU}
			by[e.CPU] = u
		}
		u.Samples++
		if e.Stack >= 0 && hasAny(tr.Stacks[e.Stack], softirqFrames) {
			u.Softirq++
		} else if e.Task.TID == 0 {
			u.Idle++
		}
	}
	out := make([]CPUUse, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CPU < out[j].CPU })
	return out
}

// Folded returns the on-CPU samples as folded stacks, "comm;outer;…;inner",
// most samples first: the input of flame graph tools (flamegraph.pl,
// speedscope, Pyroscope's folded import).
func (tr *Trace) Folded() []StackShare {
	by := map[string]int{}
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.Kind != KindSample {
			continue
		}
		var b strings.Builder
		b.WriteString(foldName(e.Task.Comm))
		if e.Stack >= 0 {
			st := tr.Stacks[e.Stack]
			for j := len(st) - 1; j >= 0; j-- {
				b.WriteByte(';')
				b.WriteString(foldName(st[j]))
			}
		}
		by[b.String()]++
	}
	out := make([]StackShare, 0, len(by))
	for s, n := range by {
		out = append(out, StackShare{Stack: s, Samples: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Samples != out[j].Samples {
			return out[i].Samples > out[j].Samples
		}
		return out[i].Stack < out[j].Stack
	})
	return out
}

// IdleStack says whether a folded stack ("comm;outer;…;inner") is the
// idle task's with no softirq work in it: the samples CPUUse counts as
// Idle, read from the folded text, where the task is known by its name
// (swapper, swapper/3) and not its tid.
func IdleStack(folded string) bool {
	comm, rest, _ := strings.Cut(folded, ";")
	if comm != "swapper" && !strings.HasPrefix(comm, "swapper/") {
		return false
	}
	for _, f := range softirqFrames {
		if strings.Contains(rest, f) {
			return false
		}
	}
	return true
}

// foldName keeps a frame from breaking the folded format: ';' separates
// frames and the last space the count.
func foldName(s string) string {
	if s == "" {
		return "[unknown]"
	}
	return strings.NewReplacer(";", ":", " ", "_", "\n", "_").Replace(s)
}

// WriteFolded writes stacks as folded lines, "stack count".
func WriteFolded(w io.Writer, stacks []StackShare) error {
	bw := bufio.NewWriter(w)
	for _, s := range stacks {
		fmt.Fprintf(bw, "%s %d\n", s.Stack, s.Samples)
	}
	return bw.Flush()
}

// AnalyzeInterrupts is the analysis of a bpftrace irq_duration capture:
// its interrupt work over the window, on a node of cpus CPUs.
func AnalyzeInterrupts(in *Interrupts, md *record.Metadata, cpus int) Analysis {
	a := Analysis{Version: AnalysisVersion, Lost: md.Lost + md.Overruns, Interrupts: in, Events: in.Intervals}
	for i := range in.CPUs {
		c := &in.CPUs[i]
		c.CPUShare, c.Over100Share = c.Share(in.Seconds), ratio(c.SoftirqOver100, c.SoftirqRuns)
	}
	if a.Lost > 0 {
		a.LostNote = fmt.Sprintf("bpftrace lost %d output events: some interval blocks are incomplete, so the times and counts are low", a.Lost)
	}
	if in.Truncated > 0 {
		a.Notes = append(a.Notes, fmt.Sprintf("%d interval blocks lost lines: their maps are partial", in.Truncated))
	}
	f := in.Findings(cpus)
	a.Findings = record.Findings{Verdict: in.Verdict(), HottestCPU: f.HottestCPU, HottestCPUBusy: f.HottestShare, SoftirqShare: f.SoftirqShare}
	if a.LostNote != "" {
		a.Findings.Verdict += fmt.Sprintf(" [%d events lost in this capture]", a.Lost)
	}
	return a
}

// ReportFile is the self-contained page every analysed artifact holds
// beside explain.json; the operator's report links open it by this name.
const ReportFile = "report.html"

// SpokenDuration is a duration as people read it in a verdict: "998 ms",
// "1.25 s", "40 µs".
func SpokenDuration(d time.Duration) string { return ms(d) }

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
