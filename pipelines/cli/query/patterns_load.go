package query

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/workload"
)

// LoadPatterns reads the latest version of each pattern evaluated in the
// scope's range, most widespread first, and fills in what the spikes
// tables know. --host keeps the patterns of the services the host had
// spike windows for.
func LoadPatterns(ctx context.Context, st store.Store, s Scope) ([]Pattern, error) {
	p, _, err := loadPatterns(ctx, st, s)
	return p, err
}

// loadPatterns is LoadPatterns, and how many patterns it found before
// --limit.
func loadPatterns(ctx context.Context, st store.Store, s Scope) ([]Pattern, int, error) {
	cond := s.Range(Live(), Lookback).Equals("service", s.Service)
	if s.Host != "" {
		// Patterns are fleet-level rows without hosts: a host "has" the
		// patterns of the services it had spike windows for.
		cond = cond.And("service IN (SELECT service FROM spikes FINAL WHERE " + s.Filter(Live(), Window).String() + ")")
	}
	patterns, err := readRows(ctx, st, "patterns", `SELECT pattern_id, service, class, modifiers,
		lookback_start, lookback_end, hosts_affected, hosts_total, recurrence_interval_s, regularity, synchronicity,
		hw_class_skew, illusion_share,
		tupleElement(suspects, 'metric') AS suspect_metrics, tupleElement(suspects, 'mode') AS suspect_modes,
		tupleElement(suspects, 'device') AS suspect_devices, tupleElement(suspects, 'hosts') AS suspect_hosts,
		tupleElement(suspects, 'score') AS suspect_scores,
		detector_version, detected_at
	FROM patterns FINAL WHERE `+cond.String()+`
	ORDER BY service, pattern_id, lookback_end DESC
	LIMIT 1 BY service, pattern_id`, func(c *columns) func(int) Pattern {
		id, service, class, version := col[string](c, "pattern_id"), col[string](c, "service"), col[string](c, "class"), col[string](c, "detector_version")
		modifiers := col[[]string](c, "modifiers")
		start, end, detected := col[time.Time](c, "lookback_start"), col[time.Time](c, "lookback_end"), col[time.Time](c, "detected_at")
		affected, total := col[uint32](c, "hosts_affected"), col[uint32](c, "hosts_total")
		interval, regularity, sync, illusion := col[float64](c, "recurrence_interval_s"), col[float64](c, "regularity"),
			col[float64](c, "synchronicity"), col[float64](c, "illusion_share")
		skew := col[map[string]float64](c, "hw_class_skew")
		metrics, modes, devices := col[[]string](c, "suspect_metrics"), col[[]string](c, "suspect_modes"), col[[]string](c, "suspect_devices")
		hosts, scores := col[[]uint32](c, "suspect_hosts"), col[[]float64](c, "suspect_scores")
		return func(i int) Pattern {
			p := Pattern{
				PatternID: id.Row(i), Service: service.Row(i), Class: class.Row(i),
				Modifiers:     append([]string{}, modifiers.Row(i)...),
				LookbackStart: start.Row(i).UTC(), LookbackEnd: end.Row(i).UTC(),
				HostsAffected: int(affected.Row(i)), HostsTotal: int(total.Row(i)),
				RecurrenceIntervalS: finite(interval.Row(i)), Regularity: finite(regularity.Row(i)),
				Synchronicity: finite(sync.Row(i)), IllusionShare: finite(illusion.Row(i)),
				HWClassSkew:     map[string]float64{},
				DetectorVersion: version.Row(i), DetectedAt: detected.Row(i).UTC(),
			}
			for k, v := range skew.Row(i) {
				p.HWClassSkew[k] = v
			}
			m, mo, d, h, sc := metrics.Row(i), modes.Row(i), devices.Row(i), hosts.Row(i), scores.Row(i)
			p.Suspects = make([]PatternSuspect, len(m))
			for j := range m {
				p.Suspects[j] = PatternSuspect{Metric: m[j], Mode: mo[j], Device: d[j], Hosts: int(h[j]), Score: sc[j]}
			}
			return p
		}
	})
	if err != nil {
		return nil, 0, err
	}
	for i := range patterns {
		p := &patterns[i]
		p.HostsAffectedShare = share(int64(p.HostsAffected), int64(p.HostsTotal))
		sort.SliceStable(p.Suspects, func(a, b int) bool { return p.Suspects[a].Score > p.Suspects[b].Score })
	}
	sort.SliceStable(patterns, func(a, b int) bool {
		pa, pb := patterns[a], patterns[b]
		if pa.HostsAffectedShare != pb.HostsAffectedShare {
			return pa.HostsAffectedShare > pb.HostsAffectedShare
		}
		return pa.Service < pb.Service
	})
	found := len(patterns)
	if s.limit > 0 && len(patterns) > s.limit {
		patterns = patterns[:s.limit]
	}
	// Two small queries per pattern shown: patterns are few (a handful per
	// service), and each query reads one service's look-back only.
	for i := range patterns {
		if err := enrichPattern(ctx, st, &patterns[i]); err != nil {
			return nil, 0, err
		}
		patterns[i].Description = describePattern(patterns[i])
	}
	return patterns, found, nil
}

// familyCPU is how often one counter family moved on one CPU among spike
// suspects.
type familyCPU struct {
	metric, mode, device string
	cpuCount
}

// readFamilyCPUs counts the per-CPU suspects matching cond by family and CPU.
func readFamilyCPUs(ctx context.Context, st store.Store, cond Where) ([]familyCPU, error) {
	return readRows(ctx, st, "spike_suspects", `SELECT metric, mode, device, cpu, count() AS n
	FROM spike_suspects FINAL WHERE `+cond.And("cpu >= 0").String()+`
	GROUP BY metric, mode, device, cpu`, func(c *columns) func(int) familyCPU {
		metric, mode, device := col[string](c, "metric"), col[string](c, "mode"), col[string](c, "device")
		cpu, n := col[int16](c, "cpu"), col[uint64](c, "n")
		return func(i int) familyCPU {
			return familyCPU{metric.Row(i), mode.Row(i), device.Row(i), cpuCount{int(cpu.Row(i)), int(n.Row(i))}}
		}
	})
}

// cpusOf is the CPUs a family moved on most often (frequentCPUs), never nil.
func cpusOf(list []familyCPU, metric, mode, device string) []int {
	var counts []cpuCount
	for _, f := range list {
		if f.metric == metric && f.mode == mode && f.device == device {
			counts = append(counts, f.cpuCount)
		}
	}
	if cpus := frequentCPUs(counts); cpus != nil {
		return cpus
	}
	return []int{}
}

// enrichPattern adds what the spike tables know about a pattern's look-back:
// the typical stall, the hosts with most spikes, and the CPUs each suspect
// family moved on (patterns.suspects does not store them).
func enrichPattern(ctx context.Context, st store.Store, p *Pattern) error {
	look := Scope{Service: p.Service, From: p.LookbackStart, To: p.LookbackEnd}
	cond := look.Filter(Live(), Window)
	type spikeStats struct {
		peakMS   float64
		topHosts []string
	}
	stats, err := readRows(ctx, st, "spikes", `SELECT toFloat64(quantileExact(0.5)(peak_us)) AS peak,
		topK(3)(host) AS top_hosts FROM spikes FINAL WHERE `+cond.String(), func(c *columns) func(int) spikeStats {
		peak, hosts := col[float64](c, "peak"), col[[]string](c, "top_hosts")
		return func(i int) spikeStats {
			return spikeStats{finite(peak.Row(i)) / 1000, append([]string{}, hosts.Row(i)...)}
		}
	})
	if err != nil {
		return err
	}
	for _, x := range stats {
		p.TypicalPeakMS, p.TopHosts = x.peakMS, x.topHosts
	}
	list, err := readFamilyCPUs(ctx, st, Live().And("spike_id IN (SELECT spike_id FROM spikes FINAL WHERE "+cond.String()+")"))
	if err != nil {
		return err
	}
	for i := range p.Suspects {
		x := &p.Suspects[i]
		x.CPUs = cpusOf(list, x.Metric, x.Mode, x.Device)
	}
	if p.TopHosts == nil {
		p.TopHosts = []string{}
	}
	if err := readStalls(ctx, st, p, cond); err != nil {
		return err
	}
	if err := readClassIntervals(ctx, st, p, cond); err != nil {
		return err
	}
	if err := readEndpoints(ctx, st, p, cond); err != nil {
		return err
	}
	if err := readSuspectRates(ctx, st, p, cond); err != nil {
		return err
	}
	return readCFSPeriods(ctx, st, p, cond)
}

// readStalls fills in the slowest request of the pattern's stalls and
// their windows' length. A request that was in flight when a stall began
// waits for all of it and is filed under its arrival, the second before
// the window's first slow second, so that second is read too. A window
// without latency rows (they expire before the detections) keeps its peak.
func readStalls(ctx context.Context, st store.Store, p *Pattern, windows Where) error {
	type stall struct{ slowestMS, longestMS, windowS float64 }
	secs := `SELECT spike_id, host, peak_us, toUInt32(toUnixTimestamp(window_end)) - toUInt32(toUnixTimestamp(window_start)) AS len_s,
		arrayJoin(range(toUInt32(toUnixTimestamp(window_start)) - 1, toUInt32(toUnixTimestamp(window_end)))) AS s
		FROM spikes FINAL WHERE ` + windows.String()
	rows, err := readRows(ctx, st, "latency_1s", `SELECT toFloat64(quantileExact(0.5)(m)) / 1000 AS slowest_ms,
		toFloat64(max(m)) / 1000 AS longest_ms,
		toFloat64(quantileExact(0.5)(len_s)) AS window_s
	FROM (
		SELECT spike_id, greatest(max(l.max_us), any(w.peak_us)) AS m, any(w.len_s) AS len_s
		FROM (`+secs+`) AS w
		LEFT JOIN (
			SELECT host, toUInt32(ts) AS s, max(max_us) AS max_us FROM latency_1s
			WHERE `+Where{}.Equals("service", p.Service).And("(host, toUInt32(ts)) IN (SELECT host, s FROM ("+secs+"))").String()+`
			GROUP BY host, s
		) AS l USING (host, s)
		GROUP BY spike_id
	)`, func(c *columns) func(int) stall {
		slowest, longest, window := col[float64](c, "slowest_ms"), col[float64](c, "longest_ms"), col[float64](c, "window_s")
		return func(i int) stall { return stall{finite(slowest.Row(i)), finite(longest.Row(i)), finite(window.Row(i))} }
	})
	if err != nil {
		return err
	}
	for _, x := range rows {
		p.SlowestRequestMS, p.LongestRequestMS, p.StallWindowS = x.slowestMS, x.longestMS, x.windowS
	}
	return nil
}

// readClassIntervals fills in each hardware class's interval: per host the
// median gap between its windows' starts, then the median over the class's
// hosts, as the detector computes the fleet's. Gaps under a minute are one
// stall split into two windows (detect.PatternConfig.Occurrence).
func readClassIntervals(ctx context.Context, st store.Store, p *Pattern, windows Where) error {
	type classInterval struct {
		class string
		s     float64
	}
	rows, err := readRows(ctx, st, "spikes", `SELECT hw_class, toFloat64(quantileExact(0.5)(arrayReduce('quantileExact(0.5)', gaps))) AS interval_s
	FROM (
		SELECT host, any(hw_class) AS hw_class,
			arrayFilter(d -> d >= 60, arrayDifference(arraySort(groupArray(toInt64(toUnixTimestamp(window_start)))))) AS gaps
		FROM spikes FINAL WHERE `+windows.String()+`
		GROUP BY host
	)
	WHERE length(gaps) > 0
	GROUP BY hw_class`, func(c *columns) func(int) classInterval {
		class, iv := col[string](c, "hw_class"), col[float64](c, "interval_s")
		return func(i int) classInterval { return classInterval{class.Row(i), finite(iv.Row(i))} }
	})
	if err != nil {
		return err
	}
	p.ClassIntervalS = map[string]float64{}
	for _, x := range rows {
		p.ClassIntervalS[x.class] = x.s
	}
	return nil
}

// readSuspectRates fills in each suspect family's rates during the stalls
// and at baseline (medians over its rows in the pattern's windows), how
// many CPUs the affected hosts report it on, and the counters' step.
func readSuspectRates(ctx context.Context, st store.Store, p *Pattern, windows Where) error {
	if len(p.Suspects) == 0 {
		return nil
	}
	type rates struct {
		metric, mode, device string
		during, baseline     float64
		cpus                 int
		stepS                float64
	}
	var families []string
	for _, x := range p.Suspects {
		families = append(families, "("+store.QuoteString(x.Metric)+", "+store.QuoteString(x.Mode)+", "+store.QuoteString(x.Device)+")")
	}
	// A family's device is the workload (workload.Family) where each host's
	// rows name its own pod.
	family := "(" + workload.FamilySQL + ")"
	inFamilies := "(metric, mode, " + family + ") IN (" + strings.Join(families, ", ") + ")"
	spikeIDs := "spike_id IN (SELECT spike_id FROM spikes FINAL WHERE " + windows.String() + ")"
	hosts := "host IN (SELECT host FROM spikes FINAL WHERE " + windows.String() + ")"
	rows, err := readRows(ctx, st, "spike_suspects", `SELECT s.metric AS metric, s.mode AS mode, s.family AS device,
		s.during AS during, s.baseline AS baseline, toInt64(ifNull(c.cpus, 0)) AS cpus, toFloat64(ifNull(c.step_ms, 0)) / 1000 AS step_s
	FROM (
		SELECT metric, mode, `+family+` AS family, toFloat64(quantileExact(0.5)(during)) AS during, toFloat64(quantileExact(0.5)(baseline)) AS baseline
		FROM spike_suspects FINAL WHERE `+Live().And(spikeIDs, inFamilies).String()+`
		GROUP BY metric, mode, family
	) AS s
	LEFT JOIN (
		SELECT metric, mode, family, max(cpus) AS cpus, quantileExact(0.5)(step) AS step_ms
		FROM (
			SELECT host, metric, mode, `+family+` AS family, uniqExactIf(cpu, cpu >= 0) AS cpus, quantileExact(0.5)(interval_ms) AS step
			FROM counters
			WHERE `+Where{}.And(hosts, inFamilies).During("ts_start", p.LookbackStart, p.LookbackEnd).String()+`
			GROUP BY host, metric, mode, family
		)
		GROUP BY metric, mode, family
	) AS c USING (metric, mode, family)
	SETTINGS join_use_nulls = 1`, func(c *columns) func(int) rates {
		metric, mode, device := col[string](c, "metric"), col[string](c, "mode"), col[string](c, "device")
		during, baseline, step := col[float64](c, "during"), col[float64](c, "baseline"), col[float64](c, "step_s")
		cpus := col[int64](c, "cpus")
		return func(i int) rates {
			return rates{metric.Row(i), mode.Row(i), device.Row(i), finite(during.Row(i)), finite(baseline.Row(i)),
				int(cpus.Row(i)), finite(step.Row(i))}
		}
	})
	if err != nil {
		return err
	}
	for _, r := range rows {
		for i := range p.Suspects {
			x := &p.Suspects[i]
			if x.Metric == r.metric && x.Mode == r.mode && x.Device == r.device {
				x.During, x.Baseline, x.HostCPUs, x.CounterStepS = r.during, r.baseline, r.cpus, r.stepS
			}
		}
	}
	return nil
}

// readCFSPeriods fills in the CFS periods of the pattern's CPU-throttled
// suspects from the counters of the hosts of its windows: the periods and
// throttled periods of the family (summed over its pods on a host) and
// its CPU limit. Another stall inside a window's baseline is not left out,
// as the detector leaves it: the baseline is a median over its intervals,
// which a few throttled ones do not move.
func readCFSPeriods(ctx context.Context, st store.Store, p *Pattern, windows Where) error {
	var families []string
	for _, x := range p.Suspects {
		if throttleMetrics[x.Metric] {
			families = append(families, x.Device)
		}
	}
	if len(families) == 0 {
		return nil
	}
	family := "(" + workload.FamilySQL + ")"
	hosts := "host IN (SELECT host FROM spikes FINAL WHERE " + windows.String() + ")"
	counters := Where{}.And(hosts).In(family, families).
		During("ts_start", p.LookbackStart.Add(-suspectBaseline-time.Minute), p.LookbackEnd.Add(time.Minute))
	margin, slot := suspectMargin.Milliseconds(), suspectSlot.Milliseconds()
	type periods struct {
		family string
		CFSPeriods
	}
	rows, err := readRows(ctx, st, "counters", fmt.Sprintf(`SELECT ifNull(f.family, ifNull(l.family, '')) AS family,
		toFloat64(ifNull(f.p_during, 0)) AS p_during, toFloat64(ifNull(f.t_during, 0)) AS t_during,
		toFloat64(ifNull(f.p_base, 0)) AS p_base, toFloat64(ifNull(f.t_base, 0)) AS t_base, toFloat64(ifNull(l.limit_cpus, 0)) AS limit_cpus
	FROM (
		SELECT family, quantileExact(0.5)(p_during) AS p_during, quantileExact(0.5)(t_during) AS t_during,
			quantileExact(0.5)(p_base) AS p_base, quantileExact(0.5)(t_base) AS t_base
		FROM (
			SELECT spike_id, family,
				argMaxIf(p_rate, t_rate, is_during) AS p_during, maxIf(t_rate, is_during) AS t_during,
				quantileExactIf(0.5)(p_rate, is_base) AS p_base, quantileExactIf(0.5)(t_rate, is_base) AS t_base
			FROM (
				SELECT w.spike_id AS spike_id, c.family AS family, c.p_rate AS p_rate, c.t_rate AS t_rate,
					c.cs < w.we + %[5]d AND c.ce > w.ws - %[5]d AS is_during,
					c.cs >= w.ws - %[4]d AND c.ce <= w.ws - %[7]d AS is_base
				FROM (
					SELECT host, family, cs, cs + len_ms AS ce, intDiv(cs, %[1]d) AS slot,
						sumIf(value, metric = 'spikehunt.cgroup.cpu.periods') * 1000 / len_ms AS p_rate,
						sumIf(value, metric = 'spikehunt.cgroup.cpu.throttled_periods') * 1000 / len_ms AS t_rate
					FROM (
						SELECT toString(host) AS host, %[2]s AS family, toUnixTimestamp64Milli(ts_start) AS cs, toInt64(interval_ms) AS len_ms, metric, value
						FROM counters
						WHERE %[3]s AND metric IN ('spikehunt.cgroup.cpu.periods', 'spikehunt.cgroup.cpu.throttled_periods') AND interval_ms > 0
					)
					GROUP BY host, family, cs, len_ms
				) AS c
				INNER JOIN (
					SELECT spike_id, toString(host) AS host, toUnixTimestamp64Milli(window_start) AS ws, toUnixTimestamp64Milli(window_end) AS we,
						arrayJoin(range(intDiv(ws - %[4]d - 60000, %[1]d), intDiv(we + %[5]d, %[1]d) + 1)) AS slot
					FROM spikes FINAL WHERE %[6]s
				) AS w ON c.host = w.host AND c.slot = w.slot
			)
			WHERE is_during OR is_base
			GROUP BY spike_id, family
			HAVING countIf(is_during) > 0
		)
		GROUP BY family
	) AS f
	FULL JOIN (
		SELECT %[2]s AS family, quantileExact(0.5)(value) AS limit_cpus
		FROM counters WHERE %[3]s AND metric = 'spikehunt.cgroup.cpu.limit'
		GROUP BY family
	) AS l ON f.family = l.family
	SETTINGS join_use_nulls = 1`, slot, family, counters.String(), suspectBaseline.Milliseconds(), margin, windows.String(), suspectGuard.Milliseconds()),
		func(c *columns) func(int) periods {
			fam := col[string](c, "family")
			pd, td, pb, tb, limit := col[float64](c, "p_during"), col[float64](c, "t_during"), col[float64](c, "p_base"), col[float64](c, "t_base"), col[float64](c, "limit_cpus")
			return func(i int) periods {
				return periods{fam.Row(i), CFSPeriods{During: finite(pd.Row(i)), ThrottledDuring: finite(td.Row(i)),
					Baseline: finite(pb.Row(i)), ThrottledBaseline: finite(tb.Row(i)), LimitCPUs: finite(limit.Row(i))}}
			}
		})
	if err != nil {
		return err
	}
	for _, r := range rows {
		for i := range p.Suspects {
			if x := &p.Suspects[i]; throttleMetrics[x.Metric] && x.Device == r.family {
				cfs := r.CFSPeriods
				x.CFS = &cfs
			}
		}
	}
	return nil
}
