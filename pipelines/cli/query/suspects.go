package query

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	spikehunt "github.com/spikehunt/spikehunt/pipelines/cli"
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

// Suspects is `spikehunt suspects`.
func Suspects(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return suspectsCommand.run(ctx, args, stdout, stderr)
}

var suspectsCommand = command{
	name:     "suspects",
	synopsis: "Lists the ranked kernel-counter suspects of each spike window (newest first, --limit\nwindows), then which counter families were the top suspect across all windows\nof the range. JSON holds the per-spike rows, or with --aggregate the families.",
	rows:     "a spike window is [window_start, window_end),\nand its suspects go with it",
	columns:  suspectsColumns,
	setup: func(fs *flag.FlagSet) query {
		spikeID := fs.String("spike", "", "only this spike window: its id or a unique prefix of it (the SPIKE column of spikehunt spikes); the time range is not applied")
		aggregate := fs.Bool("aggregate", false, "only the families across the range")
		return query{
			check: func() string {
				if *spikeID != "" && *aggregate {
					return "--aggregate summarizes a range; it does not go with --spike"
				}
				return ""
			},
			load: func(ctx context.Context, st store.Store, s Scope) (answer, error) {
				spikes := s.Filter(Live(), Window)
				id := *spikeID
				if id != "" {
					var err error
					if id, err = resolveSpike(ctx, st, id, false); err != nil {
						return answer{}, err
					}
					spikes = Live().Equals("spike_id", id)
				}
				if *aggregate {
					return loadFamiliesAnswer(ctx, st, s, spikes)
				}
				suspects, err := loadSpikeSuspects(ctx, st, spikes, s.limitClause())
				if err != nil {
					return answer{}, err
				}
				none := s.none("spike suspects")
				if *spikeID != "" && len(suspects) == 0 {
					why, err := noSuspectsReason(ctx, st, id)
					if err != nil {
						return answer{}, err
					}
					none = "no suspects for spike " + id + ": " + why
				}
				a := answerOf(suspects, none, func(w io.Writer) error {
					if err := printSpikeSuspects(w, suspects); err != nil {
						return err
					}
					note, err := coarseStepNote(ctx, st, suspects)
					if err != nil {
						return err
					}
					if note != "" {
						fmt.Fprintln(w, note)
					}
					if *spikeID != "" {
						return nil
					}
					fmt.Fprintln(w)
					// The families of every window of the range, not only
					// of the --limit windows listed.
					families, err := loadFamiliesAnswer(ctx, st, s, spikes)
					if err != nil {
						return err
					}
					if families.n == 0 {
						_, err := fmt.Fprintln(w, families.none)
						return err
					}
					return families.table(w)
				}).withSummary(func() (Summary, error) {
					// Found and shown count spike windows, not rows.
					shown := map[string]bool{}
					for _, x := range suspects {
						shown[x.SpikeID] = true
					}
					found, err := countRows(ctx, st, "spikes", withSuspects(spikes))
					return s.summary(found, len(shown)), err
				})
				a.spike = id
				return a, nil
			},
		}
	},
}

// loadFamiliesAnswer is the answer of --aggregate: the families of the
// suspects of the spike windows matching spikes.
func loadFamiliesAnswer(ctx context.Context, st store.Store, s Scope, spikes Where) (answer, error) {
	families, err := loadSuspectFamilies(ctx, st, spikes)
	if err != nil {
		return answer{}, err
	}
	return answerOf(families, s.none("spike suspects"), func(w io.Writer) error {
		fmt.Fprintf(w, "Across the %d spike windows %s:\n", families[0].TotalSpikes, s.describe())
		tw := newTable(w)
		fmt.Fprintln(tw, "SUSPECT\tMETRIC\tMODE\tDEVICE\tTOP_SUSPECT_IN\tSUSPECT_IN\tHOSTS")
		for _, f := range families {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d (%s)\t%d\t%d\n", SuspectLabel(f.Metric, f.Mode, f.Device, f.CPUs),
				f.Metric, orDash(f.Mode), orDash(f.Device), f.Rank1Spikes, pct(share(int64(f.Rank1Spikes), int64(f.TotalSpikes))),
				f.Spikes, f.Hosts)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if line := noMajorityLine(families); line != "" {
			_, err := fmt.Fprintln(w, line)
			return err
		}
		return nil
	}), nil
}

// noMajorityLine says so when no counter family is the top suspect of
// more than half of the windows: a cause of recurring stalls moves with
// most of them, while counters that moved once each (another process's
// burst, a write to disk) are the host's noise. "" when one family is.
// families are in TOP_SUSPECT_IN order, the most frequent first.
func noMajorityLine(families []suspectFamilyView) string {
	if len(families) == 0 || families[0].TotalSpikes < 2 {
		return ""
	}
	f := families[0]
	if 2*f.Rank1Spikes > f.TotalSpikes {
		return ""
	}
	return fmt.Sprintf("No kernel counter moved with most of these stalls: none is the top suspect in more than half of the %d windows (the most frequent, %s, in %d).",
		f.TotalSpikes, SuspectLabel(f.Metric, f.Mode, f.Device, f.CPUs), f.Rank1Spikes)
}

// loadSpikeSuspects reads the suspects of the newest spike windows matching
// spikes that have any (at most limit windows), newest window first, by
// rank. The limit is of the windows shown: it is applied after the windows
// without suspects are left out, never before.
func loadSpikeSuspects(ctx context.Context, st store.Store, spikes Where, limit string) ([]suspectView, error) {
	return readRows(ctx, st, "spike_suspects", `SELECT spike_id, service, host, window_start, rank, metric, mode,
		device, cpu, baseline, during, deviation
	FROM spike_suspects FINAL
	WHERE `+Live().And(`spike_id IN (
		SELECT spike_id FROM spikes FINAL WHERE `+withSuspects(spikes).String()+` ORDER BY window_start DESC, service, host`+limit+`)`).String()+`
	ORDER BY window_start DESC, service, host, rank`, func(c *columns) func(int) suspectView {
		id, service, host := col[string](c, "spike_id"), col[string](c, "service"), col[string](c, "host")
		metric, mode, device := col[string](c, "metric"), col[string](c, "mode"), col[string](c, "device")
		start, rank, cpu := col[time.Time](c, "window_start"), col[uint8](c, "rank"), col[int16](c, "cpu")
		baseline, during, deviation := col[float64](c, "baseline"), col[float64](c, "during"), col[float64](c, "deviation")
		return func(i int) suspectView {
			return suspectView{SpikeID: id.Row(i), Service: service.Row(i), Host: host.Row(i),
				WindowStart: start.Row(i).UTC(), Rank: int(rank.Row(i)), Metric: metric.Row(i), Mode: mode.Row(i),
				Device: device.Row(i), CPU: int(cpu.Row(i)), Baseline: finite(baseline.Row(i)), During: finite(during.Row(i)),
				Deviation: finite(deviation.Row(i))}
		}
	})
}

// printSpikeSuspects prints one block of rows per spike: the spike's host
// and window on its first row only, so the ranks read down.
func printSpikeSuspects(w io.Writer, suspects []suspectView) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "HOST\tWINDOW_START (UTC)\tRANK\tMETRIC\tMODE\tDEVICE\tCPU\tBASELINE\tDURING\tDEVIATION")
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
			orDash(x.Device), cpu, counterRate(x.Metric, x.Baseline), counterRate(x.Metric, x.During), x.Deviation)
	}
	return tw.Flush()
}

// timeMetrics are the counters whose rate is seconds per second: a share of
// one CPU.
var timeMetrics = map[string]bool{"system.cpu.time": true, "spikehunt.cpu.run_delay": true, "spikehunt.pressure.stall_time": true}

// diskLatencyMetric is the detector's per-IO latency of a disk, in seconds
// per IO, which it derives from the disk's operation time and operations
// (pipelines/services/detect/suspects_disk.go).
const diskLatencyMetric = "spikehunt.disk.operation_latency"

// counterRate renders a suspect's rate in the unit people read it in: a
// time counter as the share of one CPU it took ("4.0%"), a disk's latency
// per IO ("28 ms/IO"), a count per second ("861/s").
func counterRate(metric string, v float64) string {
	switch {
	case timeMetrics[metric]:
		return finePct(v)
	case metric == diskLatencyMetric:
		return ioLatency(v) + "/IO"
	}
	return rate(v) + "/s"
}

// ioLatency renders seconds per IO: "2.8 s", "28 ms", "0.13 ms".
func ioLatency(s float64) string {
	switch {
	case s >= 1:
		return strconv.FormatFloat(s, 'f', 1, 64) + " s"
	case s >= 0.01:
		return strconv.FormatFloat(s*1000, 'f', 0, 64) + " ms"
	}
	return strconv.FormatFloat(s*1000, 'g', 2, 64) + " ms"
}

// coarseStepNote says when the counters of the spike windows' hosts are
// read less often than the windows last: their DURING is then the stall's
// excess spread over the whole step. "" when they are not, or unknown.
func coarseStepNote(ctx context.Context, st store.Store, suspects []suspectView) (string, error) {
	if len(suspects) == 0 {
		return "", nil
	}
	ids, hosts := map[string]bool{}, map[string]bool{}
	from, to := suspects[0].WindowStart, suspects[0].WindowStart
	for _, x := range suspects {
		ids[x.SpikeID], hosts[x.Host] = true, true
		if x.WindowStart.Before(from) {
			from = x.WindowStart
		}
		if x.WindowStart.After(to) {
			to = x.WindowStart
		}
	}
	type steps struct{ stepS, windowS float64 }
	rows, err := readRows(ctx, st, "counters", `SELECT
		toFloat64(ifNull((SELECT quantileExact(0.5)(interval_ms) FROM counters WHERE `+Where{}.In("host", keys(hosts)).
		During("ts_start", from.Add(-time.Hour), to.Add(time.Hour)).String()+`), 0)) / 1000 AS step_s,
		toFloat64(ifNull((SELECT quantileExact(0.5)(toUnixTimestamp64Milli(window_end) - toUnixTimestamp64Milli(window_start))
			FROM spikes FINAL WHERE `+Live().In("spike_id", keys(ids)).String()+`), 0)) / 1000 AS window_s`,
		func(c *columns) func(int) steps {
			step, window := col[float64](c, "step_s"), col[float64](c, "window_s")
			return func(i int) steps { return steps{finite(step.Row(i)), finite(window.Row(i))} }
		})
	if err != nil || len(rows) == 0 || rows[0].stepS <= rows[0].windowS || rows[0].windowS <= 0 {
		return "", err
	}
	return fmt.Sprintf("Counters every %s, coarser than the %s spike windows: DURING is diluted, the stall's excess spread over the step.",
		SpokenDuration(time.Duration(rows[0].stepS*float64(time.Second))), SpokenDuration(time.Duration(rows[0].windowS*float64(time.Second)))), nil
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// countRows counts the live rows of table (spikes, with FINAL) matching cond.
func countRows(ctx context.Context, st store.Store, table string, cond Where) (int, error) {
	n, err := readRows(ctx, st, table, "SELECT count() AS n FROM "+table+" FINAL WHERE "+cond.String(), func(c *columns) func(int) uint64 {
		n := col[uint64](c, "n")
		return func(i int) uint64 { return n.Row(i) }
	})
	if err != nil || len(n) == 0 {
		return 0, err
	}
	return int(n[0]), nil
}

// withSuspects keeps the spike windows of spikes that have live suspects.
func withSuspects(spikes Where) Where {
	return spikes.And("spike_id IN (SELECT spike_id FROM spike_suspects FINAL WHERE " + Live().String() + ")")
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
// spikes by (metric, mode, device): in how many windows the family was the
// top suspect, in how many it was a suspect at all, on which CPUs.
func loadSuspectFamilies(ctx context.Context, st store.Store, spikes Where) ([]suspectFamilyView, error) {
	inSpikes := Live().And("spike_id IN (SELECT spike_id FROM spikes FINAL WHERE " + spikes.String() + ")")
	families, err := readRows(ctx, st, "spike_suspects", `SELECT metric, mode, device,
		countIf(rank = 1) AS rank1, uniqExact(spike_id) AS spikes, uniqExact(host) AS hosts,
		ifNull((SELECT count() FROM spikes FINAL WHERE `+spikes.String()+`), 0) AS total
	FROM spike_suspects FINAL WHERE `+inSpikes.String()+`
	GROUP BY metric, mode, device
	ORDER BY rank1 DESC, spikes DESC, metric, mode, device`, func(c *columns) func(int) suspectFamilyView {
		metric, mode, device := col[string](c, "metric"), col[string](c, "mode"), col[string](c, "device")
		rank1, spikes, hosts, total := col[uint64](c, "rank1"), col[uint64](c, "spikes"), col[uint64](c, "hosts"), col[uint64](c, "total")
		return func(i int) suspectFamilyView {
			return suspectFamilyView{Metric: metric.Row(i), Mode: mode.Row(i), Device: device.Row(i),
				Rank1Spikes: int(rank1.Row(i)), Spikes: int(spikes.Row(i)), Hosts: int(hosts.Row(i)),
				TotalSpikes: int(total.Row(i))}
		}
	})
	if err != nil || len(families) == 0 {
		return families, err
	}
	cpus, err := readFamilyCPUs(ctx, st, inSpikes)
	if err != nil {
		return nil, err
	}
	for i := range families {
		f := &families[i]
		f.CPUs = cpusOf(cpus, f.Metric, f.Mode, f.Device)
	}
	return families, nil
}

// noSuspectsReason says why the spike window id has no suspects: its host
// sent no counters during the window, or none before it to compare with,
// or none of them moved beyond its baseline. The during and baseline
// ranges are the detector's (suspectMargin, suspectBaseline, suspectGuard
// in causes.go).
func noSuspectsReason(ctx context.Context, st store.Store, id string) (string, error) {
	type series struct {
		host          string
		start, end    time.Time
		during, basis uint64
	}
	// Timestamps as DateTime64(6) literals, compared in the table's type.
	r, err := readRows(ctx, st, "counters", `WITH w AS (SELECT host, window_start, window_end FROM spikes FINAL
			WHERE `+Live().Equals("spike_id", id).String()+` LIMIT 1)
		SELECT any(w.host) AS host, any(w.window_start) AS start, any(w.window_end) AS end,
			uniqExactIf((metric, cpu, device, mode), c.ts_start < w.window_end + toIntervalMillisecond(`+strconv.FormatInt(suspectMargin.Milliseconds(), 10)+`)
				AND c.ts_start + toIntervalMillisecond(c.interval_ms) > w.window_start - toIntervalMillisecond(`+strconv.FormatInt(suspectMargin.Milliseconds(), 10)+`)) AS during,
			uniqExactIf((metric, cpu, device, mode), c.ts_start >= w.window_start - toIntervalSecond(`+strconv.FormatInt(int64(suspectBaseline.Seconds()), 10)+`)
				AND c.ts_start + toIntervalMillisecond(c.interval_ms) <= w.window_start - toIntervalSecond(`+strconv.FormatInt(int64(suspectGuard.Seconds()), 10)+`)) AS basis
		FROM w LEFT JOIN (SELECT * FROM counters WHERE host IN (SELECT host FROM w)
			AND ts_start >= (SELECT window_start FROM w) - toIntervalSecond(`+strconv.FormatInt(int64((suspectBaseline+time.Minute).Seconds()), 10)+`)
			AND ts_start < (SELECT window_end FROM w) + toIntervalMinute(1)) AS c ON c.host = w.host`,
		func(c *columns) func(int) series {
			host, start, end := col[string](c, "host"), col[time.Time](c, "start"), col[time.Time](c, "end")
			during, basis := col[uint64](c, "during"), col[uint64](c, "basis")
			return func(i int) series {
				return series{host.Row(i), start.Row(i).UTC(), end.Row(i).UTC(), during.Row(i), basis.Row(i)}
			}
		})
	if err != nil || len(r) == 0 {
		return "", err
	}
	x := r[0]
	window := fmt.Sprintf("the window %s–%s UTC", utcTime(x.start), x.end.Format("15:04:05"))
	switch {
	case x.during == 0:
		return fmt.Sprintf("no kernel counters of host %s cover %s (its agent sent none then, or they were not ingested)", x.host, window), nil
	case x.basis == 0:
		return fmt.Sprintf("host %s has %d counter series during %s but none in the %s before it, so nothing to compare them with",
			x.host, x.during, window, spikehunt.FormatDuration(suspectBaseline)), nil
	}
	return fmt.Sprintf("none of the %d counter series of host %s moved beyond its baseline during %s: the time went inside the process (a sleep, a lock, a pause); off-CPU stacks show where",
		x.during, x.host, window), nil
}
