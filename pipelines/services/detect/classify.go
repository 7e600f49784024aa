package detect

import (
	"cmp"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/spikehunt/spikehunt/internal/vocab"
)

// FleetSpikes is what Classify judges: one service's spike windows over a
// look-back, per host, and the fleet they come from.
type FleetSpikes struct {
	Service                    string
	LookbackStart, LookbackEnd time.Time
	// DataFrom is when the fleet's data begins inside the look-back (zero:
	// LookbackStart). Rates are per observed time: a fleet that came up an
	// hour ago has an hour of spikes, not six hours' worth.
	DataFrom time.Time
	// Fleet maps every host seen in latency_1s over the look-back to its
	// hardware class; quiet hosts count as much as spiking ones.
	Fleet map[string]string
	// Hosts are the hosts with spike windows. A host missing from Fleet is
	// added to it.
	Hosts []HostSpikes
}

// HostSpikes is one host's spike windows, by start.
type HostSpikes struct {
	Host, HWClass string
	Starts        []time.Time // window starts, in any order
}

// Assessment is the evidence Classify decides on, kept apart from the
// decision so tests and the eval can see why a pattern was or was not found.
type Assessment struct {
	HostsTotal      int            // fleet size
	HostsWithSpikes int            // hosts with at least one occurrence
	Repeaters       int            // hosts with two occurrences or more
	Occurrences     int            // spike occurrences (windows merged per PatternConfig.Occurrence)
	HostsByClass    map[string]int // fleet hosts per hardware class
	SpikesByClass   map[string]int // occurrences per hardware class

	// Bursts: the spans of BurstSpan holding at least BurstThreshold
	// distinct hosts; Synchronicity is the share of occurrences in them.
	BurstThreshold int
	Bursts         []Burst
	Synchronicity  float64

	// Dispersion is (p75 − p25) / p50 of the per-host intervals pooled per
	// hardware class (or gapsPenalty × that of the intervals with missed
	// occurrences read in, when less: gapsDispersion), averaged over the
	// classes with enough intervals (weighted by their interval count);
	// NaN when no class has enough.
	Dispersion      float64
	ClassDispersion map[string]float64
	Regularity      float64 // 1 − Dispersion / (2 × MaxDispersion), clamped to 0..1
	MedianInterval  time.Duration

	// TypicalRate is the fleet's per-host occurrence count without its top
	// hosts (plus one spike); Outliers are the hosts whose counts a Poisson
	// at the mean of all other hosts (plus one spike) cannot explain.
	TypicalRate   float64
	Outliers      []string
	OutlierSpikes int
	// OutlierShare is the outliers' share of the spikes beyond what the
	// typical rate explains: (outlier spikes − rate × outliers) / (all
	// spikes − rate × fleet), at most 1.
	OutlierShare float64

	// ClassRate is each class's per-host rate relative to the fleet's;
	// SkewRatio and SkewZ compare the highest and lowest eligible classes.
	ClassRate map[string]float64
	SkewRatio float64
	SkewZ     float64
	// CarrierRatio and CarrierZ compare the same among the hosts that
	// carry the pattern (carrierSkew).
	CarrierRatio float64
	CarrierZ     float64
	Skewed       bool

	perHost  []hostOccurrences
	cfg      PatternConfig // with its defaults
	observed time.Duration // the span the fleet has data for
}

// Burst is a span in which many hosts spiked together.
type Burst struct {
	Start time.Time
	Hosts int
}

type hostOccurrences struct {
	host, class string
	occ         []time.Time // sorted occurrence starts
}

// Classify finds the fleet patterns of one service. It is a pure function
// of its input; Pass feeds it from the spikes table. The rules, with the
// PatternConfig defaults:
//
//   - fleet-synchronized: at least half of the spike occurrences fall in
//     bursts, where a burst is ≥ max(5, 20% of the hosts with spikes)
//     distinct hosts within a 2-minute span, and more than a Poisson at the
//     fleet's spike rate gives at α = 0.001 over all spans of the look-back.
//   - fleet-recurrent: not synchronized; ≥ max(5, 10% of the fleet) hosts
//     spiked at least twice; and their intervals are regular: pooled per
//     hardware class (classes spike at their own periods; a class is judged
//     from 30 intervals), the dispersion (p75 − p25) / p50 is at most 0.5
//     (periodic 15–20 min ≈ 0.15, Poisson ≈ 1.6, and ≈ 1–1.25 for the
//     intervals of a Poisson that fit in a look-back — small noisy fleets
//     reach 0.8 a few times in a hundred; quartiles shrug off the odd missed
//     spike that doubles an interval). Or regular with missed spikes: the
//     same dispersion at most 0.2 once the intervals of two or three
//     periods are read as that many (gapsDispersion), for a stall the
//     detector sees only some of the time, as at night's low load.
//     It fires once the hosts that had their second spike are many, long
//     before every host had it.
//   - isolated-host: 1 to max(3, 2% of the fleet) hosts with three spikes
//     or more whose counts a Poisson at the other hosts' mean count (plus
//     one spike) cannot explain (Bonferroni over the fleet, α = 0.0001),
//     carrying at least half the spikes beyond the fleet's typical count
//     (a little noise on every host does not hide one host spiking every
//     few minutes; a fleet that spikes everywhere, a few hosts more, is
//     not "isolated").
//   - hw-class-skewed (a modifier of the fleet classes): the per-host rate
//     of the busiest hardware class (≥ 5 hosts) is ≥ 1.5 × that of the
//     quietest, at ≥ 3 standard errors: of the split of the spikes between
//     the two classes, widened by how unevenly hosts carry them; or the
//     same ratio and significance between the rates of the hosts that
//     carry the pattern. A random quarter of the fleet
//     affected at one rate is not skewed however its hosts fall.
//
// Rare independent spikes (noise) match none of them: irregular, no bursts
// beyond chance, no outliers. The returned patterns carry everything but
// IllusionShare, Suspects and the detection stamps, which need the store.
func Classify(f FleetSpikes, cfg PatternConfig) []Pattern {
	cs := classify(f, cfg)
	out := make([]Pattern, len(cs))
	for i, c := range cs {
		out[i] = c.Pattern
	}
	return out
}

// classified is a pattern with every host it covers (Pattern keeps a
// sample of 20).
type classified struct {
	Pattern
	hosts []string
}

func classify(f FleetSpikes, cfg PatternConfig) []classified {
	a := Assess(f, cfg)
	return a.patterns(f)
}

// Assess computes the evidence Classify decides on. cfg gets its defaults.
func Assess(f FleetSpikes, cfg PatternConfig) Assessment {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		// Classify has no error: an invalid config falls back to defaults.
		cfg = PatternConfig{}.withDefaults()
	}
	a := Assessment{HostsByClass: map[string]int{}, SpikesByClass: map[string]int{}, ClassDispersion: map[string]float64{}, cfg: cfg}
	fleet := make(map[string]string, len(f.Fleet)+len(f.Hosts))
	for h, c := range f.Fleet {
		fleet[h] = c
	}
	for _, h := range f.Hosts {
		if _, ok := fleet[h.Host]; !ok {
			fleet[h.Host] = h.HWClass
		}
	}
	a.HostsTotal = len(fleet)
	for _, c := range fleet {
		a.HostsByClass[c]++
	}
	for _, h := range f.Hosts {
		occ := occurrences(h.Starts, cfg.Occurrence)
		if len(occ) == 0 {
			continue
		}
		a.perHost = append(a.perHost, hostOccurrences{h.Host, fleet[h.Host], occ})
	}
	// Deterministic order whatever the input's.
	slices.SortFunc(a.perHost, func(x, y hostOccurrences) int { return cmp.Compare(x.host, y.host) })
	for _, h := range a.perHost {
		a.HostsWithSpikes++
		a.Occurrences += len(h.occ)
		a.SpikesByClass[h.class] += len(h.occ)
		if len(h.occ) >= 2 {
			a.Repeaters++
		}
	}
	from := f.LookbackStart
	if f.DataFrom.After(from) {
		from = f.DataFrom
	}
	lookback := f.LookbackEnd.Sub(from)
	if lookback < cfg.BurstSpan {
		lookback = cfg.BurstSpan
	}
	a.observed = lookback
	a.assessBursts(cfg, lookback)
	a.assessIntervals(cfg)
	a.assessOutliers(cfg)
	a.assessSkew(cfg)
	return a
}

// occurrences sorts starts and merges those within gap of an occurrence's
// first window into it.
func occurrences(starts []time.Time, gap time.Duration) []time.Time {
	s := slices.Clone(starts)
	slices.SortFunc(s, func(x, y time.Time) int { return x.Compare(y) })
	var occ []time.Time
	for _, t := range s {
		if n := len(occ); n > 0 && t.Sub(occ[n-1]) <= gap {
			continue
		}
		occ = append(occ, t)
	}
	return occ
}

func (a *Assessment) assessBursts(cfg PatternConfig, lookback time.Duration) {
	type event struct {
		t    time.Time
		host int
	}
	var ev []event
	for i, h := range a.perHost {
		for _, t := range h.occ {
			ev = append(ev, event{t, i})
		}
	}
	if len(ev) == 0 {
		return
	}
	slices.SortFunc(ev, func(x, y event) int {
		if c := x.t.Compare(y.t); c != 0 {
			return c
		}
		return cmp.Compare(x.host, y.host)
	})
	// Under independent spikes at the fleet's rate, a span holds a Poisson
	// number of them; a burst must be far beyond what any of the
	// look-back's spans would show by chance.
	spans := math.Max(1, float64(lookback)/float64(cfg.BurstSpan))
	lambda := float64(len(ev)) * float64(cfg.BurstSpan) / float64(lookback)
	chance := poissonQuantile(lambda, cfg.BurstAlpha/spans)
	a.BurstThreshold = max(cfg.BurstMinHosts, int(math.Ceil(cfg.BurstHostShare*float64(a.HostsWithSpikes))), chance)

	inBurst := 0
	counts := map[int]int{}
	j := 0
	for i := 0; i < len(ev); {
		for j < len(ev) && ev[j].t.Sub(ev[i].t) <= cfg.BurstSpan {
			counts[ev[j].host]++
			j++
		}
		if len(counts) >= a.BurstThreshold {
			a.Bursts = append(a.Bursts, Burst{Start: ev[i].t, Hosts: len(counts)})
			inBurst += j - i
			clear(counts)
			i = j
			continue
		}
		if counts[ev[i].host]--; counts[ev[i].host] == 0 {
			delete(counts, ev[i].host)
		}
		i++
	}
	a.Synchronicity = float64(inBurst) / float64(len(ev))
}

func (a *Assessment) assessIntervals(cfg PatternConfig) {
	byClass := map[string][]float64{}
	var hostMedians []float64
	for _, h := range a.perHost {
		if len(h.occ) < 2 {
			continue
		}
		iv := make([]float64, 0, len(h.occ)-1)
		for k := 1; k < len(h.occ); k++ {
			iv = append(iv, h.occ[k].Sub(h.occ[k-1]).Seconds())
		}
		byClass[h.class] = append(byClass[h.class], iv...)
		hostMedians = append(hostMedians, quantile(iv, 0.5))
	}
	if len(hostMedians) > 0 {
		a.MedianInterval = time.Duration(quantile(hostMedians, 0.5) * float64(time.Second)).Round(time.Second)
	}
	var sum, n float64
	for class, iv := range byClass {
		if len(iv) < cfg.MinIntervals {
			continue
		}
		d := dispersion(iv)
		if math.IsNaN(d) {
			continue
		}
		if m := gapsDispersion(iv) * gapsPenalty; m < d {
			d = m
		}
		a.ClassDispersion[class] = d
		sum += d * float64(len(iv))
		n += float64(len(iv))
	}
	if n == 0 {
		a.Dispersion = math.NaN()
		return
	}
	a.Dispersion = sum / n
	a.Regularity = math.Max(0, math.Min(1, 1-a.Dispersion/(2*cfg.MaxDispersion)))
}

// dispersion is (p75 − p25) / p50 of iv; NaN when p50 is not positive.
func dispersion(iv []float64) float64 {
	p25, p50, p75 := quantile(iv, 0.25), quantile(iv, 0.5), quantile(iv, 0.75)
	if p50 <= 0 {
		return math.NaN()
	}
	return (p75 - p25) / p50
}

// gapsDispersion is the dispersion of iv read as one period with missed
// occurrences: an interval about k = 2…gapsMaxMissed+1 times the median
// counts as x / k. A stall the detector cannot see is missed on every host
// alike: a 1 s stall of an endpoint that gets 1.4 requests a second (a
// storefront's night) holds none of them a quarter of the time, and a
// quarter of the intervals are then two or three periods long. The
// quartiles shrug off a few of those, not a quarter: p75 lands on them and
// a fleet stalling every 18 minutes, as plain by night as by day, reads as
// irregular. Folding also draws a Poisson's long intervals in towards its
// median (its dispersion of about 1.4 to about 0.7), so assessIntervals
// holds this reading to a bar gapsPenalty times tighter.
func gapsDispersion(iv []float64) float64 {
	p50 := quantile(iv, 0.5)
	if p50 <= 0 {
		return math.NaN()
	}
	folded := make([]float64, len(iv))
	for i, x := range iv {
		folded[i] = x
		if k := math.Round(x / p50); k >= 2 && k <= gapsMaxMissed+1 {
			folded[i] = x / k
		}
	}
	return dispersion(folded)
}

// gapsMaxMissed is how many missed occurrences in a row gapsDispersion
// reads into one interval; gapsPenalty multiplies its dispersion. With
// them a 40-host fleet over 2 h whose stalls are each missed at random
// reads as regular in 998 of 1,000 seeds at 35% missed and 952 at 45%
// (229 and 15 by the quartiles alone), while the Poisson fleets of the
// classifier's noise tests (30–1,000 hosts, 1,000 seeds each) read no
// more regular than before.
const (
	gapsMaxMissed = 2
	gapsPenalty   = 2.5
)

func (a *Assessment) assessOutliers(cfg PatternConfig) {
	n := a.HostsTotal
	top := max(cfg.IsolatedMaxHosts, int(math.Ceil(cfg.IsolatedHostShare*float64(n))))
	if n <= top || a.Occurrences == 0 {
		return // too small a fleet to tell a few hosts from the rest
	}
	// Each host is tested against the mean of all the others: unbiased for
	// a fleet of independent spikers (a trimmed mean would understate the
	// rate and make chance highs "outliers"), and a few bad hosts raise it
	// too little to hide one another. One spike is added to the others, as
	// if the quiet fleet had just had its first: a host needs three spikes
	// to stand out from 300 silent ones, four from 10.
	for _, h := range a.perHost {
		rate := float64(a.Occurrences-len(h.occ)+1) / float64(n-1)
		if len(h.occ) >= isolatedMinSpikes && poissonTail(len(h.occ), rate)*float64(n) < cfg.IsolatedAlpha {
			a.Outliers = append(a.Outliers, h.host)
			a.OutlierSpikes += len(h.occ)
		}
	}
	// The typical count is the fleet's mean without its top hosts, and the
	// outliers must carry most of the spikes beyond it: a little noise on
	// every host does not hide one host spiking every few minutes, but a
	// fleet that spikes everywhere, a few hosts more, is not "isolated".
	counts := make([]int, n) // quiet hosts are zeros
	for i, h := range a.perHost {
		counts[i] = len(h.occ)
	}
	slices.SortFunc(counts, func(x, y int) int { return cmp.Compare(y, x) })
	rest := 0
	for _, c := range counts[top:] {
		rest += c
	}
	a.TypicalRate = float64(rest+1) / float64(n-top)
	excess := float64(a.Occurrences) - a.TypicalRate*float64(n)
	outlierExcess := float64(a.OutlierSpikes) - a.TypicalRate*float64(len(a.Outliers))
	if len(a.Outliers) > 0 && outlierExcess > 0 {
		a.OutlierShare = math.Min(1, outlierExcess/math.Max(excess, outlierExcess))
	}
}

// isolatedMinSpikes: a host is an outlier from its third spike on; two
// spikes close together are bad luck, not yet a pattern.
const isolatedMinSpikes = 3

func (a *Assessment) assessSkew(cfg PatternConfig) {
	if a.Occurrences == 0 || a.HostsTotal == 0 {
		return
	}
	fleetRate := float64(a.Occurrences) / float64(a.HostsTotal)
	a.ClassRate = map[string]float64{}
	type classRate struct {
		class  string
		hosts  int
		spikes int
		rate   float64
	}
	var eligible []classRate
	for class, hosts := range a.HostsByClass {
		rate := float64(a.SpikesByClass[class]) / float64(hosts)
		a.ClassRate[class] = rate / fleetRate
		if hosts >= cfg.SkewMinHosts {
			eligible = append(eligible, classRate{class, hosts, a.SpikesByClass[class], rate})
		}
	}
	if len(eligible) < 2 {
		return
	}
	slices.SortFunc(eligible, func(x, y classRate) int {
		if c := cmp.Compare(x.rate, y.rate); c != 0 {
			return c
		}
		return cmp.Compare(x.class, y.class)
	})
	lo, hi := eligible[0], eligible[len(eligible)-1]
	if lo.rate == 0 {
		a.SkewRatio = math.Inf(1)
	} else {
		a.SkewRatio = hi.rate / lo.rate
	}
	// Given the two classes' spikes, how far is the busy class's share from
	// its share of the hosts, in binomial standard errors — widened by the
	// overdispersion of the per-host counts. Spikes are not independent
	// draws: a host either carries the pattern (and a dozen spikes) or not,
	// so when a quarter of the fleet is affected, which hosts those are
	// splits the spikes between the classes far more unevenly than a
	// binomial of spikes allows. The quasi-Poisson correction divides z by
	// √φ, φ = the classes' pooled within-class variance of per-host counts
	// over their mean count (at least 1: regular counts are no evidence
	// beyond the binomial's).
	k := float64(hi.spikes + lo.spikes)
	p := float64(hi.hosts) / float64(hi.hosts+lo.hosts)
	if sd := math.Sqrt(k * p * (1 - p) * a.overdispersion(hi.class, lo.class)); sd > 0 {
		a.SkewZ = (float64(hi.spikes) - k*p) / sd
	}
	a.Skewed = a.SkewRatio >= cfg.SkewMinRatio && a.SkewZ >= cfg.SkewMinZ
	// That test also dilutes a real skew among a few affected hosts with
	// the many that are not, and which class the affected hosts fall in
	// can even out the classes' rates: the hosts that carry the pattern
	// are compared on their own too (Welch).
	names := make([]string, 0, len(eligible))
	for _, c := range eligible {
		names = append(names, c.class)
	}
	a.CarrierRatio, a.CarrierZ = a.carrierSkew(names)
	if a.CarrierRatio >= cfg.SkewMinRatio && a.CarrierZ >= cfg.SkewMinZ {
		a.Skewed = true
	}
}

// carrierSkew compares the per-host occurrence counts of the hosts that
// carry the pattern, class by class among classes: the ratio of the
// highest class mean to the lowest and Welch's z for the two (+Inf when
// both are exact); zeros with fewer than two classes of three carriers.
// A carrier has at least 2 × the fleet's lower-quartile count + 3
// occurrences (quiet hosts count zero): above what noise spread over
// every host gives (a quartile of 1 under a Poisson of mean 2 puts the bar
// at 5, which one host in 20 passes), any host that repeats when a
// quarter of the fleet is quiet, and, the quartile being low, the slower
// class's hosts too when half of the fleet carries the pattern.
func (a *Assessment) carrierSkew(classes []string) (ratio, z float64) {
	counts := make([]int, a.HostsTotal)
	for i, h := range a.perHost {
		if i < len(counts) {
			counts[i] = len(h.occ)
		}
	}
	slices.Sort(counts)
	bar := 3
	if len(counts) > 0 {
		bar += 2 * counts[len(counts)/4]
	}
	type stat struct{ n, mean, variance float64 }
	var stats []stat
	for _, class := range classes {
		var n, sum, sq float64
		for _, h := range a.perHost {
			if h.class == class && len(h.occ) >= bar {
				x := float64(len(h.occ))
				n++
				sum += x
				sq += x * x
			}
		}
		if n >= 3 {
			stats = append(stats, stat{n, sum / n, math.Max(0, (sq-sum*sum/n)/(n-1))})
		}
	}
	if len(stats) < 2 {
		return 0, 0
	}
	slices.SortFunc(stats, func(x, y stat) int { return cmp.Compare(x.mean, y.mean) })
	lo, hi := stats[0], stats[len(stats)-1]
	if hi.mean <= lo.mean {
		return 1, 0
	}
	ratio = hi.mean / lo.mean
	se := math.Sqrt(hi.variance/hi.n + lo.variance/lo.n)
	if se == 0 {
		return ratio, math.Inf(1)
	}
	return ratio, (hi.mean - lo.mean) / se
}

// overdispersion is φ of assessSkew for two classes: the pooled
// within-class variance of per-host occurrence counts (hosts without
// spikes count zero) over the classes' mean count, at least 1.
func (a *Assessment) overdispersion(classes ...string) float64 {
	var hosts, spikes, within, dof float64
	for _, class := range classes {
		n := float64(a.HostsByClass[class])
		var sum, sq float64
		for _, h := range a.perHost {
			if h.class == class {
				x := float64(len(h.occ))
				sum += x
				sq += x * x
			}
		}
		if n < 2 {
			continue
		}
		within += sq - sum*sum/n
		dof += n - 1
		hosts += n
		spikes += sum
	}
	if dof == 0 || spikes == 0 {
		return 1
	}
	return math.Max(1, (within/dof)/(spikes/hosts))
}

func (a *Assessment) patterns(f FleetSpikes) []classified {
	cfg := a.cfg
	if a.Occurrences == 0 {
		return nil
	}
	base := func(class string, hosts []string) classified {
		p := Pattern{
			ID: PatternID(f.Service, class), Service: f.Service, Class: class,
			LookbackStart: f.LookbackStart, LookbackEnd: f.LookbackEnd,
			HostsAffected: len(hosts), HostsTotal: a.HostsTotal,
			RecurrenceInterval: a.MedianInterval, Synchronicity: a.Synchronicity,
			HWClassSkew: a.ClassRate, AffectedHostsSample: a.sample(hosts),
		}
		if !math.IsNaN(a.Dispersion) {
			p.Regularity = a.Regularity
		}
		if class != vocab.ClassIsolatedHost && a.Skewed {
			p.Modifiers = []string{vocab.ModifierHWClassSkewed}
		}
		return classified{p, hosts}
	}
	var out []classified
	synchronized := len(a.Bursts) > 0 && a.Synchronicity >= cfg.MinSynchronicity
	if synchronized {
		out = append(out, base(vocab.ClassFleetSynchronized, a.burstHosts(cfg)))
	}
	needRepeaters := max(cfg.RecurrentMinHosts, int(math.Ceil(cfg.RecurrentHostShare*float64(a.HostsTotal))))
	if !synchronized && a.Repeaters >= needRepeaters && !math.IsNaN(a.Dispersion) && a.Dispersion <= cfg.MaxDispersion {
		hosts := make([]string, 0, len(a.perHost))
		for _, h := range a.perHost {
			hosts = append(hosts, h.host)
		}
		out = append(out, base(vocab.ClassFleetRecurrent, hosts))
	}
	maxIsolated := max(cfg.IsolatedMaxHosts, int(math.Ceil(cfg.IsolatedHostShare*float64(a.HostsTotal))))
	if n := len(a.Outliers); n >= 1 && n <= maxIsolated && a.OutlierShare >= cfg.IsolatedMinShare {
		p := base(vocab.ClassIsolatedHost, a.Outliers)
		// The fleet's interval and regularity say nothing of the outliers.
		p.RecurrenceInterval, p.Regularity = a.outlierIntervals(cfg)
		out = append(out, p)
	}
	return out
}

// burstHosts lists the distinct hosts with an occurrence inside a burst.
func (a *Assessment) burstHosts(cfg PatternConfig) []string {
	var hosts []string
	for _, h := range a.perHost {
		for _, t := range h.occ {
			if a.inBurst(t, cfg) {
				hosts = append(hosts, h.host)
				break
			}
		}
	}
	return hosts
}

func (a *Assessment) inBurst(t time.Time, cfg PatternConfig) bool {
	for _, b := range a.Bursts {
		if !t.Before(b.Start) && t.Sub(b.Start) <= cfg.BurstSpan {
			return true
		}
	}
	return false
}

// outlierIntervals is the median interval and regularity of the outlier
// hosts alone.
func (a *Assessment) outlierIntervals(cfg PatternConfig) (time.Duration, float64) {
	var iv []float64
	for _, h := range a.perHost {
		if !slices.Contains(a.Outliers, h.host) {
			continue
		}
		for k := 1; k < len(h.occ); k++ {
			iv = append(iv, h.occ[k].Sub(h.occ[k-1]).Seconds())
		}
	}
	if len(iv) == 0 {
		return 0, 0
	}
	p50 := quantile(iv, 0.5)
	reg := 0.0
	if len(iv) >= 3 && p50 > 0 {
		d := (quantile(iv, 0.75) - quantile(iv, 0.25)) / p50
		reg = math.Max(0, math.Min(1, 1-d/(2*cfg.MaxDispersion)))
	}
	return time.Duration(p50 * float64(time.Second)).Round(time.Second), reg
}

// sample is up to 20 of hosts, most occurrences first.
func (a *Assessment) sample(hosts []string) []string {
	count := map[string]int{}
	for _, h := range a.perHost {
		count[h.host] = len(h.occ)
	}
	s := slices.Clone(hosts)
	slices.SortFunc(s, func(x, y string) int {
		if c := cmp.Compare(count[y], count[x]); c != 0 {
			return c
		}
		return cmp.Compare(x, y)
	})
	if len(s) > 20 {
		s = s[:20]
	}
	return s
}

// PatternID is the stable id of a service's pattern of one class: the same
// across evaluations, so patterns rows of successive look-backs are
// versions of one pattern.
func PatternID(service, class string) string {
	h := fnv.New64a()
	h.Write([]byte(service))
	h.Write([]byte{0})
	h.Write([]byte(class))
	return strconv.FormatUint(h.Sum64(), 16)
}

// quantile is the q-quantile of xs with linear interpolation between order
// statistics (type 7, as numpy and quantileExactInclusive). xs is not
// modified.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	if lo+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[lo] + (pos-float64(lo))*(s[lo+1]-s[lo])
}

// poissonTail is P(X ≥ c) for X ~ Poisson(lambda).
func poissonTail(c int, lambda float64) float64 {
	switch {
	case c <= 0:
		return 1
	case lambda <= 0:
		return 0
	case float64(c) <= lambda:
		// A large tail: one minus the lower sum. (For a huge lambda the
		// first term underflows and this says 1, which is near enough: the
		// tail at or below the mean is above one half.)
		lower, term := 0.0, math.Exp(-lambda)
		for i := 0; i < c; i++ {
			lower += term
			term *= lambda / float64(i+1)
		}
		return math.Max(0, 1-lower)
	}
	lg, _ := math.Lgamma(float64(c) + 1)
	term := math.Exp(-lambda + float64(c)*math.Log(lambda) - lg)
	sum := 0.0
	for i := c; term > 0 && term >= sum*1e-16; i++ {
		sum += term
		term *= lambda / float64(i+1)
	}
	return math.Min(1, sum)
}

// poissonQuantile is the least c with P(X ≥ c) ≤ p for X ~ Poisson(lambda).
func poissonQuantile(lambda, p float64) int {
	c := int(math.Floor(lambda)) + 1
	for poissonTail(c, lambda) > p {
		c++
	}
	return c
}
