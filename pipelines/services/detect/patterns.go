package detect

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/workload"
)

// findPatterns classifies the spike windows of service over the look-back
// ending at cfg.To, writes a patterns row per pattern found, and retracts
// the rows of the same look-back end that an earlier pass wrote and this one
// no longer finds. It returns the patterns and the retracted pattern ids.
// fleet is the look-back's fleet when the spike scan saw it, else nil.
func findPatterns(ctx context.Context, st store.Store, cfg *Config, service string, stamp time.Time, fleet *lookbackFleet) ([]Pattern, []string, error) {
	end := cfg.To
	start := end.Add(-cfg.Patterns.Lookback)
	hosts, err := hostSpikes(ctx, st, service, start, end)
	if err != nil {
		return nil, nil, err
	}
	var patterns []Pattern
	if len(hosts) > 0 {
		if fleet == nil {
			if fleet, err = fleetOf(ctx, st, service, start, end); err != nil {
				return nil, nil, err
			}
		}
		found := classify(FleetSpikes{Service: service, LookbackStart: start, LookbackEnd: end, DataFrom: fleet.dataFrom, Fleet: fleet.hosts, Hosts: hosts}, cfg.Patterns)
		if len(found) > 0 {
			illusion, err := averagedIllusion(ctx, st, service, start, end, len(fleet.hosts))
			if err != nil {
				return nil, nil, err
			}
			families, err := suspectFamilies(ctx, st, service, start, end, cfg.Patterns.SuspectTopRank)
			if err != nil {
				return nil, nil, err
			}
			spikes := map[string]int{}
			for _, h := range hosts {
				spikes[h.Host] = len(h.Starts)
			}
			for _, c := range found {
				p := c.Pattern
				affected := make(map[string]bool, len(c.hosts))
				for _, h := range c.hosts {
					affected[h] = true
				}
				p.IllusionShare = illusion
				p.Suspects = patternSuspects(affected, spikes, families, cfg.Patterns)
				p.DetectedAt, p.DetectorVer = stamp, DetectorVersion
				patterns = append(patterns, p)
			}
		}
	}
	if err := writePatterns(ctx, st, patterns, stamp); err != nil {
		return nil, nil, err
	}
	gone, err := retractPatterns(ctx, st, service, end, stamp)
	if err != nil {
		return nil, nil, err
	}
	return patterns, gone, nil
}

// hostSpikes reads the live spike windows of the look-back, per host: the
// count and the sorted starts.
func hostSpikes(ctx context.Context, st store.Store, service string, from, to time.Time) ([]HostSpikes, error) {
	q := fmt.Sprintf(`SELECT toString(host) AS host, toString(any(hw_class)) AS hw_class,
    arraySort(groupArray(toUnixTimestamp64Milli(window_start))) AS starts
FROM spikes FINAL
WHERE service = %s AND window_start >= %s AND window_start < %s AND is_deleted = 0
GROUP BY host ORDER BY host`, store.QuoteString(service), msLit(from), msLit(to))
	var out []HostSpikes
	err := st.Query(ctx, q, func(b store.Block) error {
		strs, err := columns[string](b, "host", "hw_class")
		if err != nil {
			return err
		}
		starts, err := column[[]int64](b, "starts")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			ms := starts.Row(i)
			h := HostSpikes{Host: strs[0].Row(i), HWClass: strs[1].Row(i), Starts: make([]time.Time, len(ms))}
			for k, m := range ms {
				h.Starts[k] = time.UnixMilli(m).UTC()
			}
			out = append(out, h)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("detect: spike windows of %s over the look-back: %w", service, err)
	}
	return out, nil
}

// fleetOf reads the fleet of the look-back (host → hardware class) and
// when its data begins, in one in-order scan of two key columns, for a
// pass whose spike scan did not cover the look-back.
func fleetOf(ctx context.Context, st store.Store, service string, from, to time.Time) (*lookbackFleet, error) {
	q := fmt.Sprintf(`SELECT toString(host) AS host, toString(hw_class) AS hw_class, toInt64(toUnixTimestamp(min(ts))) AS first
FROM latency_1s
WHERE service = %s AND ts >= %s AND ts < %s
GROUP BY host, hw_class`, store.QuoteString(service), secLit(from), secLit(to))
	fleet := map[string]string{}
	var first int64
	err := st.Query(ctx, q, func(b store.Block) error {
		strs, err := columns[string](b, "host", "hw_class")
		if err != nil {
			return err
		}
		f, err := column[int64](b, "first")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			fleet[strs[0].Row(i)] = strs[1].Row(i)
			if v := f.Row(i); first == 0 || v < first {
				first = v
			}
		}
		return nil
	}, store.WithSetting("optimize_aggregation_in_order", "1"))
	if err != nil {
		return nil, fmt.Errorf("detect: fleet of %s: %w", service, err)
	}
	out := &lookbackFleet{hosts: fleet}
	if first > 0 {
		out.dataFrom = time.Unix(first, 0).UTC()
	}
	return out, nil
}

// averagedIllusion is the averaged-latency illusion of the look-back:
//
//	illusion_share = 1 − A_clean / A_all
//
// where A_all is the mean over host-minutes of the host's weighted p99 in
// that minute — what a per-host p99 panel averaged across the fleet
// shows — and A_clean the same with the seconds inside spike windows left
// out (host-minutes that were all spike are skipped). A fleet whose p99
// rests on its spikes has a share near 1: the "uniform regression" is
// spikes. Per minute, not one p99 over the whole look-back: 1 s stalls
// every 15 min are 0.1% of requests and never move a look-back-wide p99,
// yet dominate every host-minute they land in.
//
// It merges every second's t-digest (about 150 ns a row), so a pass
// computes it only when it found a pattern, and over a fleet of more than
// illusionSampleHosts hosts on a deterministic sample of about that many
// (whole hosts, chosen by a hash of the name: the rows of a host are
// contiguous, so the others' granules are skipped, not just filtered).
func averagedIllusion(ctx context.Context, st store.Store, service string, from, to time.Time, fleet int) (float64, error) {
	q := averagedIllusionSQL(service, from, to, fleet)
	var sumAll, sumClean float64
	var minutes, cleanMinutes int64
	err := st.Query(ctx, q, func(b store.Block) error {
		sums, err := columns[float64](b, "sum_all", "sum_clean")
		if err != nil {
			return err
		}
		counts, err := columns[int64](b, "minutes", "clean_minutes")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			sumAll += sums[0].Row(i)
			sumClean += sums[1].Row(i)
			minutes += counts[0].Row(i)
			cleanMinutes += counts[1].Row(i)
		}
		return nil
	}, store.WithSetting("optimize_aggregation_in_order", "1"))
	if err != nil {
		return 0, fmt.Errorf("detect: averaged p99 of %s: %w", service, err)
	}
	return illusionShare(sumAll, minutes, sumClean, cleanMinutes), nil
}

// averagedIllusionSQL is averagedIllusion's statement. Windows that
// started before the look-back may reach into it, so spike windows are
// read from an hour before. The spike seconds are keyed by one UInt64
// (the host's hash, computed once per distinct host of a LowCardinality
// column, xor the second): a set of those is several times faster to
// probe than (host, second) tuples.
func averagedIllusionSQL(service string, from, to time.Time, fleet int) string {
	p := averagedIllusionParams{Service: service, SpikesFrom: from.Add(-time.Hour), From: from, To: to}
	if m := (fleet + illusionSampleHosts - 1) / illusionSampleHosts; m > 1 {
		p.SampleEvery = m
	}
	return render(averagedIllusionTmpl, p)
}

// averagedIllusionParams are the values averagedIllusionTmpl names.
type averagedIllusionParams struct {
	Service string
	// The look-back is [From, To); spike windows starting in
	// [SpikesFrom, To) are left out of the clean p99.
	SpikesFrom, From, To time.Time
	// SampleEvery, when more than 0, keeps the hosts whose name hashes to
	// 0 modulo it.
	SampleEvery int
}

// averagedIllusionTmpl: "sample" is the host sample's condition, on both
// tables.
var averagedIllusionTmpl = sqlTemplate("averaged illusion", `
{{- define "sample"}}{{if .SampleEvery}} AND cityHash64(host) % {{.SampleEvery}} = 0{{end}}{{end -}}
SELECT sum(p_all) AS sum_all, toInt64(count()) AS minutes,
    sumIf(p_clean, isFinite(p_clean)) AS sum_clean, toInt64(countIf(isFinite(p_clean))) AS clean_minutes
FROM (
    SELECT host, hw_class, toStartOfMinute(ts) AS m,
        toFloat64(quantilesTDigestWeightedMerge(0.99)(quantiles_us)[1]) AS p_all,
        toFloat64(quantilesTDigestWeightedMergeIf(0.99)(quantiles_us,
            bitXor(cityHash64(host), toUInt64(toUInt32(ts))) NOT IN (
                SELECT bitXor(cityHash64(host), toUInt64(arrayJoin(range(toUInt32(toUnixTimestamp(window_start)), toUInt32(toUnixTimestamp(window_end))))))
                FROM spikes FINAL
                WHERE service = {{str .Service}} AND window_start >= {{ms .SpikesFrom}} AND window_start < {{ms .To}} AND is_deleted = 0{{template "sample" .}}
        ))[1]) AS p_clean
    FROM latency_1s
    WHERE service = {{str .Service}} AND ts >= {{sec .From}} AND ts < {{sec .To}}{{template "sample" .}}
    GROUP BY host, hw_class, m
)`)

// illusionSampleHosts is about how many hosts the illusion share is
// measured on.
const illusionSampleHosts = 100

// illusionShare is 1 − A_clean / A_all from the sums, clamped to 0..1.
func illusionShare(sumAll float64, minutes int64, sumClean float64, cleanMinutes int64) float64 {
	if minutes == 0 || cleanMinutes == 0 || sumAll <= 0 {
		return 0
	}
	all, clean := sumAll/float64(minutes), sumClean/float64(cleanMinutes)
	return math.Max(0, math.Min(1, 1-clean/all))
}

// suspectFamily is one counter family among one host's top suspects over
// the look-back.
type suspectFamily struct {
	host, metric, mode, device string
	spikes                     int // of the host's spike windows with it in their top ranks
	cpus                       []int16
	score                      float64 // mean deviation
}

func suspectFamilies(ctx context.Context, st store.Store, service string, from, to time.Time, topRank int) ([]suspectFamily, error) {
	q := fmt.Sprintf(`SELECT toString(host) AS host, toString(metric) AS metric, toString(mode) AS mode, toString(device) AS device,
    toInt64(uniqExact(spike_id)) AS spikes, groupArray(cpu) AS cpus, avg(deviation) AS score
FROM spike_suspects FINAL
WHERE service = %s AND window_start >= %s AND window_start < %s AND is_deleted = 0 AND rank <= %d
GROUP BY host, metric, mode, device
ORDER BY host, metric, mode, device`, store.QuoteString(service), msLit(from), msLit(to), topRank)
	var out []suspectFamily
	err := st.Query(ctx, q, func(b store.Block) error {
		strs, err := columns[string](b, "host", "metric", "mode", "device")
		if err != nil {
			return err
		}
		spikes, err := column[int64](b, "spikes")
		if err != nil {
			return err
		}
		cpus, err := column[[]int16](b, "cpus")
		if err != nil {
			return err
		}
		score, err := column[float64](b, "score")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			out = append(out, suspectFamily{strs[0].Row(i), strs[1].Row(i), strs[2].Row(i), strs[3].Row(i),
				int(spikes.Row(i)), cpus.Row(i), score.Row(i)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("detect: suspects of %s over the look-back: %w", service, err)
	}
	return out, nil
}

// patternSuspects picks the counter families found among the top suspects
// of at least SuspectMinShare of the affected hosts and of their spike
// windows, most widespread first.
func patternSuspects(affected map[string]bool, spikes map[string]int, families []suspectFamily, cfg PatternConfig) []PatternSuspect {
	type agg struct {
		PatternSuspect
		spikes   int
		scoreSum float64
		cpuCount map[int16]int
	}
	byKey := map[[3]string]*agg{}
	totalSpikes := 0
	for h := range affected {
		totalSpikes += spikes[h]
	}
	for _, f := range families {
		if !affected[f.host] {
			continue
		}
		// A Deployment's pods have a name of their own on every host: the
		// family is the workload they share.
		device := workload.Family(f.metric, f.device)
		k := [3]string{f.metric, f.mode, device}
		a := byKey[k]
		if a == nil {
			a = &agg{PatternSuspect: PatternSuspect{Metric: f.metric, Mode: f.mode, Device: device}, cpuCount: map[int16]int{}}
			byKey[k] = a
		}
		a.Hosts++
		a.spikes += f.spikes
		a.scoreSum += f.score * float64(f.spikes)
		for _, c := range f.cpus {
			if c >= 0 {
				a.cpuCount[c]++
			}
		}
	}
	minHosts := math.Max(1, cfg.SuspectMinShare*float64(len(affected)))
	var out []agg
	for _, a := range byKey {
		if float64(a.Hosts) < minHosts || float64(a.spikes) < cfg.SuspectMinShare*float64(totalSpikes) {
			continue
		}
		a.Score = a.scoreSum / float64(a.spikes)
		for c := range a.cpuCount {
			a.CPUs = append(a.CPUs, int(c))
		}
		slices.SortFunc(a.CPUs, func(x, y int) int {
			if c := cmp.Compare(a.cpuCount[int16(y)], a.cpuCount[int16(x)]); c != 0 {
				return c
			}
			return cmp.Compare(x, y)
		})
		out = append(out, *a)
	}
	slices.SortFunc(out, func(x, y agg) int {
		if c := cmp.Compare(y.spikes, x.spikes); c != 0 {
			return c
		}
		if c := cmp.Compare(y.Score, x.Score); c != 0 {
			return c
		}
		return strings.Compare(x.Metric+x.Mode+x.Device, y.Metric+y.Mode+y.Device)
	})
	if len(out) > cfg.MaxSuspects {
		out = out[:cfg.MaxSuspects]
	}
	if len(out) == 0 {
		return nil
	}
	ps := make([]PatternSuspect, len(out))
	for i, a := range out {
		ps[i] = a.PatternSuspect
	}
	return ps
}

// writePatterns inserts the patterns as one SELECT per pattern (UNION
// ALL): a few rows per pass. Not as VALUES: the Map and Array(Tuple)
// columns and the timestamps are written with functions, and
// serve-clickhouse never lets a Values insert evaluate an expression
// (docs/hardening.md).
func writePatterns(ctx context.Context, st store.Store, ps []Pattern, stamp time.Time) error {
	if len(ps) == 0 {
		return nil
	}
	if err := st.Exec(ctx, writePatternsSQL(ps, stamp)); err != nil {
		return fmt.Errorf("detect: write %d patterns: %w", len(ps), err)
	}
	return nil
}

// writePatternsSQL is writePatterns' INSERT of ps (one or more), stamped
// detected_at = stamp.
func writePatternsSQL(ps []Pattern, stamp time.Time) string {
	rows := make([]patternValues, len(ps))
	for i, p := range ps {
		rows[i].Pattern = p
		classes := make([]string, 0, len(p.HWClassSkew))
		for c := range p.HWClassSkew {
			classes = append(classes, c)
		}
		slices.Sort(classes)
		for _, c := range classes {
			rows[i].Skew = append(rows[i].Skew, classSkew{c, p.HWClassSkew[c]})
		}
	}
	return render(writePatternsTmpl, writePatternsParams{Rows: rows, Version: DetectorVersion, Stamp: stamp})
}

// writePatternsParams are the values writePatternsTmpl names.
type writePatternsParams struct {
	Rows    []patternValues
	Version string
	Stamp   time.Time
}

// patternValues is one pattern with its hardware-class skew in class
// order (a map literal's entries, sorted so the statement is stable).
type patternValues struct {
	Pattern
	Skew []classSkew
}

type classSkew struct {
	Class string
	Skew  float64
}

// writePatternsTmpl: the row's values in the column list's order. Floats
// go through finite: a NaN or ±Inf score would be stored as one, and no
// reader could compare it.
var writePatternsTmpl = sqlTemplate("write patterns", `INSERT INTO patterns (pattern_id, service, class, modifiers, lookback_start, lookback_end, hosts_affected, hosts_total,
    recurrence_interval_s, regularity, synchronicity, hw_class_skew, illusion_share, suspects, detector_version, detected_at, is_deleted)
{{range $i, $p := .Rows}}{{if $i}}
UNION ALL
{{end}}SELECT {{str $p.ID}}, {{str $p.Service}}, {{str $p.Class}}, {{strs $p.Modifiers}},
    {{ms $p.LookbackStart}}, {{ms $p.LookbackEnd}}, {{$p.HostsAffected}}, {{$p.HostsTotal}},
    {{float $p.RecurrenceInterval.Seconds}}, {{float (finite $p.Regularity)}}, {{float (finite $p.Synchronicity)}},
    map({{range $k, $c := $p.Skew}}{{if $k}}, {{end}}{{str $c.Class}}, {{float (finite $c.Skew)}}{{end}}),
    {{float (finite $p.IllusionShare)}},
    [{{range $k, $s := $p.Suspects}}{{if $k}}, {{end}}({{str $s.Metric}}, {{str $s.Mode}}, {{str $s.Device}}, toUInt32({{$s.Hosts}}), {{float (finite $s.Score)}}){{end}}],
    {{str $.Version}}, {{ms $.Stamp}}, 0{{end}}`)

// retractPatterns retracts the rows of service at look-back end `end`
// that the pass at stamp did not write, and returns their pattern ids.
func retractPatterns(ctx context.Context, st store.Store, service string, end, stamp time.Time) ([]string, error) {
	where := fmt.Sprintf(`service = %s AND lookback_end = %s AND is_deleted = 0 AND detected_at < %s`,
		store.QuoteString(service), msLit(end), msLit(stamp))
	var ids []string
	err := st.Query(ctx, "SELECT pattern_id FROM patterns FINAL WHERE "+where+" ORDER BY pattern_id", func(b store.Block) error {
		c, err := column[string](b, "pattern_id")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			ids = append(ids, c.Row(i))
		}
		return nil
	})
	if err != nil || len(ids) == 0 {
		if err != nil {
			err = fmt.Errorf("detect: find stale patterns of %s: %w", service, err)
		}
		return nil, err
	}
	q := fmt.Sprintf(`INSERT INTO patterns (pattern_id, service, class, modifiers, lookback_start, lookback_end, hosts_affected, hosts_total,
    recurrence_interval_s, regularity, synchronicity, hw_class_skew, illusion_share, suspects, detector_version, detected_at, is_deleted)
SELECT pattern_id, service, class, modifiers, lookback_start, lookback_end, hosts_affected, hosts_total,
    recurrence_interval_s, regularity, synchronicity, hw_class_skew, illusion_share, suspects, %s, %s, 1
FROM patterns FINAL WHERE %s`, store.QuoteString(DetectorVersion), msLit(stamp), where)
	if err := st.Exec(ctx, q); err != nil {
		return nil, fmt.Errorf("detect: retract %d stale patterns of %s: %w", len(ids), service, err)
	}
	return ids, nil
}

// finite maps NaN and ±Inf to values the table can hold and readers can
// compare: 0 for NaN, ±MaxFloat64 for infinities.
func finite(f float64) float64 {
	switch {
	case math.IsNaN(f):
		return 0
	case math.IsInf(f, 1):
		return math.MaxFloat64
	case math.IsInf(f, -1):
		return -math.MaxFloat64
	}
	return f
}
