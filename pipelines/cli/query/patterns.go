package query

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/vocab"
	"github.com/spikehunt/spikehunt/internal/workload"
)

// Pattern is a fleet pattern's current state (its latest look-back in the
// range) as `spikehunt patterns` shows it. The JSON keys are part of the
// CLI's interface: add keys, never rename them.
type Pattern struct {
	PatternID           string             `json:"pattern_id"`
	Service             string             `json:"service"`
	Class               string             `json:"class"`
	Modifiers           []string           `json:"modifiers"`
	LookbackStart       time.Time          `json:"lookback_start"`
	LookbackEnd         time.Time          `json:"lookback_end"`
	HostsAffected       int                `json:"hosts_affected"`
	HostsTotal          int                `json:"hosts_total"`
	HostsAffectedShare  float64            `json:"hosts_affected_share"`
	RecurrenceIntervalS float64            `json:"recurrence_interval_s"`
	Regularity          float64            `json:"regularity"`
	Synchronicity       float64            `json:"synchronicity"`
	HWClassSkew         map[string]float64 `json:"hw_class_skew"`
	IllusionShare       float64            `json:"illusion_share"`
	Suspects            []PatternSuspect   `json:"suspects"`
	// TypicalPeakMS is the median peak of the service's spike windows in
	// the look-back, and TopHosts the hosts with the most of them: the
	// patterns table stores neither, the spikes table has both.
	TypicalPeakMS float64  `json:"typical_peak_ms"`
	TopHosts      []string `json:"top_hosts"`
	// SlowestRequestMS is the stall's length as a user feels it: the
	// slowest request of each stall (latency_1s's max over the window and
	// the second before it, where the requests in flight when the stall
	// began arrived), the median over the pattern's stalls.
	SlowestRequestMS float64 `json:"slowest_request_ms"`
	// LongestRequestMS is the slowest request of all the pattern's stalls.
	// A stall holds every request in flight until it ends, so its slowest
	// request is the one that arrived first; at a few requests per second
	// that one often arrives well into the stall, and the median
	// (SlowestRequestMS) falls short of the stall by the typical gap
	// between arrivals: the longest is the closer to the stall's length.
	LongestRequestMS float64 `json:"longest_request_ms"`
	// StallWindowS is the median length of the pattern's spike windows, in
	// seconds: what a counter step is compared with.
	StallWindowS float64 `json:"stall_window_s"`
	// ClassIntervalS is the median gap between one host's spikes per
	// hardware class (median over the class's hosts), in seconds; the
	// patterns table stores only the fleet's.
	ClassIntervalS  map[string]float64 `json:"class_interval_s"`
	Description     string             `json:"description"`
	DetectorVersion string             `json:"detector_version"`
	DetectedAt      time.Time          `json:"detected_at"`
	// Endpoints are the service's endpoints during the pattern's stalls
	// (endpoints.go), most slow requests first.
	Endpoints []PatternEndpoint `json:"endpoints"`
}

// PatternSuspect is one entry of patterns.suspects, with the CPUs its
// family moved on in the look-back's spike suspects.
type PatternSuspect struct {
	Metric string  `json:"metric"`
	Mode   string  `json:"mode"`
	Device string  `json:"device"`
	CPUs   []int   `json:"cpus"`
	Hosts  int     `json:"hosts"`
	Score  float64 `json:"score"`
	// During and Baseline are the medians over the pattern's stalls of the
	// family's rate per second (seconds per second for CPU time: a share
	// of one CPU) during the window and over the host's baseline.
	During   float64 `json:"during"`
	Baseline float64 `json:"baseline"`
	// HostCPUs is how many CPUs the affected hosts report the family on
	// (0 when not per CPU), and CounterStepS the counters' median step in
	// seconds on those hosts.
	HostCPUs     int     `json:"host_cpus"`
	CounterStepS float64 `json:"counter_step_s"`
	// CFS is a CPU-throttled workload's periods and limit, for its
	// throttled time or periods (nil for other families, or without
	// their counters).
	CFS *CFSPeriods `json:"cfs,omitempty"`
}

// Patterns is `spikehunt patterns`.
func Patterns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return patternsCommand.run(ctx, args, stdout, stderr)
}

var patternsCommand = command{
	name:     "patterns",
	synopsis: "Shows each fleet pattern's current state (its latest look-back in the range):\nclass, hosts affected, recurrence, hardware-class skew, the averaged-latency\nillusion and the suspects, then one sentence per pattern. --host keeps the\npatterns of services whose spike windows include that host.",
	rows:     "a pattern's look-back is [lookback_start, lookback_end),\nand the latest look-back that overlaps is shown",
	columns:  patternsColumns,
	setup: func(*flag.FlagSet) query {
		return query{load: func(ctx context.Context, st store.Store, s Scope) (answer, error) {
			patterns, found, err := loadPatterns(ctx, st, s)
			if err != nil {
				return answer{}, err
			}
			return answerOf(patterns, s.none("patterns"), func(w io.Writer) error {
				return printPatterns(w, patterns, s.Service == "")
			}).withSummary(func() (Summary, error) { return s.summary(found, len(patterns)), nil }), nil
		}}
	},
}

func printPatterns(w io.Writer, patterns []Pattern, withService bool) error {
	tw := newTable(w)
	header := "CLASS\tMODIFIERS\tHOSTS\tINTERVAL\tREGULARITY\tSYNC\tHW_SKEW\tILLUSION\tSUSPECTS"
	if withService {
		header = "SERVICE\t" + header
	}
	fmt.Fprintln(tw, header)
	for _, p := range patterns {
		if withService {
			fmt.Fprintf(tw, "%s\t", p.Service)
		}
		mods := "-"
		if len(p.Modifiers) > 0 {
			mods = strings.Join(p.Modifiers, ",")
		}
		skew := "-"
		if class, ratio := topSkew(p.HWClassSkew); class != "" && (ratio >= 1.2 || slices.Contains(p.Modifiers, vocab.ModifierHWClassSkewed)) {
			skew = fmt.Sprintf("%s %.1f×", class, ratio)
		}
		var sus []string
		for i, x := range p.Suspects {
			if i == 2 {
				sus = append(sus, fmt.Sprintf("+%d", len(p.Suspects)-2))
				break
			}
			sus = append(sus, fmt.Sprintf("%s (%s)", SuspectLabel(x.Metric, x.Mode, x.Device, x.CPUs), plural(x.Hosts, "host")))
		}
		if len(sus) == 0 {
			sus = []string{"-"}
		}
		interval := "-"
		if p.RecurrenceIntervalS > 0 {
			interval = "~" + roughDuration(time.Duration(p.RecurrenceIntervalS*float64(time.Second)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d (%s)\t%s\t%.2f\t%.2f\t%s\t%s\t%s\n", p.Class, mods,
			p.HostsAffected, p.HostsTotal, pct(p.HostsAffectedShare), interval, p.Regularity, p.Synchronicity,
			skew, pct(p.IllusionShare), strings.Join(sus, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, p := range patterns {
		if withService {
			fmt.Fprintf(w, "%s: ", p.Service)
		}
		fmt.Fprintln(w, p.Description)
	}
	return nil
}

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

// topSkew is the hardware class whose spike rate is highest, and how many
// times the calmest class's rate it is: "2.1× as often on gen5" compares
// gen5 with gen4, as an SRE reads it, not with the fleet that gen5 is half
// of. The skew map holds rates relative to the fleet; "" when it has fewer
// than two classes or the calmest never spiked.
func topSkew(skew map[string]float64) (class string, ratio float64) {
	lowest := math.Inf(1)
	for c, r := range skew {
		if r > ratio || (r == ratio && c < class) {
			class, ratio = c, r
		}
		lowest = math.Min(lowest, r)
	}
	if len(skew) < 2 || lowest <= 0 {
		return "", 0
	}
	return class, ratio / lowest
}

// describePattern says in one sentence what a pattern means for the fleet,
// e.g. "Every host stalls at its own phase, gen4 hosts every ~18 min, gen5
// every ~9 min; the slowest request of a stall takes ~600 ms (median over
// the pattern's stalls; up to ~757 ms); 100% of hosts; 2.0× as often on
// hw class gen5; softirq: 4 of 8 CPUs (0, 2, 4 and 6) at ~100% during the stalls (baseline
// 0.7%; counters every 30 s, coarser than the ~757 ms stall: over a step it
// reads 3.9%, diluted)."
func describePattern(p Pattern) string {
	var b strings.Builder
	every := ""
	if p.RecurrenceIntervalS > 0 {
		every = " every ~" + SpokenDuration(time.Duration(p.RecurrenceIntervalS*float64(time.Second)))
	}
	skewed := slices.Contains(p.Modifiers, vocab.ModifierHWClassSkewed)
	ownPhase, eachOwnPhase := every+" at its own phase", every+", each at its own phase"
	if classes := classIntervals(p.ClassIntervalS); skewed && classes != "" {
		every = ", " + classes
		ownPhase, eachOwnPhase = " at its own phase"+every, ", each at its own phase"+every
	}
	hostShare := share(int64(p.HostsAffected), int64(p.HostsTotal))
	switch p.Class {
	case vocab.ClassFleetRecurrent:
		if hostShare >= 0.9 {
			b.WriteString("Every host stalls" + ownPhase)
		} else {
			b.WriteString("Most hosts stall" + eachOwnPhase)
		}
		b.WriteString(stallClause(p))
		fmt.Fprintf(&b, "; %s of hosts", pct(hostShare))
	case vocab.ClassFleetSynchronized:
		fmt.Fprintf(&b, "Hosts stall at the same moments%s", every)
		b.WriteString(stallClause(p))
		fmt.Fprintf(&b, "; %s of hosts", pct(hostShare))
	case vocab.ClassIsolatedHost:
		named := p.HostsAffected > 0 && p.HostsAffected <= 3 && len(p.TopHosts) >= p.HostsAffected
		switch {
		case p.HostsAffected == 1 && named:
			fmt.Fprintf(&b, "Only host %s stalls%s", p.TopHosts[0], every)
		case p.HostsAffected == 1:
			fmt.Fprintf(&b, "Only one host stalls%s", every)
		case named:
			fmt.Fprintf(&b, "Only hosts %s stall%s", AndList(p.TopHosts[:p.HostsAffected]), every)
		default:
			fmt.Fprintf(&b, "Only %d hosts stall%s", p.HostsAffected, every)
		}
		b.WriteString(stallClause(p))
		fmt.Fprintf(&b, "; %d of %d hosts", p.HostsAffected, p.HostsTotal)
	default:
		fmt.Fprintf(&b, "Hosts stall%s (%s)", every, p.Class)
		b.WriteString(stallClause(p))
		fmt.Fprintf(&b, "; %s of hosts", pct(hostShare))
	}
	b.WriteString(endpointClause(p))
	if skewed {
		if class, ratio := topSkew(p.HWClassSkew); class != "" {
			fmt.Fprintf(&b, "; %s× as often on hw class %s", strconv.FormatFloat(ratio, 'f', 1, 64), class)
		}
	}
	if len(p.Suspects) > 0 {
		b.WriteString("; " + SuspectSentence(p.Suspects[0], p.StallLength()))
	} else {
		b.WriteString("; no kernel counter moved with the stalls")
	}
	b.WriteString(".")
	return b.String()
}

// stallClause says how long a stall holds requests: the slowest request of
// a stall, the median over the pattern's stalls, and the slowest of all
// when it reads differently. A stall holds every request in flight until
// it ends, so the slowest request is the stall's length as users feel it;
// a per-second mean would be diluted by the second's fast requests.
func stallClause(p Pattern) string {
	median := p.SlowestRequestMS
	if median <= 0 {
		median = p.TypicalPeakMS
	}
	if median <= 0 {
		return ""
	}
	s := "; the slowest request of a stall takes ~" + spokenLatency(median) + " (median over the pattern's stalls"
	if p.LongestRequestMS > 0 && spokenLatency(p.LongestRequestMS) != spokenLatency(median) {
		s += "; up to ~" + spokenLatency(p.LongestRequestMS)
	}
	return s + ")"
}

// classIntervals names each hardware class's interval: "gen4 hosts every
// ~18 min, gen5 every ~9 min"; classes whose intervals read the same share
// one: "gen4 hosts every ~18 min, gen5 and gen6 every ~9 min". "" with
// fewer than two classes.
func classIntervals(byClass map[string]float64) string {
	if len(byClass) < 2 {
		return ""
	}
	var order []string
	groups := map[string][]string{}
	for _, c := range sortedClasses(byClass) {
		if byClass[c] <= 0 {
			return ""
		}
		say := SpokenDuration(time.Duration(byClass[c] * float64(time.Second)))
		if groups[say] == nil {
			order = append(order, say)
		}
		groups[say] = append(groups[say], c)
	}
	parts := make([]string, len(order))
	for i, say := range order {
		hosts := ""
		if i == 0 {
			hosts = " hosts"
		}
		parts[i] = AndList(groups[say]) + hosts + " every ~" + say
	}
	return strings.Join(parts, ", ")
}

func sortedClasses(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// StallLength is how long a stall lasts: the slowest request of all the
// pattern's stalls (a request in flight when a stall begins waits for all
// of it), else the median spike window; 0 when neither is known.
func (p Pattern) StallLength() time.Duration {
	if p.LongestRequestMS > 0 {
		return time.Duration(p.LongestRequestMS * float64(time.Millisecond))
	}
	return time.Duration(p.StallWindowS * float64(time.Second))
}

// SuspectSentence says what a suspect family did during the stalls in units
// people use: CPU time as a share of each CPU ("softirq: 4 of 8 CPUs at
// (0, 2, 4 and 6) at ~97% during the stalls (baseline 0.9%)"), other
// counters per second.
// Where the counters' step is longer than the stall, the rate read over a
// step spreads the stall's excess over the whole step: the figure during
// the stall is that excess put back into the stall (at most 100% for a
// share), and the sentence says so, with the figure as read.
func SuspectSentence(x PatternSuspect, stall time.Duration) string {
	stallS := stall.Seconds()
	phrase := suspectPhrase(x.Metric, x.Mode, x.Device)
	if x.During <= 0 {
		s := "during the stalls " + phrase + " rises"
		if len(x.CPUs) > 0 {
			s += " on " + cpuList(x.CPUs)
		}
		return s
	}
	coarse := x.CounterStepS > 0 && stallS > 0 && x.CounterStepS > stallS
	undilute := func(during, baseline float64) float64 {
		if coarse && during > baseline {
			return baseline + (during-baseline)*x.CounterStepS/stallS
		}
		return during
	}
	during := undilute(x.During, x.Baseline)
	cpuTime := x.Metric == "system.cpu.time"
	words, everyday := causeSentence(x, during, undilute)
	s := words.open
	switch {
	case everyday:
	case cpuTime:
		during = math.Min(during, 1)
		who := "CPUs"
		switch {
		case len(x.CPUs) > 0 && x.HostCPUs >= len(x.CPUs):
			who = fmt.Sprintf("%d of %d CPUs (%s)", len(x.CPUs), x.HostCPUs, strings.TrimPrefix(cpuList(x.CPUs), "CPUs "))
		case len(x.CPUs) > 0:
			who = cpuList(x.CPUs)
		}
		s = fmt.Sprintf("%s: %s at ~%s during the stalls (baseline %s", orDash(x.Mode), who, finePct(during), finePct(x.Baseline))
	default:
		s = fmt.Sprintf("%s: ~%s/s during the stalls (baseline %s/s", phrase, rate(during), rate(x.Baseline))
		if len(x.CPUs) > 0 {
			s = fmt.Sprintf("%s on %s: ~%s/s during the stalls (baseline %s/s", phrase, cpuList(x.CPUs), rate(during), rate(x.Baseline))
		}
	}
	if coarse {
		read := rate(x.During) + "/s"
		switch {
		case cpuTime:
			read = finePct(x.During)
		case words.read != "":
			read = words.read
		}
		s += fmt.Sprintf("; counters every %s, coarser than the ~%s stall: over a step it reads %s, diluted",
			SpokenDuration(time.Duration(x.CounterStepS*float64(time.Second))), spokenLatency(float64(stall)/float64(time.Millisecond)), read)
	}
	return s + ")" + words.tail
}

// finePct renders a share 0..1 as a percentage with one decimal below 10%.
func finePct(v float64) string {
	if v < 0.1 {
		return strconv.FormatFloat(100*v, 'f', 1, 64) + "%"
	}
	return pct(v)
}

// spokenLatency: "1.0 s" from a second up, "350 ms" below.
func spokenLatency(ms float64) string {
	if ms >= 1000 {
		return strconv.FormatFloat(ms/1000, 'f', 1, 64) + " s"
	}
	return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
}

// SpokenDuration: "45 s", "17 min", "2.5 h", "3 days".
func SpokenDuration(d time.Duration) string {
	switch {
	case d < 90*time.Second:
		return fmt.Sprintf("%d s", int(d.Round(time.Second)/time.Second))
	case d < 90*time.Minute:
		return fmt.Sprintf("%d min", int(d.Round(time.Minute)/time.Minute))
	case d < 48*time.Hour:
		return strings.TrimSuffix(strconv.FormatFloat(d.Hours(), 'f', 1, 64), ".0") + " h"
	default:
		return strings.TrimSuffix(strconv.FormatFloat(d.Hours()/24, 'f', 1, 64), ".0") + " days"
	}
}

// AndList: "a", "a and b", "a, b and c".
func AndList(v []string) string {
	if len(v) <= 1 {
		return strings.Join(v, "")
	}
	return strings.Join(v[:len(v)-1], ", ") + " and " + v[len(v)-1]
}
