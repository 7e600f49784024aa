package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/captures"
	"github.com/spikehunt/spikehunt/pipelines/store"
)

// spikeView is one spike window as `spikehunt spikes` shows it. The JSON
// keys are part of the CLI's interface: add keys, never rename them.
type spikeView struct {
	SpikeID         string         `json:"spike_id"`
	Service         string         `json:"service"`
	Host            string         `json:"host"`
	HWClass         string         `json:"hw_class"`
	WindowStart     time.Time      `json:"window_start"`
	WindowEnd       time.Time      `json:"window_end"`
	DurationS       float64        `json:"duration_s"`
	PeakMS          float64        `json:"peak_ms"`
	BaselineMS      float64        `json:"baseline_ms"`
	Score           float64        `json:"score"`
	TopSuspect      *suspectFamily `json:"top_suspect"` // null when no counter moved
	DetectorVersion string         `json:"detector_version"`
}

// suspectFamily is a counter series and its per-CPU siblings: the rank-1
// suspect of a spike together with the other CPUs of the same metric, mode
// and device among that spike's suspects.
type suspectFamily struct {
	Metric string `json:"metric"`
	Mode   string `json:"mode"`
	Device string `json:"device"`
	CPUs   []int  `json:"cpus"` // ascending; empty when not per CPU
	Label  string `json:"label"`
}

func runSpikes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("spikes", "Lists spike windows, one line per host and window, newest first, with each\nwindow's top suspect, and how many of the service's hosts had one: is it one\nmachine or all of them?", stderr)
	q := addQueryFlags(fs, 100)
	withoutCaptures := fs.Bool("without-captures", false, "only spike windows that no capture covers (no captures row lists them in spike_ids)")
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

	cond := "is_deleted = 0 AND " + s.where("window_start")
	what := "spikes"
	if *withoutCaptures {
		cond += " AND " + captures.WithoutCaptures
		what = "spikes without captures"
	}
	spikes, err := loadSpikes(ctx, st, s, cond)
	if err != nil {
		return err
	}
	if len(spikes) == 0 {
		return s.empty(stdout, stderr, what)
	}
	if s.json {
		return writeJSON(stdout, spikes)
	}

	tw := newTable(stdout)
	withService := s.service == ""
	header := "HOST\tHW_CLASS\tWINDOW_START (UTC)\tDURATION\tPEAK_MS\tSCORE\tTOP_SUSPECT"
	if withService {
		header = "SERVICE\t" + header
	}
	fmt.Fprintln(tw, header)
	for _, sp := range spikes {
		if withService {
			fmt.Fprintf(tw, "%s\t", sp.Service)
		}
		top := "-"
		if sp.TopSuspect != nil {
			top = sp.TopSuspect.Label
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f\t%s\n", sp.Host, orDash(sp.HWClass), utcTime(sp.WindowStart),
			windowDuration(sp.WindowEnd.Sub(sp.WindowStart)), ms(sp.PeakMS*1000), sp.Score, top)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	summary, err := spikeSummary(ctx, st, s, cond, what, len(spikes))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, "\n"+summary)
	return err
}

// loadSpikes reads the spike windows matching cond, newest first, with each
// one's top suspect.
func loadSpikes(ctx context.Context, st store.Store, s queryScope, cond string) ([]spikeView, error) {
	rows, err := selectRows(ctx, st, "spikes", `SELECT spike_id, service, host, hw_class, window_start, window_end,
		peak_us, baseline_us, score, detector_version
	FROM spikes FINAL WHERE `+cond+`
	ORDER BY window_start DESC, service, host`+s.limitClause())
	if err != nil {
		return nil, err
	}
	spikes, err := decodeRows("spikes", rows, func(r resultRow) spikeView {
		v := spikeView{
			SpikeID: r.str("spike_id"), Service: r.str("service"), Host: r.str("host"), HWClass: r.str("hw_class"),
			WindowStart: r.time("window_start"), WindowEnd: r.time("window_end"),
			PeakMS: r.float("peak_us") / 1000, BaselineMS: r.float("baseline_us") / 1000, Score: r.float("score"),
			DetectorVersion: r.str("detector_version"),
		}
		v.DurationS = v.WindowEnd.Sub(v.WindowStart).Seconds()
		return v
	})
	if err != nil || len(spikes) == 0 {
		return spikes, err
	}
	ids := make([]string, len(spikes))
	for i, sp := range spikes {
		ids[i] = sp.SpikeID
	}
	tops, err := topSuspects(ctx, st, s, ids)
	if err != nil {
		return nil, err
	}
	for i := range spikes {
		spikes[i].TopSuspect = tops[spikes[i].SpikeID]
	}
	return spikes, nil
}

// topSuspects returns, per spike id, the rank-1 suspect joined with the
// other CPUs of its family among the same spike's suspects: NET_RX on CPU 0
// at rank 1 and on CPUs 2, 4, 6 further down is one line, "cpu 0,2,4,6".
func topSuspects(ctx context.Context, st store.Store, s queryScope, ids []string) (map[string]*suspectFamily, error) {
	// The window range is redundant with the ids but lets the engine skip
	// partitions; the ids come from spikes read over the same range.
	rows, err := selectRows(ctx, st, "spike_suspects", `SELECT spike_id, rank, metric, mode, device, cpu
	FROM spike_suspects FINAL
	WHERE is_deleted = 0 AND `+s.timeCond("window_start")+` AND spike_id IN `+inList(ids)+`
	ORDER BY spike_id, rank`)
	if err != nil {
		return nil, err
	}
	type suspectRow struct {
		spike, metric, mode, device string
		rank, cpu                   int
	}
	list, err := decodeRows("spike_suspects", rows, func(r resultRow) suspectRow {
		return suspectRow{spike: r.str("spike_id"), rank: int(r.int("rank")), metric: r.str("metric"),
			mode: r.str("mode"), device: r.str("device"), cpu: int(r.int("cpu"))}
	})
	if err != nil {
		return nil, err
	}
	tops := map[string]*suspectFamily{}
	for _, r := range list { // ordered by rank: the first row of a spike is its top
		if _, ok := tops[r.spike]; !ok {
			tops[r.spike] = &suspectFamily{Metric: r.metric, Mode: r.mode, Device: r.device, CPUs: []int{}}
		}
	}
	for _, r := range list {
		f := tops[r.spike]
		if r.cpu >= 0 && r.metric == f.Metric && r.mode == f.Mode && r.device == f.Device {
			f.CPUs = append(f.CPUs, r.cpu)
		}
	}
	for _, f := range tops {
		sort.Ints(f.CPUs)
		f.Label = suspectLabel(f.Metric, f.Mode, f.Device, f.CPUs)
	}
	return tops, nil
}

// spikeSummary is the line under the table: how many windows, on how many of
// the hosts that reported latency in the range.
func spikeSummary(ctx context.Context, st store.Store, s queryScope, cond, what string, shown int) (string, error) {
	rows, err := selectRows(ctx, st, "spikes", `SELECT count() AS n, uniqExact(host) AS hosts,
		ifNull((SELECT uniqExact(host) FROM latency_1s WHERE `+s.where("ts")+`), 0) AS fleet
	FROM spikes FINAL WHERE `+cond)
	if err != nil {
		return "", err
	}
	type counts struct{ windows, hosts, fleet int64 }
	c, err := decodeRows("spikes", rows, func(r resultRow) counts { return counts{r.int("n"), r.int("hosts"), r.int("fleet")} })
	if err != nil {
		return "", err
	}
	n, hosts, fleet := c[0].windows, c[0].hosts, c[0].fleet
	var b strings.Builder
	noun := "spike windows"
	if n == 1 {
		noun = "spike window"
	}
	fmt.Fprintf(&b, "%d %s%s", n, noun, strings.TrimPrefix(what, "spikes"))
	switch {
	case s.host != "":
	case fleet >= hosts && fleet > 0:
		// The hosts that reported latency in the range are the fleet the
		// share is of: the answer to "one machine or all of them?".
		fmt.Fprintf(&b, " on %d of %d hosts (%s)", hosts, fleet, pct(share(hosts, fleet)))
	case hosts == 1:
		b.WriteString(" on 1 host")
	default:
		fmt.Fprintf(&b, " on %d hosts", hosts)
	}
	fmt.Fprintf(&b, " %s", s.describe())
	if int64(shown) < n {
		fmt.Fprintf(&b, "; showing the latest %d (--limit)", shown)
	}
	return b.String(), nil
}
