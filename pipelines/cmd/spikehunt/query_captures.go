package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/captures"
	"github.com/spikehunt/spikehunt/pipelines/store"
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
}

func runCaptures(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("captures", "Lists flight-recorder captures from the captures index, newest first: where each\ntrace is, its window, its lost events, and the spike windows it overlaps on its\nhost. --spike answers \"is there a trace of this stall?\"; the other direction is\nspikehunt spikes --without-captures.", stderr)
	q := addQueryFlags(fs, 100)
	fs.Lookup("service").Usage = "only captures overlapping a spike window of this service (empty: every capture)"
	spikeID := fs.String("spike", "", "only the captures of this spike window (spike_id); the time range is not applied")
	if err := parse(fs, args); err != nil {
		return err
	}
	s, err := q.resolve(stderr, queryNow())
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, q.dsn)
	if err != nil {
		return err
	}
	defer st.Close()

	cond := captureCond(s, *spikeID)
	captures, err := loadCaptures(ctx, st, cond, s.limitClause())
	if err != nil {
		return err
	}
	if *spikeID != "" {
		// A stall described by its own row reads better than a bare id; a
		// spike the detector retracted or never wrote is still a valid
		// question.
		spike, err := describeSpike(ctx, st, *spikeID)
		if err != nil {
			return err
		}
		if len(captures) == 0 {
			return emptyLine(stdout, stderr, s.json, "no captures of "+spike)
		}
		if s.json {
			return writeJSON(stdout, captures)
		}
		printCaptures(stdout, captures)
		_, err = fmt.Fprintf(stdout, "\n%s of %s%s\n", plural(len(captures), "capture"), spike, lossNote(captures))
		return err
	}
	if len(captures) == 0 {
		return s.empty(stdout, stderr, "captures")
	}
	if s.json {
		return writeJSON(stdout, captures)
	}
	printCaptures(stdout, captures)
	summary, err := captureSummary(ctx, st, s, cond, len(captures))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, "\n"+summary)
	return err
}

// captureCond selects captures rows: those listing spikeID, or those whose
// window starts in the scope's range, on its host, overlapping a spike of
// its service. captures has no service column: a capture belongs to every
// service whose spike windows it overlaps on its host.
func captureCond(s queryScope, spikeID string) string {
	if spikeID != "" {
		return captures.ListsSpike(spikeID)
	}
	conds := []string{s.timeCond("window_start")}
	if s.host != "" {
		conds = append(conds, "host = "+store.QuoteString(s.host))
	}
	if s.service != "" {
		// The service's spike ids, read over the range padded by
		// spikeLinkPad: a capture links the spikes overlapping its window,
		// which starts in the range and lasts seconds to minutes.
		padded := queryScope{from: s.from.Add(-spikeLinkPad), to: s.to.Add(spikeLinkPad)}
		spikes := "is_deleted = 0 AND service = " + store.QuoteString(s.service) + " AND " + padded.timeCond("window_start")
		if s.host != "" {
			spikes += " AND host = " + store.QuoteString(s.host)
		}
		conds = append(conds, "hasAny(spike_ids, (SELECT groupArray(spike_id) FROM spikes FINAL WHERE "+spikes+"))")
	}
	return strings.Join(conds, " AND ")
}

// spikeLinkPad is how far outside the range captures --service looks for
// the service's spike windows, so that the lookup reads the range's spikes
// and not the table's. Only a window that began more than this before the
// range yet overlaps a capture inside it would be missed, and the index
// does not link such a window to a capture either.
const spikeLinkPad = captures.SpikeLookBack

// loadCaptures reads the captures rows matching cond, newest first.
func loadCaptures(ctx context.Context, st store.Store, cond, limit string) ([]captureView, error) {
	rows, err := selectRows(ctx, st, "captures", `SELECT capture_id, host, node, backend, profile, window_start, window_end,
		trigger, toJSONString(spike_ids) AS spike_ids_json, uri, bytes, lost_events, checksum, status, updated_at
	FROM captures FINAL WHERE `+cond+`
	ORDER BY window_start DESC, host, capture_id`+limit)
	if err != nil {
		return nil, err
	}
	return decodeRows("captures", rows, func(r resultRow) captureView {
		v := captureView{
			CaptureID: r.str("capture_id"), Host: r.str("host"), Node: r.str("node"), Backend: r.str("backend"),
			Profile: r.str("profile"), WindowStart: r.time("window_start"), WindowEnd: r.time("window_end"),
			Trigger: r.str("trigger"), URI: r.str("uri"), Bytes: uint64(r.int("bytes")),
			LostEvents: uint64(r.int("lost_events")), Checksum: r.str("checksum"), Status: r.str("status"),
			UpdatedAt: r.time("updated_at"),
		}
		r.json("spike_ids_json", &v.SpikeIDs)
		if v.SpikeIDs == nil {
			v.SpikeIDs = []string{}
		}
		v.DurationS = v.WindowEnd.Sub(v.WindowStart).Seconds()
		return v
	})
}

// printCaptures prints the table. The spike ids are counted, not listed:
// -o json has them, and --spike says which one was asked about.
func printCaptures(w io.Writer, captures []captureView) {
	tw := newTable(w)
	fmt.Fprintln(tw, "CAPTURE\tHOST\tBACKEND\tWINDOW_START (UTC)\tWINDOW\tSPIKES\tSIZE\tLOST\tSTATUS\tURI")
	for _, c := range captures {
		backend := c.Backend
		if c.Profile != "" {
			backend += "/" + c.Profile
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", c.CaptureID, c.Host, orDash(backend), utcTime(c.WindowStart),
			windowDuration(c.WindowEnd.Sub(c.WindowStart)), len(c.SpikeIDs), byteSize(c.Bytes), c.LostEvents,
			orDash(c.Status), orDash(c.URI))
	}
	tw.Flush()
}

// describeSpike names a spike window for the --spike lines: "spike ID
// (billy on h03 at 2025-06-01 12:17:00, 2s)", or "spike ID" when the
// spikes table has no live row for it.
func describeSpike(ctx context.Context, st store.Store, id string) (string, error) {
	rows, err := selectRows(ctx, st, "spikes", `SELECT service, host, window_start, window_end
	FROM spikes FINAL WHERE is_deleted = 0 AND spike_id = `+store.QuoteString(id)+` LIMIT 1`)
	if err != nil {
		return "", err
	}
	type spike struct {
		service, host string
		start, end    time.Time
	}
	sp, err := decodeRows("spikes", rows, func(r resultRow) spike {
		return spike{r.str("service"), r.str("host"), r.time("window_start"), r.time("window_end")}
	})
	if err != nil || len(sp) == 0 {
		return "spike " + id, err
	}
	return fmt.Sprintf("spike %s (%s on %s at %s, %s)", id, sp[0].service, sp[0].host, utcTime(sp[0].start),
		windowDuration(sp[0].end.Sub(sp[0].start))), nil
}

// captureSummary is the line under the table: how many captures on how many
// hosts, how many spike windows they cover, and how many have holes.
func captureSummary(ctx context.Context, st store.Store, s queryScope, cond string, shown int) (string, error) {
	rows, err := selectRows(ctx, st, "captures", `SELECT count() AS n, uniqExact(host) AS hosts,
		countIf(lost_events > 0) AS lossy, length(arrayDistinct(arrayFlatten(groupArray(spike_ids)))) AS spikes
	FROM captures FINAL WHERE `+cond)
	if err != nil {
		return "", err
	}
	type counts struct{ n, hosts, lossy, spikes int64 }
	c, err := decodeRows("captures", rows, func(r resultRow) counts {
		return counts{r.int("n"), r.int("hosts"), r.int("lossy"), r.int("spikes")}
	})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(plural(int(c[0].n), "capture"))
	if s.host == "" {
		b.WriteString(" on " + plural(int(c[0].hosts), "host"))
	}
	fmt.Fprintf(&b, " covering %s %s", plural(int(c[0].spikes), "spike window"), strings.Replace(s.describe(), "for any service ", "", 1))
	if c[0].lossy > 0 {
		fmt.Fprintf(&b, "; %d with lost events", c[0].lossy)
	}
	if int64(shown) < c[0].n {
		fmt.Fprintf(&b, "; showing the latest %d (--limit)", shown)
	}
	return b.String(), nil
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
