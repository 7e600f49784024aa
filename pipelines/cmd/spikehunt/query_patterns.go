package main

import (
	"context"
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

// The values of patterns.class and patterns.modifiers this command words
// sentences for. They are the table's contract (the detectors write them
// from detect.Class*), so the reader does not import the writer.
const (
	classFleetRecurrent    = "fleet-recurrent"
	classFleetSynchronized = "fleet-synchronized"
	classIsolatedHost      = "isolated-host"
	modifierHWClassSkewed  = "hw-class-skewed"
)

// patternView is a fleet pattern's current state (its latest look-back in
// the range) as `spikehunt patterns` shows it. The JSON keys are part of the
// CLI's interface: add keys, never rename them.
type patternView struct {
	PatternID           string               `json:"pattern_id"`
	Service             string               `json:"service"`
	Class               string               `json:"class"`
	Modifiers           []string             `json:"modifiers"`
	LookbackStart       time.Time            `json:"lookback_start"`
	LookbackEnd         time.Time            `json:"lookback_end"`
	HostsAffected       int                  `json:"hosts_affected"`
	HostsTotal          int                  `json:"hosts_total"`
	HostsAffectedShare  float64              `json:"hosts_affected_share"`
	RecurrenceIntervalS float64              `json:"recurrence_interval_s"`
	Regularity          float64              `json:"regularity"`
	Synchronicity       float64              `json:"synchronicity"`
	HWClassSkew         map[string]float64   `json:"hw_class_skew"`
	IllusionShare       float64              `json:"illusion_share"`
	Suspects            []patternSuspectView `json:"suspects"`
	// TypicalPeakMS is the median peak of the service's spike windows in
	// the look-back, and TopHosts the hosts with the most of them: the
	// patterns table stores neither, the spikes table has both.
	TypicalPeakMS   float64   `json:"typical_peak_ms"`
	TopHosts        []string  `json:"top_hosts"`
	Description     string    `json:"description"`
	DetectorVersion string    `json:"detector_version"`
	DetectedAt      time.Time `json:"detected_at"`
}

// patternSuspectView is one entry of patterns.suspects, with the CPUs its
// family moved on in the look-back's spike suspects.
type patternSuspectView struct {
	Metric string  `json:"metric"`
	Mode   string  `json:"mode"`
	Device string  `json:"device"`
	CPUs   []int   `json:"cpus"`
	Hosts  int     `json:"hosts"`
	Score  float64 `json:"score"`
}

func runPatterns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("patterns", "Shows each fleet pattern's current state (its latest look-back in the range):\nclass, hosts affected, recurrence, hardware-class skew, the averaged-latency\nillusion and the suspects, then one sentence per pattern. --host keeps the\npatterns of services whose spike windows include that host.", stderr)
	q := addQueryFlags(fs, 50)
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
	patterns, err := loadPatterns(ctx, st, s)
	if err != nil {
		return err
	}
	if len(patterns) == 0 {
		return s.empty(stdout, stderr, "patterns")
	}
	if s.json {
		return writeJSON(stdout, patterns)
	}
	tw := newTable(stdout)
	withService := s.service == ""
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
		if class, ratio := topSkew(p.HWClassSkew); class != "" && (ratio >= 1.2 || slices.Contains(p.Modifiers, modifierHWClassSkewed)) {
			skew = fmt.Sprintf("%s %.1f×", class, ratio)
		}
		var sus []string
		for i, x := range p.Suspects {
			if i == 2 {
				sus = append(sus, fmt.Sprintf("+%d", len(p.Suspects)-2))
				break
			}
			sus = append(sus, fmt.Sprintf("%s (%s)", suspectLabel(x.Metric, x.Mode, x.Device, x.CPUs), plural(x.Hosts, "host")))
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
	fmt.Fprintln(stdout)
	for _, p := range patterns {
		if withService {
			fmt.Fprintf(stdout, "%s: ", p.Service)
		}
		fmt.Fprintln(stdout, p.Description)
	}
	return nil
}

// loadPatterns reads the latest version of each pattern evaluated in the
// range, most widespread first, and fills in what the spikes tables know.
func loadPatterns(ctx context.Context, st store.Store, s queryScope) ([]patternView, error) {
	cond := "is_deleted = 0 AND " + s.timeCond("lookback_end")
	if s.service != "" {
		cond += " AND service = " + store.QuoteString(s.service)
	}
	if s.host != "" {
		// Patterns are fleet-level rows without hosts: a host "has" the
		// patterns of the services it had spike windows for.
		cond += " AND service IN (SELECT service FROM spikes FINAL WHERE is_deleted = 0 AND " + s.where("window_start") + ")"
	}
	rows, err := selectRows(ctx, st, "patterns", `SELECT pattern_id, service, class, toJSONString(modifiers) AS modifiers_json,
		lookback_start, lookback_end, hosts_affected, hosts_total, recurrence_interval_s, regularity, synchronicity,
		toJSONString(hw_class_skew) AS skew_json, illusion_share, toJSONString(suspects) AS suspects_json,
		detector_version, detected_at
	FROM patterns FINAL WHERE `+cond+`
	ORDER BY service, pattern_id, lookback_end DESC
	LIMIT 1 BY service, pattern_id`)
	if err != nil {
		return nil, err
	}
	patterns, err := decodeRows("patterns", rows, func(r resultRow) patternView {
		p := patternView{
			PatternID: r.str("pattern_id"), Service: r.str("service"), Class: r.str("class"),
			LookbackStart: r.time("lookback_start"), LookbackEnd: r.time("lookback_end"),
			HostsAffected: int(r.int("hosts_affected")), HostsTotal: int(r.int("hosts_total")),
			RecurrenceIntervalS: r.float("recurrence_interval_s"), Regularity: r.float("regularity"),
			Synchronicity: r.float("synchronicity"), IllusionShare: r.float("illusion_share"),
			DetectorVersion: r.str("detector_version"), DetectedAt: r.time("detected_at"),
		}
		r.json("modifiers_json", &p.Modifiers)
		r.json("skew_json", &p.HWClassSkew)
		r.json("suspects_json", &p.Suspects)
		return p
	})
	if err != nil {
		return nil, err
	}
	for i := range patterns {
		p := &patterns[i]
		p.HostsAffectedShare = share(int64(p.HostsAffected), int64(p.HostsTotal))
		if p.Modifiers == nil {
			p.Modifiers = []string{}
		}
		sort.SliceStable(p.Suspects, func(a, b int) bool { return p.Suspects[a].Score > p.Suspects[b].Score })
	}
	sort.SliceStable(patterns, func(a, b int) bool {
		pa, pb := patterns[a], patterns[b]
		if pa.HostsAffectedShare != pb.HostsAffectedShare {
			return pa.HostsAffectedShare > pb.HostsAffectedShare
		}
		return pa.Service < pb.Service
	})
	if s.limit > 0 && len(patterns) > s.limit {
		patterns = patterns[:s.limit]
	}
	// Two small queries per pattern shown: patterns are few (a handful per
	// service), and each query reads one service's look-back only.
	for i := range patterns {
		if err := enrichPattern(ctx, st, &patterns[i]); err != nil {
			return nil, err
		}
		patterns[i].Description = describePattern(patterns[i])
	}
	return patterns, nil
}

// enrichPattern adds what the spike tables know about a pattern's look-back:
// the typical stall, the hosts with most spikes, and the CPUs each suspect
// family moved on (patterns.suspects does not store them).
func enrichPattern(ctx context.Context, st store.Store, p *patternView) error {
	look := queryScope{service: p.Service, from: p.LookbackStart, to: p.LookbackEnd}
	cond := "is_deleted = 0 AND " + look.where("window_start")
	rows, err := selectRows(ctx, st, "spikes", `SELECT quantileExact(0.5)(peak_us) AS peak,
		toJSONString(topK(3)(host)) AS hosts_json FROM spikes FINAL WHERE `+cond)
	if err != nil {
		return err
	}
	if _, err := decodeRows("spikes", rows, func(r resultRow) struct{} {
		p.TypicalPeakMS = r.float("peak") / 1000
		r.json("hosts_json", &p.TopHosts)
		return struct{}{}
	}); err != nil {
		return err
	}
	rows, err = selectRows(ctx, st, "spike_suspects", `SELECT metric, mode, device, cpu, count() AS n
	FROM spike_suspects FINAL WHERE `+cond+` AND cpu >= 0
	GROUP BY metric, mode, device, cpu`)
	if err != nil {
		return err
	}
	type familyCPU struct {
		metric, mode, device string
		cpuCount
	}
	list, err := decodeRows("spike_suspects", rows, func(r resultRow) familyCPU {
		return familyCPU{r.str("metric"), r.str("mode"), r.str("device"), cpuCount{int(r.int("cpu")), int(r.int("n"))}}
	})
	if err != nil {
		return err
	}
	for i := range p.Suspects {
		x := &p.Suspects[i]
		var counts []cpuCount
		for _, f := range list {
			if f.metric == x.Metric && f.mode == x.Mode && f.device == x.Device {
				counts = append(counts, f.cpuCount)
			}
		}
		x.CPUs = frequentCPUs(counts)
		if x.CPUs == nil {
			x.CPUs = []int{}
		}
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
func describePattern(p patternView) string {
	var b strings.Builder
	stall := ""
	if p.TypicalPeakMS > 0 {
		stall = " ~" + spokenLatency(p.TypicalPeakMS)
	}
	every := ""
	if p.RecurrenceIntervalS > 0 {
		every = " every ~" + spokenDuration(time.Duration(p.RecurrenceIntervalS*float64(time.Second)))
	}
	hostShare := share(int64(p.HostsAffected), int64(p.HostsTotal))
	switch p.Class {
	case classFleetRecurrent:
		if hostShare >= 0.9 {
			fmt.Fprintf(&b, "Every host stalls%s%s at its own phase", stall, every)
		} else {
			fmt.Fprintf(&b, "Most hosts stall%s%s, each at its own phase", stall, every)
		}
		fmt.Fprintf(&b, "; %s of hosts", pct(hostShare))
	case classFleetSynchronized:
		fmt.Fprintf(&b, "Hosts stall%s at the same moments%s", stall, every)
		fmt.Fprintf(&b, "; %s of hosts", pct(hostShare))
	case classIsolatedHost:
		named := p.HostsAffected > 0 && p.HostsAffected <= 3 && len(p.TopHosts) >= p.HostsAffected
		switch {
		case p.HostsAffected == 1 && named:
			fmt.Fprintf(&b, "Only host %s stalls%s%s", p.TopHosts[0], stall, every)
		case p.HostsAffected == 1:
			fmt.Fprintf(&b, "Only one host stalls%s%s", stall, every)
		case named:
			fmt.Fprintf(&b, "Only hosts %s stall%s%s", andList(p.TopHosts[:p.HostsAffected]), stall, every)
		default:
			fmt.Fprintf(&b, "Only %d hosts stall%s%s", p.HostsAffected, stall, every)
		}
		fmt.Fprintf(&b, "; %d of %d hosts", p.HostsAffected, p.HostsTotal)
	default:
		fmt.Fprintf(&b, "Hosts stall%s%s (%s); %s of hosts", stall, every, p.Class, pct(hostShare))
	}
	if slices.Contains(p.Modifiers, modifierHWClassSkewed) {
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

// spokenDuration: "45 s", "17 min", "2.5 h", "3 days".
func spokenDuration(d time.Duration) string {
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

// andList: "a", "a and b", "a, b and c".
func andList(v []string) string {
	if len(v) <= 1 {
		return strings.Join(v, "")
	}
	return strings.Join(v[:len(v)-1], ", ") + " and " + v[len(v)-1]
}
