package capturestrategy

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"

	"github.com/spikehunt/spikehunt/internal/policy"
)

// GoalPeriods is the goal's bound: a pattern is covered on every class
// within this many recurrence periods of its detection.
const GoalPeriods = 2

// Summary is the figures of a set of trials.
type Summary struct {
	Trials, Detected int
	// CoveredShare is the share of detected trials covered on every class
	// of the pattern within GoalPeriods.
	CoveredShare float64
	// WorstP50 and WorstP95 are quantiles over detected trials of the
	// slowest class's periods to its first cover (+Inf: beyond the
	// horizon).
	WorstP50, WorstP95 float64
	// Classes are the per-class quantiles, by class.
	Classes []ClassSummary
	// BeforeDetection is the share of (trial, class) covers indexed
	// before the detection.
	BeforeDetection float64
	// WastedShare is the captures that ended without covering a stall,
	// over the captures that ended or fired.
	WastedShare float64
	Armings     int
	// AlertArmings and AlertWasted are the armings widening made.
	AlertArmings, AlertWasted int
}

// ClassSummary is one class's periods to its first cover.
type ClassSummary struct {
	Class    string
	P50, P95 float64
	Trials   int
}

// Summarize aggregates trials.
func Summarize(trials []Trial) Summary {
	s := Summary{Trials: len(trials)}
	var worst []float64
	byClass := map[string][]float64{}
	var classOrder []string
	covers, before, wasted := 0, 0, 0
	for _, t := range trials {
		s.Armings += t.Armings
		wasted += t.Wasted
		s.AlertArmings += t.ByReason[policy.ReasonAlert][0]
		s.AlertWasted += t.ByReason[policy.ReasonAlert][1]
		if !t.Detected {
			continue
		}
		s.Detected++
		w := t.Worst()
		worst = append(worst, w)
		if w <= GoalPeriods {
			s.CoveredShare++
		}
		for _, c := range t.Classes {
			if _, ok := byClass[c.Class]; !ok {
				classOrder = append(classOrder, c.Class)
			}
			byClass[c.Class] = append(byClass[c.Class], c.Periods)
			covers++
			if c.BeforeDetection {
				before++
			}
		}
	}
	if s.Detected > 0 {
		s.CoveredShare /= float64(s.Detected)
		s.WorstP50, s.WorstP95 = Quantile(worst, 0.5), Quantile(worst, 0.95)
	}
	if covers > 0 {
		s.BeforeDetection = float64(before) / float64(covers)
	}
	if s.Armings > 0 {
		s.WastedShare = float64(wasted) / float64(s.Armings)
	}
	slices.Sort(classOrder)
	for _, c := range classOrder {
		v := byClass[c]
		s.Classes = append(s.Classes, ClassSummary{Class: c, P50: Quantile(v, 0.5), P95: Quantile(v, 0.95), Trials: len(v)})
	}
	return s
}

// Quantile is the q-quantile of v by the nearest rank (the smallest value
// with at least q of v at or below it), so that +Inf stays +Inf; NaN for
// none.
func Quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Row is one cell of the table: a fleet size, a pattern and a bait.
type Row struct {
	Hosts   int
	Pattern string
	Bait    int
	Summary
}

// WriteTable prints rows as an aligned table.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "hosts\tpattern\tbait\tdetected\tcovered≤2\tworst p50\tworst p95\tper class p50/p95\tbefore det.\tcaptures\twasted\talert armings (wasted)")
	for _, r := range rows {
		var classes string
		for i, c := range r.Classes {
			if i > 0 {
				classes += " "
			}
			classes += fmt.Sprintf("%s %s/%s", c.Class, periods(c.P50), periods(c.P95))
		}
		fmt.Fprintf(tw, "%d\t%s\t%d%%\t%d/%d\t%.0f%%\t%s\t%s\t%s\t%.0f%%\t%d\t%.0f%%\t%d (%d)\n",
			r.Hosts, r.Pattern, r.Bait, r.Detected, r.Trials, 100*r.CoveredShare, periods(r.WorstP50), periods(r.WorstP95),
			classes, 100*r.BeforeDetection, r.Armings, 100*r.WastedShare, r.AlertArmings, r.AlertWasted)
	}
	return tw.Flush()
}

func periods(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case math.IsInf(v, 1):
		return "never"
	}
	return fmt.Sprintf("%.2f", v)
}
