// Package eval scores the detectors against the simulator's ground truth:
// every scenario through sim → ingest → detect on the embedded engine
// (make eval). Scoring is pure (score.go); the harness (eval.go) owns the
// store and the passes.
package eval

import (
	"sort"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

// overlapSlack widens both sides of a comparison: a stall that starts
// late in a second is reported from that second's start, and requests
// in flight when it ends finish a second later.
const overlapSlack = 2 * time.Second

// WindowScore is recall and precision by overlap: a truth window is found
// when a detected window of the same host overlaps it; a detected window
// is right when it overlaps a truth window of its host.
type WindowScore struct {
	Truth, Detected int
	Found, Right    int
	// HostsTruth are the hosts with truth windows; HostsFound those of
	// them with at least one truth window found.
	HostsTruth, HostsFound int
}

// Recall is Found / Truth (1 when there is nothing to find).
func (s WindowScore) Recall() float64 { return ratio(s.Found, s.Truth) }

// Precision is Right / Detected (1 when nothing was detected).
func (s WindowScore) Precision() float64 { return ratio(s.Right, s.Detected) }

func ratio(a, b int) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

// ScoreWindows matches truth windows to detected ones host by host.
func ScoreWindows(truth []sim.Window, got []detect.SpikeWindow) WindowScore {
	s := WindowScore{Truth: len(truth), Detected: len(got)}
	byHost := map[string][]detect.SpikeWindow{}
	for _, g := range got {
		byHost[g.Host] = append(byHost[g.Host], g)
	}
	for _, ws := range byHost {
		sort.Slice(ws, func(i, j int) bool { return ws[i].Start.Before(ws[j].Start) })
	}
	right := map[*detect.SpikeWindow]bool{}
	hosts := map[string]bool{}
	for _, t := range truth {
		if _, ok := hosts[t.Host]; !ok {
			hosts[t.Host] = false
		}
		ws := byHost[t.Host]
		// The first detected window that ends after the truth starts.
		i := sort.Search(len(ws), func(i int) bool { return ws[i].End.Add(overlapSlack).After(t.Start) })
		found := false
		for ; i < len(ws) && ws[i].Start.Before(t.End.Add(overlapSlack)); i++ {
			found = true
			right[&ws[i]] = true
		}
		if found {
			s.Found++
			hosts[t.Host] = true
		}
	}
	s.Right = len(right)
	s.HostsTruth = len(hosts)
	for _, f := range hosts {
		if f {
			s.HostsFound++
		}
	}
	return s
}

// Top1 is how often a detected spike that overlaps a stall with a kernel
// cause has, as its rank-1 suspect, one of the series the cause moves.
type Top1 struct{ Spikes, Right int }

// Accuracy is Right / Spikes (0 when there were none to judge).
func (t Top1) Accuracy() float64 {
	if t.Spikes == 0 {
		return 0
	}
	return float64(t.Right) / float64(t.Spikes)
}

// ScoreTop1 judges the rank-1 suspect of each detected window that
// overlaps a truth window whose cause has suspects (tr.TopSuspects).
func ScoreTop1(tr sim.Truth, got []detect.SpikeWindow) Top1 {
	var out Top1
	if len(tr.TopSuspects) == 0 {
		return out
	}
	byHost := map[string][]sim.Window{}
	for _, w := range tr.Windows {
		if w.Cause != sim.CauseNone {
			byHost[w.Host] = append(byHost[w.Host], w)
		}
	}
	for _, g := range got {
		caused := false
		for _, w := range byHost[g.Host] {
			if g.Start.Before(w.End.Add(overlapSlack)) && w.Start.Before(g.End.Add(overlapSlack)) {
				caused = true
				break
			}
		}
		if !caused {
			continue
		}
		out.Spikes++
		if len(g.Suspects) > 0 && matches(tr.TopSuspects, g.Suspects[0]) {
			out.Right++
		}
	}
	return out
}

func matches(keys []sim.SuspectKey, s detect.Suspect) bool {
	for _, k := range keys {
		if k.Metric != s.Metric || (k.Mode != "" && k.Mode != s.Mode) || (k.Device != "" && k.Device != s.Device) ||
			!strings.HasPrefix(s.Device, k.DevicePrefix) {
			continue
		}
		if len(k.CPUs) == 0 {
			return true
		}
		for _, c := range k.CPUs {
			if c == s.CPU {
				return true
			}
		}
	}
	return false
}

// ClassRight says whether a pass's patterns name the truth's class (and
// modifiers): with no truth class, right means no pattern at all.
func ClassRight(tr sim.Truth, got []detect.Pattern) bool {
	if tr.Class == "" {
		return len(got) == 0
	}
	for _, p := range got {
		if p.Class == tr.Class && sameSet(p.Modifiers, tr.Modifiers) {
			return true
		}
	}
	return false
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		if m[s] == 0 {
			return false
		}
		m[s]--
	}
	return true
}

// Classes lists the classes of patterns, for printing.
func Classes(ps []detect.Pattern) []string {
	var out []string
	for _, p := range ps {
		c := p.Class
		for _, m := range p.Modifiers {
			c += "+" + m
		}
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// MethodScore is one detection method's score on one run, spikehunt's
// or a baseline rule's (baselines.go), for the side-by-side table of
// make bench-peers-detect.
type MethodScore struct {
	Method  string
	Windows WindowScore
	// Alerts is how many windows the method raised: spike windows, or a
	// rule's flagged minutes (a fleet minute counts once).
	Alerts int
	// Pattern is PatternVerdict of the patterns the method's windows show;
	// Classes names them.
	Pattern string
	Classes []string
}

// Pattern verdicts: whether a method's output shows the truth's fleet
// pattern.
const (
	PatternSeen   = "seen"   // a pattern of the truth's class (modifiers aside)
	PatternMissed = "missed" // no pattern where the truth has one
	PatternWrong  = "wrong"  // only patterns of another class, or one where the truth has none
	PatternNone   = "-"      // no pattern to see, and none claimed
)

// PatternVerdict judges patterns by class alone: "could the recurrence be
// seen at all", the hw-class-skewed modifier aside (ClassRight holds
// spikehunt to the modifiers too).
func PatternVerdict(tr sim.Truth, got []detect.Pattern) string {
	for _, p := range got {
		if tr.Class != "" && p.Class == tr.Class {
			return PatternSeen
		}
	}
	switch {
	case len(got) > 0:
		return PatternWrong
	case tr.Class != "":
		return PatternMissed
	}
	return PatternNone
}

// ScoreSpikehunt is a run's score in the same terms as a baseline's.
func ScoreSpikehunt(r Result) MethodScore {
	return MethodScore{Method: MethodSpikehunt, Windows: r.Windows, Alerts: r.Windows.Detected,
		Pattern: PatternVerdict(r.Truth, r.Patterns), Classes: r.Classes}
}

// ScoreFlags scores a baseline rule's flags with spikehunt's scoring:
// each flag is a spike window of one minute on its host, and a fleet flag
// (Host "") one on every host of fleet, since that is all the alert says.
// A fleet flag names no host, so it finds none: HostsFound counts only
// the hosts of flags that name one. The pattern is what Classify, the
// detector's own pure classifier, makes of the flagged minutes over
// [from, to): whether the recurrence could be seen in the rule's output
// at all, by the best reading of it that spikehunt knows.
func ScoreFlags(tr sim.Truth, method string, flags []Flag, fleet map[string]string, from, to time.Time) MethodScore {
	var all, named []detect.SpikeWindow
	starts := map[string][]time.Time{}
	for _, f := range flags {
		w := detect.SpikeWindow{Host: f.Host, Start: f.Minute, End: f.Minute.Add(time.Minute)}
		if f.Host != "" {
			named = append(named, w)
			all = append(all, w)
			starts[f.Host] = append(starts[f.Host], f.Minute)
			continue
		}
		for h := range fleet {
			w.Host = h
			all = append(all, w)
			starts[h] = append(starts[h], f.Minute)
		}
	}
	s := MethodScore{Method: method, Windows: ScoreWindows(tr.Windows, all), Alerts: len(flags)}
	s.Windows.HostsFound = ScoreWindows(tr.Windows, named).HostsFound

	fs := detect.FleetSpikes{LookbackStart: from, LookbackEnd: to, Fleet: fleet}
	for h, st := range starts {
		fs.Hosts = append(fs.Hosts, detect.HostSpikes{Host: h, HWClass: fleet[h], Starts: st})
	}
	sort.Slice(fs.Hosts, func(i, j int) bool { return fs.Hosts[i].Host < fs.Hosts[j].Host })
	ps := detect.Classify(fs, detect.PatternConfig{Lookback: to.Sub(from)})
	s.Pattern, s.Classes = PatternVerdict(tr, ps), Classes(ps)
	return s
}
