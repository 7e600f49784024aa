package query

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spikehunt/spikehunt/internal/captures"
	"github.com/spikehunt/spikehunt/internal/store"
	spikehunt "github.com/spikehunt/spikehunt/pipelines/cli"
)

// captureView is one captures row as `spikehunt captures` shows it. The JSON
// keys are part of the CLI's interface: add keys, never rename them.
type captureView struct {
	CaptureID   string    `json:"capture_id"`
	Host        string    `json:"host"`
	Node        string    `json:"node"`
	Backend     string    `json:"backend"`
	Profile     string    `json:"profile"`
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
	DurationS   float64   `json:"duration_s"`
	Trigger     string    `json:"trigger"`
	SpikeIDs    []string  `json:"spike_ids"` // the spike windows it overlaps on its host, oldest first
	URI         string    `json:"uri"`
	Bytes       uint64    `json:"bytes"`
	LostEvents  uint64    `json:"lost_events"` // dropped or overwritten: a trace with holes says so
	Checksum    string    `json:"checksum"`
	Status      string    `json:"status"`
	UpdatedAt   time.Time `json:"updated_at"`
	// The findings of the node's analysis of the trace (empty and -1
	// when it made none): the slowest request's verdict and blocking
	// chain, the hottest CPU and the share of softirq work.
	Verdict       string  `json:"verdict"`
	BlockingStack string  `json:"blocking_stack"`
	HottestCPU    int16   `json:"hottest_cpu"`
	SoftirqShare  float32 `json:"softirq_share"`
	// ReportURL is the capture's report on the operator's report server,
	// with --report-base and a row that names its Capture object.
	ReportURL string `json:"report_url,omitempty"`
	// The Capture object the row comes from (0010_capture_object.sql);
	// empty for a capture no operator indexed (spikehunt demo).
	Namespace string `json:"capture_namespace,omitempty"`
	Name      string `json:"capture_name,omitempty"`
}

// reportURL is the report server's address of c's report
// (operator/internal/report), or "" when c names no Capture object.
func reportURL(base string, c captureView) string {
	if base == "" || c.Namespace == "" || c.Name == "" {
		return ""
	}
	return strings.TrimRight(base, "/") + "/captures/" + url.PathEscape(c.Namespace) + "/" + url.PathEscape(c.Name) + "/report"
}

// printReports lists the report URLs under the table.
func printReports(w io.Writer, list []captureView) {
	first := true
	for _, c := range list {
		if c.ReportURL == "" {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nReports (the operator's report server; sign in with your report user):")
			first = false
		}
		fmt.Fprintf(w, "  %s  %s\n", c.CaptureID, c.ReportURL)
	}
}

// Captures is `spikehunt captures`.
func Captures(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return capturesCommand.run(ctx, args, stdout, stderr)
}

var capturesCommand = command{
	name:     "captures",
	synopsis: "Lists flight-recorder captures from the captures index, newest first: where each\ntrace is, its window, its lost events, and the spike windows it overlaps on its\nhost. --spike answers \"is there a trace of this stall?\"; the other direction is\nspikehunt spikes --without-captures. spikehunt captures get CAPTURE downloads one\ncapture's files and checks their sha256; spikehunt captures explain CAPTURE prints\nthe agent's analysis of it (--html FILE: a report).",
	rows:     "a capture's trace is [window_start, window_end)",
	columns:  capturesColumns,
	setup: func(fs *flag.FlagSet) query {
		fs.Lookup("service").Usage = "only captures overlapping a spike window of this service (empty: every capture)"
		reportBase := fs.String("report-base", spikehunt.EnvOr("SPIKEHUNT_REPORT_BASE", ""), "the operator's report server as your browser reaches it "+
			"(the Helm chart's operator.reportServer.publicURL, e.g. https://spikehunt-reports.example.com; env SPIKEHUNT_REPORT_BASE): "+
			"each capture's report URL is printed under the table and in -o json's report_url")
		spikeID := fs.String("spike", "", "only the captures of this spike window: its id or a unique prefix of it (the SPIKE column of spikehunt spikes); the time range is not applied")
		return query{load: func(ctx context.Context, st store.Store, s Scope) (answer, error) {
			id := *spikeID
			if id != "" {
				var err error
				if id, err = resolveSpike(ctx, st, id, true); err != nil {
					return answer{}, err
				}
			}
			cond := captureCond(s, id)
			list, err := loadCaptures(ctx, st, cond, s.limitClause())
			if err != nil {
				return answer{}, err
			}
			for i := range list {
				list[i].ReportURL = reportURL(*reportBase, list[i])
			}
			if id != "" {
				// A stall described by its own row reads better than a
				// bare id; a spike the detector retracted or never wrote
				// is still a valid question.
				spike, err := describeSpike(ctx, st, id)
				if err != nil {
					return answer{}, err
				}
				line := fmt.Sprintf("%s of %s%s", plural(len(list), "capture"), spike, lossNote(list))
				a := answerOf(list, "no captures of "+spike, func(w io.Writer) error {
					printCaptures(w, list)
					printReports(w, list)
					_, err := fmt.Fprintf(w, "\n%s\n", line)
					return err
				}).withSummary(func() (Summary, error) { return s.summary(len(list), len(list), line), nil })
				a.spike = id
				return a, nil
			}
			summary := func() (Summary, error) { return captureSummary(ctx, st, s, cond, len(list)) }
			return answerOf(list, s.none("captures"), func(w io.Writer) error {
				printCaptures(w, list)
				printReports(w, list)
				sum, err := summary()
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(w, "\n"+sum.Lines[0])
				return err
			}).withSummary(summary), nil
		}}
	},
}

// captureCond selects captures rows: those listing spikeID, or those whose
// window starts in the scope's range, on its host, overlapping a spike of
// its service. captures has no service column: a capture belongs to every
// service whose spike windows it overlaps on its host.
func captureCond(s Scope, spikeID string) Where {
	if spikeID != "" {
		return Where{}.And(captures.ListsSpike(spikeID))
	}
	cond := s.Range(Where{}, Window).Equals("host", s.Host)
	if s.Service != "" {
		// The service's spike ids, read over the range padded by
		// spikeLinkPad: a capture links the spikes overlapping its window,
		// which starts in the range and lasts seconds to minutes.
		spikes := Live().Equals("service", s.Service).During("window_start", s.From.Add(-spikeLinkPad), s.To.Add(spikeLinkPad)).
			Equals("host", s.Host)
		cond = cond.And("hasAny(spike_ids, (SELECT groupArray(spike_id) FROM spikes FINAL WHERE " + spikes.String() + "))")
	}
	return cond
}

// spikeLinkPad is how far outside the range captures --service looks for
// the service's spike windows, so that the lookup reads the range's spikes
// and not the table's. Only a window that began more than this before the
// range yet overlaps a capture inside it would be missed, and the index
// does not link such a window to a capture either.
const spikeLinkPad = captures.SpikeLookBack

// loadCaptures reads the captures rows matching cond, newest first.
func loadCaptures(ctx context.Context, st store.Store, cond Where, limit string) ([]captureView, error) {
	return readRows(ctx, st, "captures", `SELECT capture_id, host, node, backend, profile, window_start, window_end,
		trigger, spike_ids, uri, bytes, lost_events, checksum, status, updated_at,
		verdict, blocking_stack, hottest_cpu, softirq_share, capture_namespace, capture_name
	FROM captures FINAL WHERE `+cond.String()+`
	ORDER BY window_start DESC, host, capture_id`+limit, func(c *columns) func(int) captureView {
		id, host, node, backend, profile := col[string](c, "capture_id"), col[string](c, "host"), col[string](c, "node"),
			col[string](c, "backend"), col[string](c, "profile")
		trigger, uri, checksum, status := col[string](c, "trigger"), col[string](c, "uri"), col[string](c, "checksum"), col[string](c, "status")
		start, end, updated := col[time.Time](c, "window_start"), col[time.Time](c, "window_end"), col[time.Time](c, "updated_at")
		spikeIDs := col[[]string](c, "spike_ids")
		bytes, lost := col[uint64](c, "bytes"), col[uint64](c, "lost_events")
		verdict, blocking := col[string](c, "verdict"), col[string](c, "blocking_stack")
		hottest, softirq := col[int16](c, "hottest_cpu"), col[float32](c, "softirq_share")
		objNamespace, objName := col[string](c, "capture_namespace"), col[string](c, "capture_name")
		return func(i int) captureView {
			v := captureView{
				CaptureID: id.Row(i), Host: host.Row(i), Node: node.Row(i), Backend: backend.Row(i),
				Profile: profile.Row(i), WindowStart: start.Row(i).UTC(), WindowEnd: end.Row(i).UTC(),
				Trigger: trigger.Row(i), SpikeIDs: append([]string{}, spikeIDs.Row(i)...), URI: uri.Row(i),
				Bytes: bytes.Row(i), LostEvents: lost.Row(i), Checksum: checksum.Row(i), Status: status.Row(i),
				UpdatedAt: updated.Row(i).UTC(),
				Verdict:   verdict.Row(i), BlockingStack: blocking.Row(i), HottestCPU: hottest.Row(i), SoftirqShare: softirq.Row(i),
				Namespace: objNamespace.Row(i), Name: objName.Row(i),
			}
			v.DurationS = v.WindowEnd.Sub(v.WindowStart).Seconds()
			return v
		}
	})
}

// printCaptures prints the table, then each capture's verdict. The table
// fits a terminal of tableWidth columns with ids of up to ~45 characters
// (policy.ArmingName's on a short node name; its longest, 63, run past
// it, as the id is never cut): the spike ids are counted, not listed
// (-o json has them, and --spike says which one was asked about); where
// the trace is stored is in -o json and spikehunt captures get, not here,
// since a store's absolute URI is long and stops naming it once the store
// is moved; a status other than indexed is said under the table, the
// verdicts below it, wrapped.
func printCaptures(w io.Writer, list []captureView) {
	tw := newTable(w)
	fmt.Fprintln(tw, "CAPTURE\tHOST\tBACKEND\tWINDOW_START (UTC)\tWINDOW\tSPIKES\tSIZE\tLOST")
	for _, c := range list {
		backend := c.Backend
		if c.Profile != "" {
			backend += "/" + c.Profile
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\n", c.CaptureID, c.Host, orDash(backend), utcTime(c.WindowStart),
			windowDuration(c.WindowEnd.Sub(c.WindowStart)), len(c.SpikeIDs), byteSize(c.Bytes), c.LostEvents)
	}
	tw.Flush()
	for _, c := range list {
		if c.Status != captures.StatusIndexed {
			fmt.Fprintf(w, "%s: status %s, not indexed\n", c.CaptureID, orDash(c.Status))
		}
	}
	first := true
	for _, c := range list {
		if c.Verdict == "" {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nVerdicts of the node's analysis (spikehunt captures explain CAPTURE gives all of it):")
			first = false
		}
		for _, l := range wrapWords(c.CaptureID+": "+c.Verdict, tableWidth, "  ", "      ") {
			fmt.Fprintln(w, l)
		}
	}
}

// tableWidth is the terminal width the captures command fits.
const tableWidth = 120

// wrapWords breaks s at spaces into lines of at most width runes, the
// first led by first, the others by rest; a word longer than a line stays
// whole.
func wrapWords(s string, width int, first, rest string) []string {
	var lines []string
	line, lead := first, first
	for _, word := range strings.Fields(s) {
		switch {
		case line == lead:
			line += word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > width:
			lines = append(lines, line)
			line, lead = rest+word, rest
		default:
			line += " " + word
		}
	}
	return append(lines, line)
}

// describeSpike names a spike window for the --spike lines: "spike ID
// (billy on h03 at 2025-06-01 12:17:00, 2s)", or "spike ID" when the
// spikes table has no live row for it.
func describeSpike(ctx context.Context, st store.Store, id string) (string, error) {
	type spike struct {
		service, host string
		start, end    time.Time
	}
	sp, err := readRows(ctx, st, "spikes", `SELECT service, host, window_start, window_end
	FROM spikes FINAL WHERE `+Live().Equals("spike_id", id).String()+` LIMIT 1`, func(c *columns) func(int) spike {
		service, host := col[string](c, "service"), col[string](c, "host")
		start, end := col[time.Time](c, "window_start"), col[time.Time](c, "window_end")
		return func(i int) spike { return spike{service.Row(i), host.Row(i), start.Row(i).UTC(), end.Row(i).UTC()} }
	})
	if err != nil || len(sp) == 0 {
		return "spike " + id, err
	}
	return fmt.Sprintf("spike %s (%s on %s at %s, %s)", id, sp[0].service, sp[0].host, utcTime(sp[0].start),
		windowDuration(sp[0].end.Sub(sp[0].start))), nil
}

// captureSummary is the line under the table: how many captures on how many
// hosts, how many spike windows they cover, and how many have holes.
func captureSummary(ctx context.Context, st store.Store, s Scope, cond Where, shown int) (Summary, error) {
	type counts struct{ n, hosts, lossy, spikes uint64 }
	c, err := readRows(ctx, st, "captures", `SELECT count() AS n, uniqExact(host) AS hosts,
		countIf(lost_events > 0) AS lossy, length(arrayDistinct(arrayFlatten(groupArray(spike_ids)))) AS spikes
	FROM captures FINAL WHERE `+cond.String(), func(c *columns) func(int) counts {
		n, hosts, lossy, spikes := col[uint64](c, "n"), col[uint64](c, "hosts"), col[uint64](c, "lossy"), col[uint64](c, "spikes")
		return func(i int) counts { return counts{n.Row(i), hosts.Row(i), lossy.Row(i), spikes.Row(i)} }
	})
	if err != nil {
		return Summary{}, err
	}
	var b strings.Builder
	b.WriteString(plural(int(c[0].n), "capture"))
	if s.Host == "" {
		b.WriteString(" on " + plural(int(c[0].hosts), "host"))
	}
	fmt.Fprintf(&b, " covering %s %s", plural(int(c[0].spikes), "spike window"), strings.Replace(s.describe(), "for any service ", "", 1))
	if c[0].lossy > 0 {
		fmt.Fprintf(&b, "; %d with lost events", c[0].lossy)
	}
	if uint64(shown) < c[0].n {
		fmt.Fprintf(&b, "; showing the latest %d (--limit)", shown)
	}
	sum := s.summary(int(c[0].n), shown, b.String())
	sum.Captures = &CaptureCounts{Hosts: int(c[0].hosts), SpikeWindows: int(c[0].spikes), WithLostEvents: int(c[0].lossy)}
	return sum, nil
}

// lossNote warns under a --spike listing when a trace has holes.
func lossNote(captures []captureView) string {
	n := 0
	for _, c := range captures {
		if c.LostEvents > 0 {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d with lost events", n)
}

// byteSize renders a size in binary units: 512 B, 3.5 MiB, 12 GiB.
func byteSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	digits := 1
	if v >= 100 {
		digits = 0
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', digits, 64), ".0") + " " + []string{"KiB", "MiB", "GiB", "TiB", "PiB"}[i]
}
