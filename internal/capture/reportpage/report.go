package reportpage

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
)

// Bounds that keep a report a page, whatever the capture: what is left
// out is said in the page, and is in explain.json.
const (
	reportTimelines = 5  // slow requests drawn
	reportIrqCPUs   = 16 // CPUs whose softirq histogram is drawn (most softirq time first)
	reportRows      = 32 // rows of any table
)

// WriteUnanalysedReport writes the page of a capture that has no
// analysis: its record, why there is none, and its files, so that a link
// to any artifact's report.html opens.
func WriteUnanalysedReport(w io.Writer, md *record.Metadata, why string) error {
	bw := bufio.NewWriter(w)
	writeHead(bw, md, md.Lost+md.Overruns, "", md.Notes)
	fmt.Fprintf(bw, "<p class=verdict>This capture has no analysis: %s.</p>\n<p>Its files:</p>\n<ul class=files>\n", html.EscapeString(why))
	for _, f := range md.Files {
		fmt.Fprintf(bw, "<li><code>%s</code></li>\n", html.EscapeString(f.Name))
	}
	bw.WriteString("</ul>\n</body></html>\n")
	return bw.Flush()
}

// writeHead writes the page's head, title and notes, and returns the
// lost events' paragraph, which each conclusion they could change repeats.
// In a window narrower than ReportWidth the drawings shrink whole to the
// page (max-width and height:auto, from their viewBox) rather than make
// it scroll sideways.
func writeHead(bw *bufio.Writer, md *record.Metadata, lostEvents uint64, lostNote string, notes []string) string {
	esc := html.EscapeString
	fmt.Fprintf(bw, `<!doctype html><html><head><meta charset="utf-8"><title>capture %s</title><style>
body{font:14px/1.45 system-ui,sans-serif;max-width:%dpx;margin:2em auto;padding:0 10px;color:#212529}
h1{font-size:20px}h2{font-size:16px;margin-top:2em}code,.mono{font:12px ui-monospace,monospace}
.note{color:#c92a2a}table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right}th{border-bottom:1px solid #adb5bd}
td.l,th.l{text-align:left}tr.busiest td{font-weight:600}.idle{color:#495057}svg text{font:11px ui-monospace,monospace}
svg{max-width:100%%;height:auto}
</style></head><body>
`, esc(md.ID), ReportWidth)
	fmt.Fprintf(bw, "<h1>Capture %s</h1>\n<p>%s on %s, profile %s, window %s–%s UTC; %d events lost.</p>\n", esc(md.ID), esc(md.Backend),
		esc(md.Host), esc(orDefault(md.Profile)), md.WindowStart.UTC().Format("2006-01-02 15:04:05.000"),
		md.WindowEnd.UTC().Format("15:04:05.000"), lostEvents)
	lost := ""
	if lostNote != "" {
		lost = fmt.Sprintf("<p class=note>%s</p>\n", esc(lostNote))
		bw.WriteString(lost)
	}
	for _, n := range notes {
		fmt.Fprintf(bw, "<p class=note>%s</p>\n", esc(n))
	}
	return lost
}

// WriteReport writes the analysis of the capture md describes as one
// self-contained HTML page (no script, nothing fetched at view time): the
// slow requests' verdicts and thread timelines, the flame graph of folded
// (nil: none), the CPUs, the interrupt work with each CPU's softirq
// duration histogram, and the block devices with each request's wait
// held against them. Lost events are stated beside each conclusion they
// could change. It writes through a buffer; w is not closed.
func WriteReport(w io.Writer, md *record.Metadata, a *explain.Analysis, folded []explain.StackShare) error {
	bw := bufio.NewWriter(w)
	esc := html.EscapeString
	lost := writeHead(bw, md, a.Lost, a.LostNote, a.Notes)
	section := 0
	heading := func(s string) {
		section++
		fmt.Fprintf(bw, "<h2>%d. %s</h2>\n", section, s)
	}

	// The interrupt analysis has no requests: its page opens with them.
	if a.Interrupts == nil || len(a.Requests) > 0 {
		heading("The slow requests' threads")
		if len(a.Requests) == 0 {
			bw.WriteString("<p>No request at or above the trigger was seen in the window.</p>\n")
		}
		// Requests whose verdicts differ only in their times and thread
		// are one paragraph, with the timeline of the slowest of them.
		groups := explain.GroupVerdicts(a.Requests)
		for i, g := range groups {
			if i == reportTimelines {
				more := 0
				for _, g := range groups[i:] {
					more += len(g.Requests)
				}
				fmt.Fprintf(bw, "<p class=capped>… and %d more requests, whose verdicts are in explain.json: this page draws %d verdicts, the slowest first.</p>\n", more, reportTimelines)
				break
			}
			v := g.Requests[0]
			if len(g.Requests) > 1 {
				fmt.Fprintf(bw, "<p class=\"verdict folded\" data-requests=\"%d\"><b>%s</b>; the slowest, %s %s, %.0f ms from %s UTC: %s</p>\n", len(g.Requests), esc(g.Covers()),
					esc(v.Request.Service), esc(v.Request.Endpoint), v.Request.LatencyMS, v.Request.Start.UTC().Format("15:04:05.000"), esc(v.Verdict))
			} else {
				fmt.Fprintf(bw, "<p class=verdict><b>%s %s</b>, %.0f ms from %s UTC: %s</p>\n", esc(v.Request.Service), esc(v.Request.Endpoint), v.Request.LatencyMS,
					v.Request.Start.UTC().Format("15:04:05.000"), esc(v.Verdict))
			}
			bw.WriteString(TimelineSVG(v, ReportWidth))
		}
		if len(a.Requests) > 0 {
			bw.WriteString(legendHTML())
		}
	}

	if len(folded) > 0 {
		heading("On CPU in the window: the flame graph")
		work := WorkStacks(folded)
		n := 0
		for _, s := range work {
			n += s.Samples
		}
		fmt.Fprintf(bw, "<p>The window's on-CPU samples that were not idle (%d), the task at the bottom and the innermost frame on top; a frame's width is its share of them. Hover a frame for its name and count; a grey … frame stands for callees too thin or too deep to draw.</p>\n", n)
		if l := IdleLine(folded); l != "" {
			fmt.Fprintf(bw, "<p class=idle>%s.</p>\n", html.EscapeString(l))
		}
		if n > 0 {
			svg, capped := flameSVG(work, ReportWidth)
			if capped {
				fmt.Fprintf(bw, "<p class=capped>The graph draws its first %d frames (each frame before its callees); the rest are in stacks.folded and profile.pb.gz.</p>\n", flameMaxFrames)
			}
			bw.WriteString(svg)
		} else {
			bw.WriteString("<p>Every sample was idle: there is no work to draw.</p>\n")
		}
		bw.WriteString(lost)
	}

	if len(a.CPUs) > 0 {
		heading("The CPUs")
		busiest, _ := explain.Busiest(a.CPUs)
		if s := explain.CPUSentence(a.CPUs); s != "" {
			fmt.Fprintf(bw, "<p class=cpu-verdict>%s.</p>\n", html.EscapeString(upperFirst(s)))
		}
		bw.WriteString("<table class=cpus><tr><th>CPU</th><th>samples</th><th>busy</th><th>softirq</th></tr>\n")
		for _, u := range a.CPUs {
			class := ""
			if u.CPU == busiest.CPU && u.Samples > u.Idle {
				class = " class=busiest"
			}
			fmt.Fprintf(bw, "<tr%s><td>%d</td><td>%d</td><td>%.0f%%</td><td>%.1f%%</td></tr>\n", class, u.CPU, u.Samples,
				100*u.Busy(), 100*float64(u.Softirq)/float64(max(u.Samples, 1)))
		}
		bw.WriteString("</table>\n")
	}

	if in := a.Interrupts; in != nil {
		heading("Interrupt work")
		writeInterrupts(bw, in)
		bw.WriteString(lost)
	}
	if b := a.BlockIO; b != nil {
		heading("Block IO")
		writeBlockIO(bw, b, a.Requests)
		bw.WriteString(lost)
	}
	bw.WriteString("</body></html>\n")
	return bw.Flush()
}

func writeInterrupts(bw *bufio.Writer, in *explain.Interrupts) {
	fmt.Fprintf(bw, "<p class=verdict>%s.</p>\n", html.EscapeString(in.Verdict()))
	if in.Truncated > 0 {
		fmt.Fprintf(bw, "<p class=note>%d interval blocks lost lines: their maps are partial, so the times and counts below are low.</p>\n", in.Truncated)
	}
	fmt.Fprintf(bw, "<p>Over %.0f s (%d interval blocks of the bpftrace irq_duration script), per CPU: the softirq and hardirq handlers' runs, their time, and how many ran past 100 µs.</p>\n", in.Seconds, in.Intervals)
	bw.WriteString("<table class=irq-cpus><tr><th>CPU</th><th>softirq time</th><th>of the CPU</th><th>softirq runs</th><th>over 100 µs</th><th>share over 100 µs</th><th>hardirq runs</th><th>over 100 µs</th></tr>\n")
	for i, c := range in.CPUs {
		if i == reportRows {
			fmt.Fprintf(bw, "<tr class=capped><td class=l colspan=8>… %d more CPUs in explain.json</td></tr>\n", len(in.CPUs)-i)
			break
		}
		fmt.Fprintf(bw, "<tr><td>%d</td><td>%s</td><td>%.2f%%</td><td>%d</td><td>%d</td><td>%.3f%%</td><td>%d</td><td>%d</td></tr>\n", c.CPU,
			explain.SpokenDuration(time.Duration(c.SoftirqNS)), 100*c.Share(in.Seconds), c.SoftirqRuns, c.SoftirqOver100, 100*ratio(c.SoftirqOver100, c.SoftirqRuns), c.HardirqRuns, c.HardirqOver100)
	}
	bw.WriteString("</table>\n")
	bw.WriteString("<p>The softirq vectors that took the most time:</p>\n<table class=irq-vectors><tr><th class=l>vector</th><th>CPU</th><th>time</th><th>of the CPU</th><th>runs</th><th>over 100 µs</th></tr>\n")
	for i, v := range in.Vectors {
		if i == 10 {
			fmt.Fprintf(bw, "<tr class=capped><td class=l colspan=6>… %d more in explain.json</td></tr>\n", len(in.Vectors)-i)
			break
		}
		fmt.Fprintf(bw, "<tr><td class=l>%s</td><td>%d</td><td>%s</td><td>%.2f%%</td><td>%d</td><td>%d</td></tr>\n", html.EscapeString(v.Name), v.CPU,
			explain.SpokenDuration(time.Duration(v.NS)), 100*float64(v.NS)/math.Max(in.Seconds*1e9, 1), v.Runs, v.Over100)
	}
	bw.WriteString("</table>\n")
	if len(in.HardirqsOver100) > 0 {
		bw.WriteString("<p>The IRQ lines whose handlers ran past 100 µs:</p>\n<table class=irq-lines><tr><th>IRQ</th><th>CPU</th><th>over 100 µs</th></tr>\n")
		for i, c := range in.HardirqsOver100 {
			if i == 10 {
				fmt.Fprintf(bw, "<tr class=capped><td class=l colspan=3>… %d more in explain.json</td></tr>\n", len(in.HardirqsOver100)-i)
				break
			}
			fmt.Fprintf(bw, "<tr><td>%d</td><td>%d</td><td>%d</td></tr>\n", c.IRQ, c.CPU, c.Count)
		}
		bw.WriteString("</table>\n")
	} else {
		bw.WriteString("<p>No hardirq handler ran past 100 µs.</p>\n")
	}
	cpus := append([]explain.CPUIrq(nil), in.CPUs...)
	sort.SliceStable(cpus, func(i, j int) bool { return cpus[i].SoftirqNS > cpus[j].SoftirqNS })
	bw.WriteString("<p>Each CPU's softirq runs by duration (µs, powers of two; the bar's height is the count on a log scale). Red: the buckets past 100 µs; orange: the bucket 100 µs falls in; the dashed line is 100 µs.</p>\n")
	if len(cpus) > reportIrqCPUs {
		fmt.Fprintf(bw, "<p class=capped>The %d CPUs with the most softirq time are drawn; the other %d are in the table above and explain.json.</p>\n", reportIrqCPUs, len(cpus)-reportIrqCPUs)
		cpus = cpus[:reportIrqCPUs]
	}
	top := 0
	for _, c := range in.CPUs {
		for _, b := range c.SoftirqHist {
			top = max(top, bucketIndex(b.Lo))
		}
	}
	for _, c := range cpus {
		bw.WriteString(SoftirqHistSVG(c, top, ReportWidth))
	}
}

// bucketIndex is a log2 bucket's column: [0] 0, [1] 1, [2, 4) 2, [4, 8) 3 …
func bucketIndex(lo uint64) int {
	if lo < 2 {
		return int(lo)
	}
	return 1 + int(math.Log2(float64(lo)))
}

// SoftirqHistSVG draws one CPU's softirq duration histogram over columns
// 0…top (bucketIndex), the buckets past 100 µs marked.
func SoftirqHistSVG(c explain.CPUIrq, top, pageWidth int) string {
	const left, right, plotTop, plotH, axisH = 40, 10, 18, 70, 16
	cols := top + 1
	colW := float64(pageWidth-left-right) / float64(cols)
	var most uint64
	for _, b := range c.SoftirqHist {
		most = max(most, b.Count)
	}
	h := plotTop + plotH + axisH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="irq-hist" data-cpu="%d" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="CPU %d softirq durations">`+"\n",
		c.CPU, pageWidth, h, pageWidth, h, c.CPU)
	fmt.Fprintf(&b, `<text x="%d" y="12">CPU %d: %d softirq runs, %d over 100 µs (%.3f%%)</text>`+"\n", left, c.CPU, c.SoftirqRuns, c.SoftirqOver100, 100*ratio(c.SoftirqOver100, c.SoftirqRuns))
	scale := math.Log10(float64(most) + 1)
	for _, bk := range c.SoftirqHist {
		i := bucketIndex(bk.Lo)
		if i > top {
			continue
		}
		bh := 0.0
		if scale > 0 {
			bh = float64(plotH) * math.Log10(float64(bk.Count)+1) / scale
		}
		colour := "#1c7ed6"
		switch {
		case bk.Lo >= 100:
			colour = "#e03131"
		case bk.Hi > 100:
			colour = "#f08c00"
		}
		fmt.Fprintf(&b, `<rect class="bucket" data-lo="%d" data-hi="%d" data-count="%d" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"><title>[%d, %d) µs: %d runs</title></rect>`+"\n",
			bk.Lo, bk.Hi, bk.Count, left+float64(i)*colW+1, plotTop+plotH-bh, colW-2, bh, colour, bk.Lo, bk.Hi, bk.Count)
	}
	// 100 µs lies in the column of [64, 128), at log2(100/64) of its width.
	x100 := left + colW*(float64(bucketIndex(64))+math.Log2(100.0/64))
	fmt.Fprintf(&b, `<line class="over100" x1="%.2f" x2="%.2f" y1="%d" y2="%d" stroke="#c92a2a" stroke-dasharray="4 3"/>`+"\n", x100, x100, plotTop-4, plotTop+plotH)
	for i := 0; i < cols; i++ {
		lo := uint64(i)
		if i >= 2 {
			lo = 1 << (i - 1)
		}
		fmt.Fprintf(&b, `<text class="tick" x="%.2f" y="%d" text-anchor="middle">%s</text>`+"\n", left+float64(i)*colW+colW/2, plotTop+plotH+12, sizeLabel(lo))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// sizeLabel is a bucket bound as bpftrace prints it: 512, 1K, 2M.
func sizeLabel(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func writeBlockIO(bw *bufio.Writer, b *explain.BlockIO, reqs []explain.RequestVerdict) {
	fmt.Fprintf(bw, "<p>Each device's requests in the window, issue → complete (ftrace block_rq_issue and block_rq_complete); p50 and p99 are the upper bounds of their log2 buckets. %d completions had their issue before the window; %d requests were still in flight at its end.</p>\n",
		b.UnmatchedCompletions, b.InFlightAtEnd)
	bw.WriteString("<table class=devices><tr><th class=l>device</th><th>requests</th><th>p50</th><th>p99</th><th>max</th><th>total</th></tr>\n")
	for i, d := range b.Devices {
		if i == reportRows {
			fmt.Fprintf(bw, "<tr class=capped><td class=l colspan=6>… %d more devices in explain.json</td></tr>\n", len(b.Devices)-i)
			break
		}
		fmt.Fprintf(bw, "<tr><td class=l>%s</td><td>%d</td><td>%d µs</td><td>%d µs</td><td>%s</td><td>%s</td></tr>\n", html.EscapeString(d.Dev), d.IOs,
			d.Quantile(0.5), d.Quantile(0.99), explain.SpokenDuration(time.Duration(d.MaxNS)), explain.SpokenDuration(time.Duration(d.TotalNS)))
	}
	bw.WriteString("</table>\n")
	if len(b.Devices) == 0 {
		bw.WriteString("<p>No block request completed in the window.</p>\n")
	}
	if b.KeptDropped > 0 {
		fmt.Fprintf(bw, "<p class=note>%d requests during the slow requests were not kept (more than %d): their waits' device time is low.</p>\n", b.KeptDropped, explain.MaxKeptIOs)
	}
	var rows []explain.RequestVerdict
	for _, v := range reqs {
		if v.IO != nil {
			rows = append(rows, v)
		}
	}
	if len(rows) == 0 {
		bw.WriteString("<p>No slow request's thread was blocked on IO in the window.</p>\n")
		return
	}
	bw.WriteString("<p>The slow requests' blocked time against the devices: the device time is how much of it some request was in flight on the device whose completion woke the thread.</p>\n")
	bw.WriteString("<table class=waits><tr><th class=l>request</th><th class=l>thread</th><th>blocked</th><th>device busy</th><th class=l>devices</th><th class=l>the wait is</th></tr>\n")
	for i, v := range rows {
		if i == reportRows {
			fmt.Fprintf(bw, "<tr class=capped><td class=l colspan=6>… %d more in explain.json</td></tr>\n", len(rows)-i)
			break
		}
		where := map[string]string{"device": "the device's latency", "above": "above the block layer", "both": "partly the device's, partly above it"}[v.IO.Where]
		fmt.Fprintf(bw, "<tr><td class=l>%s %s, %.0f ms</td><td class=l>%s</td><td>%s</td><td>%s</td><td class=l>%s</td><td class=\"l where-%s\">%s</td></tr>\n",
			html.EscapeString(v.Request.Service), html.EscapeString(v.Request.Endpoint), v.Request.LatencyMS, html.EscapeString(v.Thread),
			explain.SpokenDuration(v.IO.Blocked), explain.SpokenDuration(v.IO.Device), html.EscapeString(strings.Join(v.IO.Devices, " ")), html.EscapeString(v.IO.Where), where)
	}
	bw.WriteString("</table>\n")
}

// upperFirst starts a sentence with a capital.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func orDefault(s string) string {
	if s == "" {
		return "default"
	}
	return s
}

func legendHTML() string {
	var b strings.Builder
	b.WriteString(`<p class="legend">`)
	for _, c := range stateColours {
		fmt.Fprintf(&b, `<span style="display:inline-block;width:12px;height:12px;background:%s"></span> %s &nbsp; `, c.colour, c.meaning)
	}
	b.WriteString("— the axis is time since the request began.</p>\n")
	return b.String()
}
