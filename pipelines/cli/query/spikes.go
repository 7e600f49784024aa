package query

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/captures"
	"github.com/spikehunt/spikehunt/internal/store"
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

// Spikes is `spikehunt spikes`.
func Spikes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return spikesCommand.run(ctx, args, stdout, stderr)
}

var spikesCommand = command{
	name:     "spikes",
	synopsis: "Lists spike windows, one line per host and window, newest first, with each\nwindow's top suspect, and how many of the service's hosts had one: is it one\nmachine or all of them?",
	rows:     "a spike window is [window_start, window_end)",
	columns:  spikesColumns,
	setup: func(fs *flag.FlagSet) query {
		withoutCaptures := fs.Bool("without-captures", false, "only spike windows that no capture covers (no captures row lists them in spike_ids)")
		return query{load: func(ctx context.Context, st store.Store, s Scope) (answer, error) {
			cond := s.Filter(Live(), Window)
			what := "spikes"
			if *withoutCaptures {
				cond = cond.And(captures.WithoutCaptures)
				what = "spikes without captures"
			}
			spikes, err := loadSpikes(ctx, st, s, cond)
			if err != nil {
				return answer{}, err
			}
			summary := func() (Summary, error) { return spikeSummary(ctx, st, s, cond, what, len(spikes)) }
			return answerOf(spikes, s.none(what), func(w io.Writer) error {
				if err := printSpikes(w, spikes, s.Service == ""); err != nil {
					return err
				}
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

func printSpikes(w io.Writer, spikes []spikeView, withService bool) error {
	tw := newTable(w)
	header := "HOST\tHW_CLASS\tWINDOW_START (UTC)\tDURATION\tPEAK_MS\tSCORE\tTOP_SUSPECT"
	if withService {
		header = "SERVICE\t" + header
	}
	fmt.Fprintln(tw, "SPIKE\t"+header)
	ids := make([]string, len(spikes))
	for i, sp := range spikes {
		ids[i] = sp.SpikeID
	}
	short := shortIDs(ids)
	for _, sp := range spikes {
		fmt.Fprintf(tw, "%s\t", short[sp.SpikeID])
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
	return tw.Flush()
}

// loadSpikes reads the spike windows matching cond, newest first, with each
// one's top suspect.
func loadSpikes(ctx context.Context, st store.Store, s Scope, cond Where) ([]spikeView, error) {
	spikes, err := readRows(ctx, st, "spikes", `SELECT spike_id, service, host, hw_class, window_start, window_end,
		peak_us, baseline_us, score, detector_version
	FROM spikes FINAL WHERE `+cond.String()+`
	ORDER BY window_start DESC, service, host`+s.limitClause(), func(c *columns) func(int) spikeView {
		id, service, host, hwClass, version := col[string](c, "spike_id"), col[string](c, "service"), col[string](c, "host"),
			col[string](c, "hw_class"), col[string](c, "detector_version")
		start, end := col[time.Time](c, "window_start"), col[time.Time](c, "window_end")
		peak := col[uint32](c, "peak_us")
		baseline, score := col[float64](c, "baseline_us"), col[float64](c, "score")
		return func(i int) spikeView {
			v := spikeView{
				SpikeID: id.Row(i), Service: service.Row(i), Host: host.Row(i), HWClass: hwClass.Row(i),
				WindowStart: start.Row(i).UTC(), WindowEnd: end.Row(i).UTC(),
				PeakMS: float64(peak.Row(i)) / 1000, BaselineMS: finite(baseline.Row(i)) / 1000, Score: finite(score.Row(i)),
				DetectorVersion: version.Row(i),
			}
			v.DurationS = v.WindowEnd.Sub(v.WindowStart).Seconds()
			return v
		}
	})
	if err != nil || len(spikes) == 0 {
		return spikes, err
	}
	ids := make([]string, len(spikes))
	for i, sp := range spikes {
		ids[i] = sp.SpikeID
	}
	tops, err := topSuspects(ctx, st, ids)
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
func topSuspects(ctx context.Context, st store.Store, ids []string) (map[string]*suspectFamily, error) {
	type suspectRow struct {
		spike, metric, mode, device string
		rank, cpu                   int
	}
	list, err := readRows(ctx, st, "spike_suspects", `SELECT spike_id, rank, metric, mode, device, cpu
	FROM spike_suspects FINAL
	WHERE `+Live().In("spike_id", ids).String()+`
	ORDER BY spike_id, rank`, func(c *columns) func(int) suspectRow {
		id, metric, mode, device := col[string](c, "spike_id"), col[string](c, "metric"), col[string](c, "mode"), col[string](c, "device")
		rank, cpu := col[uint8](c, "rank"), col[int16](c, "cpu")
		return func(i int) suspectRow {
			return suspectRow{spike: id.Row(i), rank: int(rank.Row(i)), metric: metric.Row(i),
				mode: mode.Row(i), device: device.Row(i), cpu: int(cpu.Row(i))}
		}
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
		f.Label = SuspectLabel(f.Metric, f.Mode, f.Device, f.CPUs)
	}
	return tops, nil
}

// spikeSummary is the line under the table: how many windows, on how many of
// the hosts that reported latency in the range.
func spikeSummary(ctx context.Context, st store.Store, s Scope, cond Where, what string, shown int) (Summary, error) {
	type counts struct{ windows, hosts, fleet uint64 }
	c, err := readRows(ctx, st, "spikes", `SELECT count() AS n, uniqExact(host) AS hosts,
		ifNull((SELECT uniqExact(host) FROM latency_1s WHERE `+s.Filter(Where{}, Second).String()+`), 0) AS fleet
	FROM spikes FINAL WHERE `+cond.String(), func(c *columns) func(int) counts {
		n, hosts, fleet := col[uint64](c, "n"), col[uint64](c, "hosts"), col[uint64](c, "fleet")
		return func(i int) counts { return counts{n.Row(i), hosts.Row(i), fleet.Row(i)} }
	})
	if err != nil {
		return Summary{}, err
	}
	n, hosts, fleet := int64(c[0].windows), int64(c[0].hosts), int64(c[0].fleet)
	var b strings.Builder
	noun := "spike windows"
	if n == 1 {
		noun = "spike window"
	}
	fmt.Fprintf(&b, "%d %s%s", n, noun, strings.TrimPrefix(what, "spikes"))
	switch {
	case s.Host != "":
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
	sum := s.summary(int(n), shown, b.String())
	h, f := int(hosts), int(fleet)
	sum.HostsWithSpikes, sum.HostsReporting = &h, &f
	return sum, nil
}
