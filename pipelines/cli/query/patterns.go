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

	"github.com/spikehunt/spikehunt/pipelines/store"
)

// The values of patterns.class and patterns.modifiers this package words
// sentences for. They are the table's contract (the detectors write them
// from detect.Class*), so the reader does not import the writer.
const (
	ClassFleetRecurrent    = "fleet-recurrent"
	ClassFleetSynchronized = "fleet-synchronized"
	ClassIsolatedHost      = "isolated-host"
	ModifierHWClassSkewed  = "hw-class-skewed"
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
	TypicalPeakMS   float64   `json:"typical_peak_ms"`
	TopHosts        []string  `json:"top_hosts"`
	Description     string    `json:"description"`
	DetectorVersion string    `json:"detector_version"`
	DetectedAt      time.Time `json:"detected_at"`
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
		if class, ratio := topSkew(p.HWClassSkew); class != "" && (ratio >= 1.2 || slices.Contains(p.Modifiers, ModifierHWClassSkewed)) {
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
// e.g. "Every host stalls ~1.0 s every ~17 min at its own phase; 96% of
// hosts; 2.1× as often on hw class gen5; during the stalls NET_RX softirq
// rises on CPUs 0, 2, 4 and 6."
func describePattern(p Pattern) string {
	var b strings.Builder
	stall := ""
	if p.TypicalPeakMS > 0 {
		stall = " ~" + spokenLatency(p.TypicalPeakMS)
	}
	every := ""
	if p.RecurrenceIntervalS > 0 {
		every = " every ~" + SpokenDuration(time.Duration(p.RecurrenceIntervalS*float64(time.Second)))
	}
	hostShare := share(int64(p.HostsAffected), int64(p.HostsTotal))
	switch p.Class {
	case ClassFleetRecurrent:
		if hostShare >= 0.9 {
			fmt.Fprintf(&b, "Every host stalls%s%s at its own phase", stall, every)
		} else {
			fmt.Fprintf(&b, "Most hosts stall%s%s, each at its own phase", stall, every)
		}
		fmt.Fprintf(&b, "; %s of hosts", pct(hostShare))
	case ClassFleetSynchronized:
		fmt.Fprintf(&b, "Hosts stall%s at the same moments%s", stall, every)
		fmt.Fprintf(&b, "; %s of hosts", pct(hostShare))
	case ClassIsolatedHost:
		named := p.HostsAffected > 0 && p.HostsAffected <= 3 && len(p.TopHosts) >= p.HostsAffected
		switch {
		case p.HostsAffected == 1 && named:
			fmt.Fprintf(&b, "Only host %s stalls%s%s", p.TopHosts[0], stall, every)
		case p.HostsAffected == 1:
			fmt.Fprintf(&b, "Only one host stalls%s%s", stall, every)
		case named:
			fmt.Fprintf(&b, "Only hosts %s stall%s%s", AndList(p.TopHosts[:p.HostsAffected]), stall, every)
		default:
			fmt.Fprintf(&b, "Only %d hosts stall%s%s", p.HostsAffected, stall, every)
		}
		fmt.Fprintf(&b, "; %d of %d hosts", p.HostsAffected, p.HostsTotal)
	default:
		fmt.Fprintf(&b, "Hosts stall%s%s (%s); %s of hosts", stall, every, p.Class, pct(hostShare))
	}
	if slices.Contains(p.Modifiers, ModifierHWClassSkewed) {
		if class, ratio := topSkew(p.HWClassSkew); class != "" {
			fmt.Fprintf(&b, "; %s× as often on hw class %s", strconv.FormatFloat(ratio, 'f', 1, 64), class)
		}
	}
	if len(p.Suspects) > 0 {
		x := p.Suspects[0]
		fmt.Fprintf(&b, "; during the stalls %s rises", suspectPhrase(x.Metric, x.Mode, x.Device))
		if len(x.CPUs) > 0 {
			b.WriteString(" on " + cpuList(x.CPUs))
		}
	} else {
		b.WriteString("; no kernel counter moved with the stalls")
	}
	b.WriteString(".")
	return b.String()
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
