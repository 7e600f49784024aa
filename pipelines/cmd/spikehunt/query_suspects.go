package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/store"
)

// suspectView is one ranked suspect of one spike window. The JSON keys are
// part of the CLI's interface.
type suspectView struct {
	SpikeID     string    `json:"spike_id"`
	Service     string    `json:"service"`
	Host        string    `json:"host"`
	WindowStart time.Time `json:"window_start"`
	Rank        int       `json:"rank"`
	Metric      string    `json:"metric"`
	Mode        string    `json:"mode"`
	Device      string    `json:"device"`
	CPU         int       `json:"cpu"`      // -1 when not per CPU
	Baseline    float64   `json:"baseline"` // rate per second over the host's baseline
	During      float64   `json:"during"`   // rate per second during the window
	Deviation   float64   `json:"deviation"`
}

// suspectFamilyView is one counter family (metric, mode, device) across the
// spike windows of the range.
type suspectFamilyView struct {
	Metric      string `json:"metric"`
	Mode        string `json:"mode"`
	Device      string `json:"device"`
	CPUs        []int  `json:"cpus"`         // the CPUs it moved on most often, ascending
	Rank1Spikes int    `json:"rank1_spikes"` // spike windows where it was the top suspect
	Spikes      int    `json:"spikes"`       // spike windows where it was a suspect at all
	Hosts       int    `json:"hosts"`
	TotalSpikes int    `json:"total_spikes"` // spike windows in the range
}

func runSuspects(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("suspects", "Lists the ranked kernel-counter suspects of each spike window (newest first, --limit\nwindows), then which counter families were the top suspect across all windows\nof the range. JSON holds the per-spike rows, or with --aggregate the families.", stderr)
	q := addQueryFlags(fs, 20)
	spikeID := fs.String("spike", "", "only this spike window (spike_id); the time range is not applied")
	aggregate := fs.Bool("aggregate", false, "only the families across the range")
	if err := parse(fs, args); err != nil {
		return err
	}
	s, err := q.resolve(stderr, queryNow())
	if err != nil {
		return err
	}
	if *spikeID != "" && *aggregate {
		fmt.Fprintln(stderr, "--aggregate summarizes a range; it does not go with --spike")
		fs.Usage()
		return errUsage
	}
	st, err := store.Open(ctx, q.dsn)
	if err != nil {
		return err
	}
	defer st.Close()

	spikesCond := "is_deleted = 0 AND " + s.where("window_start")
	if *spikeID != "" {
		spikesCond = "is_deleted = 0 AND spike_id = " + store.QuoteString(*spikeID)
	}
	var suspects []suspectView
	if !*aggregate {
		if suspects, err = loadSpikeSuspects(ctx, st, spikesCond, s.limitClause()); err != nil {
			return err
		}
		if len(suspects) == 0 {
			if *spikeID != "" {
				return emptyLine(stdout, stderr, s.json, "no suspects for spike "+*spikeID)
			}
			return s.empty(stdout, stderr, "spike suspects")
		}
		if s.json {
			return writeJSON(stdout, suspects)
		}
		printSpikeSuspects(stdout, suspects)
		if *spikeID != "" {
			return nil
		}
		fmt.Fprintln(stdout)
	}
	families, err := loadSuspectFamilies(ctx, st, spikesCond)
	if err != nil {
		return err
	}
	if len(families) == 0 {
		return s.empty(stdout, stderr, "spike suspects")
	}
	if s.json {
		return writeJSON(stdout, families)
	}
	fmt.Fprintf(stdout, "Across the %d spike windows %s:\n", families[0].TotalSpikes, s.describe())
	tw := newTable(stdout)
	fmt.Fprintln(tw, "SUSPECT\tMETRIC\tMODE\tDEVICE\tTOP_SUSPECT_IN\tSUSPECT_IN\tHOSTS")
	for _, f := range families {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d (%s)\t%d\t%d\n", suspectLabel(f.Metric, f.Mode, f.Device, f.CPUs),
			f.Metric, orDash(f.Mode), orDash(f.Device), f.Rank1Spikes, pct(share(int64(f.Rank1Spikes), int64(f.TotalSpikes))),
			f.Spikes, f.Hosts)
	}
	return tw.Flush()
}

// loadSpikeSuspects reads the suspects of the newest spike windows matching
// spikesCond (at most limit windows), newest window first, by rank.
func loadSpikeSuspects(ctx context.Context, st store.Store, spikesCond, limit string) ([]suspectView, error) {
	rows, err := selectRows(ctx, st, "spike_suspects", `SELECT spike_id, service, host, window_start, rank, metric, mode,
		device, cpu, baseline, during, deviation
	FROM spike_suspects FINAL
	WHERE is_deleted = 0 AND spike_id IN (
		SELECT spike_id FROM spikes FINAL WHERE `+spikesCond+` ORDER BY window_start DESC, service, host`+limit+`)
	ORDER BY window_start DESC, service, host, rank`)
	if err != nil {
		return nil, err
	}
	return decodeRows("spike_suspects", rows, func(r resultRow) suspectView {
		return suspectView{SpikeID: r.str("spike_id"), Service: r.str("service"), Host: r.str("host"),
			WindowStart: r.time("window_start"), Rank: int(r.int("rank")), Metric: r.str("metric"), Mode: r.str("mode"),
			Device: r.str("device"), CPU: int(r.int("cpu")), Baseline: r.float("baseline"), During: r.float("during"),
			Deviation: r.float("deviation")}
	})
}

// printSpikeSuspects prints one block of rows per spike: the spike's host
// and window on its first row only, so the ranks read down.
func printSpikeSuspects(w io.Writer, suspects []suspectView) {
	tw := newTable(w)
	fmt.Fprintln(tw, "HOST\tWINDOW_START (UTC)\tRANK\tMETRIC\tMODE\tDEVICE\tCPU\tBASELINE/S\tDURING/S\tDEVIATION")
	prev := ""
	for _, x := range suspects {
		host, when := "", ""
		if x.SpikeID != prev {
			host, when = x.Host, utcTime(x.WindowStart)
			prev = x.SpikeID
		}
		cpu := "-"
		if x.CPU >= 0 {
			cpu = strconv.Itoa(x.CPU)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\n", host, when, x.Rank, x.Metric, orDash(x.Mode),
			orDash(x.Device), cpu, rate(x.Baseline), rate(x.During), x.Deviation)
	}
	tw.Flush()
}

// rate renders a per-second rate with about three significant digits,
// without exponents for the large ones (interrupts per second).
func rate(v float64) string {
	if v >= 100 || v <= -100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// loadSuspectFamilies aggregates the suspects of every spike window matching
// spikesCond by (metric, mode, device): in how many windows the family was
// the top suspect, in how many it was a suspect at all, on which CPUs.
func loadSuspectFamilies(ctx context.Context, st store.Store, spikesCond string) ([]suspectFamilyView, error) {
	inSpikes := "is_deleted = 0 AND spike_id IN (SELECT spike_id FROM spikes FINAL WHERE " + spikesCond + ")"
	rows, err := selectRows(ctx, st, "spike_suspects", `SELECT metric, mode, device,
		countIf(rank = 1) AS rank1, uniqExact(spike_id) AS spikes, uniqExact(host) AS hosts,
		ifNull((SELECT count() FROM spikes FINAL WHERE `+spikesCond+`), 0) AS total
	FROM spike_suspects FINAL WHERE `+inSpikes+`
	GROUP BY metric, mode, device
	ORDER BY rank1 DESC, spikes DESC, metric, mode, device`)
	if err != nil {
		return nil, err
	}
	families, err := decodeRows("spike_suspects", rows, func(r resultRow) suspectFamilyView {
		return suspectFamilyView{Metric: r.str("metric"), Mode: r.str("mode"), Device: r.str("device"),
			Rank1Spikes: int(r.int("rank1")), Spikes: int(r.int("spikes")), Hosts: int(r.int("hosts")),
			TotalSpikes: int(r.int("total"))}
	})
	if err != nil || len(families) == 0 {
		return families, err
	}
	rows, err = selectRows(ctx, st, "spike_suspects", `SELECT metric, mode, device, cpu, count() AS n
	FROM spike_suspects FINAL WHERE `+inSpikes+` AND cpu >= 0
	GROUP BY metric, mode, device, cpu`)
	if err != nil {
		return nil, err
	}
	type familyCPU struct {
		metric, mode, device string
		cpuCount
	}
	cpus, err := decodeRows("spike_suspects", rows, func(r resultRow) familyCPU {
		return familyCPU{r.str("metric"), r.str("mode"), r.str("device"), cpuCount{int(r.int("cpu")), int(r.int("n"))}}
	})
	if err != nil {
		return nil, err
	}
	for i := range families {
		f := &families[i]
		var counts []cpuCount
		for _, c := range cpus {
			if c.metric == f.Metric && c.mode == f.Mode && c.device == f.Device {
				counts = append(counts, c.cpuCount)
			}
		}
		if f.CPUs = frequentCPUs(counts); f.CPUs == nil {
			f.CPUs = []int{}
		}
	}
	return families, nil
}
