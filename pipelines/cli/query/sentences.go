package query

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/vocab"
)

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
		if clause := HWSkew(p.HWClassSkew).Clause(); clause != "" {
			b.WriteString("; " + clause)
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

// SuspectSentence says what a suspect family did during the stalls in units
// people use: CPU time as a share of each CPU ("softirq: 4 of 8 CPUs at
// (0, 2, 4 and 6) at ~97% during the stalls (baseline 0.9%)"), other
// counters per second.
// Where the counters' step is longer than the stall, the rate read over a
// step spreads the stall's excess over the whole step, and the sentence
// says so. A share is that excess put back into the stall (at most 100%),
// with the figure as read; a count per second is the figure read, the one
// spikehunt suspects shows, with the excess put back into the stall as
// what it is, a bound that holds if all of it fell in the stall.
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
	// A share has a ceiling that checks the stall's excess put back into
	// the stall (at most 100% of a CPU, every period throttled); a count
	// per second has none, so it is given as read, the figure the store
	// holds and spikehunt suspects shows.
	cpuTime := x.Metric == "system.cpu.time"
	during := x.During
	if cpuTime {
		during = undilute(x.During, x.Baseline)
	}
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
		s += fmt.Sprintf("; counters every %s, coarser than the ~%s stall: ",
			SpokenDuration(time.Duration(x.CounterStepS*float64(time.Second))), spokenLatency(float64(stall)/float64(time.Millisecond)))
		switch {
		case cpuTime:
			s += "over a step it reads " + finePct(x.During) + ", diluted"
		case words.read != "":
			s += "over a step it reads " + words.read + ", diluted"
		case x.Metric == diskLatencyMetric:
			s += "read over a step, diluted"
		default:
			s += fmt.Sprintf("read over a step, diluted; up to %s within the stall, if all of the step's excess fell in it",
				counterRate(x.Metric, undilute(x.During, x.Baseline)))
		}
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
