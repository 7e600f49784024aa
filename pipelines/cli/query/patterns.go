package query

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/vocab"
)

// Pattern is a fleet pattern's current state (its latest look-back in the
// range) as `spikehunt patterns` shows it. The JSON keys are part of the
// CLI's interface: add keys, never rename them. Many keys are those of
// the alert's pattern facts (internal/alertdoc.PatternFacts), on purpose
// not by embedding it: the alert is a versioned wire document that the
// operator verifies, this is a view of the patterns table with the spikes
// table's facts beside it, and a change to one must not move the other.
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
		if s := HWSkew(p.HWClassSkew); s.Ratio >= 1.2 || slices.Contains(p.Modifiers, vocab.ModifierHWClassSkewed) {
			skew = s.Cell()
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

// StallLength is how long a stall lasts: the slowest request of all the
// pattern's stalls (a request in flight when a stall begins waits for all
// of it), else the median spike window; 0 when neither is known.
func (p Pattern) StallLength() time.Duration {
	if p.LongestRequestMS > 0 {
		return time.Duration(p.LongestRequestMS * float64(time.Millisecond))
	}
	return time.Duration(p.StallWindowS * float64(time.Second))
}
