package detect

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spikehunt/spikehunt/internal/vocab"
)

// The classifier on synthetic spike lists: cheap, so the scenarios are
// full-size fleets and the false-positive checks run many seeds.

var lookbackEnd = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC) // fixed date: classified in memory, never stored

// syntheticFleet builds FleetSpikes of n hosts (class gen4 for even
// indices, gen5 for odd) over the 6 h before lookbackEnd; spikes gives a
// host's window starts.
func syntheticFleet(n int, spikes func(i int, class string, rng *rand.Rand) []time.Time, seed uint64) FleetSpikes {
	f := FleetSpikes{Service: "billy", LookbackStart: lookbackEnd.Add(-6 * time.Hour), LookbackEnd: lookbackEnd, Fleet: map[string]string{}}
	for i := 0; i < n; i++ {
		host, class := fmt.Sprintf("host-%03d", i), []string{"gen4", "gen5"}[i%2]
		f.Fleet[host] = class
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		var in []time.Time
		for _, t := range spikes(i, class, rng) {
			if !t.Before(f.LookbackStart) && t.Before(f.LookbackEnd) {
				in = append(in, t)
			}
		}
		if len(in) > 0 {
			f.Hosts = append(f.Hosts, HostSpikes{Host: host, HWClass: class, Starts: in})
		}
	}
	return f
}

// periodic spikes every [lo, hi) (a period fixed per host), at a random
// phase, with ±jitter, from start to the look-back's end; missed is the
// chance a spike does not happen.
func periodic(start time.Time, lo, hi, jitter time.Duration, missed float64) func(int, string, *rand.Rand) []time.Time {
	return func(_ int, _ string, rng *rand.Rand) []time.Time {
		period := lo + time.Duration(rng.Int64N(int64(hi-lo)))
		var out []time.Time
		for t := start.Add(time.Duration(rng.Int64N(int64(period)))); t.Before(lookbackEnd); t = t.Add(period) {
			if rng.Float64() < missed {
				continue
			}
			out = append(out, t.Add(time.Duration(rng.Int64N(int64(2*jitter+1)))-jitter).Truncate(time.Second))
		}
		return out
	}
}

// poisson spikes at one per mean (exponential gaps) from start.
func poisson(start time.Time, mean time.Duration) func(int, string, *rand.Rand) []time.Time {
	return func(_ int, _ string, rng *rand.Rand) []time.Time {
		var out []time.Time
		for t := start.Add(time.Duration(rng.ExpFloat64() * float64(mean))); t.Before(lookbackEnd); t = t.Add(time.Duration(rng.ExpFloat64() * float64(mean))) {
			out = append(out, t.Truncate(time.Second))
		}
		return out
	}
}

// classes of the patterns found, with their modifiers.
func classes(ps []Pattern) []string {
	var out []string
	for _, p := range ps {
		s := p.Class
		for _, m := range p.Modifiers {
			s += "+" + m
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func TestDetectClassifyFindsEachPatternOnSyntheticFleets(t *testing.T) {
	start := lookbackEnd.Add(-6 * time.Hour)
	hourly := func(jitter time.Duration) func(int, string, *rand.Rand) []time.Time {
		return func(_ int, _ string, rng *rand.Rand) []time.Time {
			var out []time.Time
			for t := start.Add(17 * time.Minute); t.Before(lookbackEnd); t = t.Add(time.Hour) {
				out = append(out, t.Add(time.Duration(rng.Int64N(int64(2*jitter+1)))-jitter))
			}
			return out
		}
	}
	tests := []struct {
		name   string
		hosts  int
		spikes func(int, string, *rand.Rand) []time.Time
		want   []string
		check  func(t *testing.T, ps []Pattern)
	}{
		{
			name:  "a 1 s stall every 15–20 min on 300 hosts at random phases is fleet-recurrent every ~17.5 min",
			hosts: 300, spikes: periodic(start, 15*time.Minute, 20*time.Minute, 5*time.Second, 0),
			want: []string{vocab.ClassFleetRecurrent},
			check: func(t *testing.T, ps []Pattern) {
				p := ps[0]
				if p.RecurrenceInterval < 16*time.Minute || p.RecurrenceInterval > 19*time.Minute {
					t.Errorf("recurrence interval %v, want about 17.5 min", p.RecurrenceInterval)
				}
				if p.Regularity < 0.8 {
					t.Errorf("regularity %.2f, want ≥ 0.8 for a periodic stall", p.Regularity)
				}
				if p.HostsAffected != 300 || p.HostsTotal != 300 {
					t.Errorf("hosts %d/%d, want 300/300", p.HostsAffected, p.HostsTotal)
				}
				if p.Synchronicity > 0.1 {
					t.Errorf("synchronicity %.2f, want near 0 at random phases", p.Synchronicity)
				}
			},
		},
		{
			name:  "a periodic stall with a tenth of its spikes missed is still fleet-recurrent",
			hosts: 300, spikes: periodic(start, 15*time.Minute, 20*time.Minute, 5*time.Second, 0.1),
			want: []string{vocab.ClassFleetRecurrent},
		},
		{
			name:  "twice the rate on one hardware class adds the hw-class-skewed modifier",
			hosts: 300,
			spikes: func(i int, class string, rng *rand.Rand) []time.Time {
				if class == "gen5" {
					return periodic(start, 450*time.Second, 600*time.Second, 5*time.Second, 0)(i, class, rng)
				}
				return periodic(start, 15*time.Minute, 20*time.Minute, 5*time.Second, 0)(i, class, rng)
			},
			want: []string{vocab.ClassFleetRecurrent + "+" + vocab.ModifierHWClassSkewed},
			check: func(t *testing.T, ps []Pattern) {
				skew := ps[0].HWClassSkew
				if skew["gen5"] < 1.2 || skew["gen4"] > 0.8 {
					t.Errorf("hw_class_skew %v, want gen5 ≈ 1.33 and gen4 ≈ 0.67", skew)
				}
			},
		},
		{
			name:  "the same 30 s stall on every host hourly is fleet-synchronized, not recurrent",
			hosts: 300, spikes: hourly(3 * time.Second),
			want: []string{vocab.ClassFleetSynchronized},
			check: func(t *testing.T, ps []Pattern) {
				if p := ps[0]; p.Synchronicity < 0.99 || p.HostsAffected != 300 || p.RecurrenceInterval != time.Hour {
					t.Errorf("synchronicity %.2f, hosts %d, interval %v; want 1, 300, 1h", p.Synchronicity, p.HostsAffected, p.RecurrenceInterval)
				}
			},
		},
		{
			name:  "a single burst of 300 hosts is fleet-synchronized right after it happens",
			hosts: 300,
			spikes: func(_ int, _ string, rng *rand.Rand) []time.Time {
				return []time.Time{lookbackEnd.Add(-2*time.Minute + time.Duration(rng.IntN(5))*time.Second)}
			},
			want: []string{vocab.ClassFleetSynchronized},
		},
		{
			name:  "one host spiking every ~3 min is isolated-host, even over background noise",
			hosts: 300,
			spikes: func(i int, class string, rng *rand.Rand) []time.Time {
				if i == 42 {
					return periodic(lookbackEnd.Add(-time.Hour), 150*time.Second, 210*time.Second, 10*time.Second, 0)(i, class, rng)
				}
				return poisson(start, 12*time.Hour)(i, class, rng)
			},
			want: []string{vocab.ClassIsolatedHost},
			check: func(t *testing.T, ps []Pattern) {
				if diff := cmp.Diff([]string{"host-042"}, ps[0].AffectedHostsSample); diff != "" {
					t.Errorf("affected hosts (-want +got):\n%s", diff)
				}
				if iv := ps[0].RecurrenceInterval; iv < 150*time.Second || iv > 210*time.Second {
					t.Errorf("interval %v, want the isolated host's ~3 min", iv)
				}
			},
		},
		{
			name:  "a third spike on one host of 300 silent ones makes it isolated-host",
			hosts: 300,
			spikes: func(i int, _ string, _ *rand.Rand) []time.Time {
				if i == 9 {
					return []time.Time{lookbackEnd.Add(-30 * time.Minute), lookbackEnd.Add(-18 * time.Minute), lookbackEnd.Add(-6 * time.Minute)}
				}
				return nil
			},
			want: []string{vocab.ClassIsolatedHost},
		},
		{
			name:  "two spikes on one host are not yet a pattern",
			hosts: 300,
			spikes: func(i int, _ string, _ *rand.Rand) []time.Time {
				if i == 9 {
					return []time.Time{lookbackEnd.Add(-18 * time.Minute), lookbackEnd.Add(-6 * time.Minute)}
				}
				return nil
			},
			want: nil,
		},
		{
			name:  "rare independent spikes (one per ~5 h per host) are no pattern",
			hosts: 300, spikes: poisson(start.Add(-6*time.Hour), 5*time.Hour),
			want: nil,
		},
		{
			name:  "a fleet without spikes is no pattern",
			hosts: 300, spikes: func(int, string, *rand.Rand) []time.Time { return nil },
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := syntheticFleet(tt.hosts, tt.spikes, 1)
			ps := Classify(f, PatternConfig{})
			if diff := cmp.Diff(tt.want, classes(ps)); diff != "" {
				a := Assess(f, PatternConfig{})
				t.Fatalf("classes (-want +got):\n%s\nassessment: repeaters %d, dispersion %.2f %v, sync %.2f (threshold %d, %d bursts), outliers %v, skew %.2f z %.1f",
					diff, a.Repeaters, a.Dispersion, a.ClassDispersion, a.Synchronicity, a.BurstThreshold, len(a.Bursts), a.Outliers, a.SkewRatio, a.SkewZ)
			}
			for _, p := range ps {
				if p.ID != PatternID("billy", p.Class) || p.Service != "billy" || !p.LookbackEnd.Equal(lookbackEnd) {
					t.Errorf("pattern %+v: id, service or look-back not set", p)
				}
			}
			if tt.check != nil {
				tt.check(t, ps)
			}
		})
	}
}

// Noise must stay noise over many fleets, not just one lucky seed: every
// pass re-classifies, and one false pattern an hour would be an alert storm.
func TestDetectClassifyFindsNoPatternInNoiseOverManySeeds(t *testing.T) {
	start := lookbackEnd.Add(-12 * time.Hour)
	tests := []struct {
		name   string
		hosts  int
		spikes func(int, string, *rand.Rand) []time.Time
	}{
		{"300 hosts, one spike per 4 h each", 300, poisson(start, 4*time.Hour)},
		{"300 hosts, one spike per 6 h each", 300, poisson(start, 6*time.Hour)},
		{"1000 hosts, one spike per 5 h each", 1000, poisson(start, 5*time.Hour)},
		{"30 hosts, one spike per 2 h each", 30, poisson(start, 2*time.Hour)},
		{"300 hosts, one spike per hour each", 300, poisson(start, time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			found := map[string]int{}
			for seed := uint64(1); seed <= 100; seed++ {
				for _, c := range classes(Classify(syntheticFleet(tt.hosts, tt.spikes, seed), PatternConfig{})) {
					found[c]++
				}
			}
			if len(found) > 0 {
				t.Errorf("patterns found in 100 noisy fleets: %v", found)
			}
		})
	}
}

// The recurrent pattern must be found early: by the time most hosts had
// their second spike, i.e. one interval each.
func TestDetectClassifyFindsARecurrentStallByTheSecondSpike(t *testing.T) {
	onset := lookbackEnd.Add(-3 * time.Hour)
	for seed := uint64(1); seed <= 5; seed++ {
		full := syntheticFleet(300, periodic(onset, 15*time.Minute, 20*time.Minute, 5*time.Second, 0), seed)
		// When had half the hosts their second spike?
		var second []time.Time
		for _, h := range full.Hosts {
			occ := occurrences(h.Starts, time.Minute)
			if len(occ) >= 2 {
				second = append(second, occ[1])
			}
		}
		slices.SortFunc(second, func(a, b time.Time) int { return a.Compare(b) })
		half := second[len(second)/2]

		var found time.Time
		for end := onset.Add(time.Minute); end.Before(lookbackEnd); end = end.Add(time.Minute) {
			f := full
			f.LookbackEnd, f.LookbackStart = end, end.Add(-6*time.Hour)
			f.Hosts = nil
			for _, h := range full.Hosts {
				var in []time.Time
				for _, s := range h.Starts {
					if s.Before(end) {
						in = append(in, s)
					}
				}
				if len(in) > 0 {
					f.Hosts = append(f.Hosts, HostSpikes{h.Host, h.HWClass, in})
				}
			}
			if slices.Contains(classes(Classify(f, PatternConfig{})), vocab.ClassFleetRecurrent) {
				found = end
				break
			}
		}
		if found.IsZero() || found.After(half) {
			t.Errorf("seed %d: fleet-recurrent found %v after onset; half the hosts had their second spike %v after onset",
				seed, found.Sub(onset), half.Sub(onset))
		}
	}
}

func TestDetectClassifyHWClassSkew(t *testing.T) {
	start := lookbackEnd.Add(-6 * time.Hour)
	tests := []struct {
		name       string
		gen5Period time.Duration
		// affected is the share of hosts (drawn at random, whatever their
		// class) that carry the pattern; 0 is all.
		affected float64
		// noise, if not zero, adds independent spikes to every host at one
		// per noise on average.
		noise time.Duration
		want  bool
	}{
		{"equal rates on both classes are not skewed", 0, 0, 0, false},
		{"a 2× rate on gen5 is skewed", 2, 0, 0, true},
		{"a 1.2× rate on gen5 is not skewed", 1, 0, 0, false},
		// Which hosts carry it splits their spikes unevenly between the
		// classes (16 against 9 of 50 is common): no skew.
		{"a random quarter of the hosts at equal rates is not skewed", 0, 0.25, 0, false},
		{"a random fifth of the hosts with a 3× rate on gen5 is skewed", 3, 0.2, 0, true},
		{"… also under an hourly noise spike on every host", 3, 0.2, time.Hour, true},
		{"a random quarter at equal rates under hourly noise is not skewed", 0, 0.25, time.Hour, false},
		{"a random half of the hosts with a 2× rate on gen5 is skewed", 2, 0.5, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var skewed []bool
			for seed := uint64(1); seed <= 20; seed++ {
				f := syntheticFleet(100, func(i int, class string, rng *rand.Rand) []time.Time {
					var noise []time.Time
					if tt.noise > 0 {
						noise = poisson(start, tt.noise)(i, class, rng)
					}
					if tt.affected > 0 && rng.Float64() >= tt.affected {
						return noise
					}
					lo, hi := 15*time.Minute, 20*time.Minute
					if class == "gen5" {
						switch tt.gen5Period {
						case 2:
							lo, hi = lo/2, hi/2
						case 3:
							lo, hi = lo/3, hi/3
						case 1:
							lo, hi = lo*10/12, hi*10/12
						}
					}
					return append(periodic(start, lo, hi, 5*time.Second, 0)(i, class, rng), noise...)
				}, seed)
				skewed = append(skewed, Assess(f, PatternConfig{}).Skewed)
			}
			for seed, got := range skewed {
				if got != tt.want {
					t.Errorf("seed %d: skewed = %v, want %v", seed+1, got, tt.want)
				}
			}
		})
	}
}

func TestDetectPoissonTail(t *testing.T) {
	tests := []struct {
		c      int
		lambda float64
		want   float64
	}{
		{0, 3, 1},
		{1, 3, 1 - math.Exp(-3)},
		{3, 3, 1 - math.Exp(-3)*(1+3+4.5)},
		{10, 1, 1.1142547e-07},
		{4, 0.1, 3.8468e-06},
		{5, 0, 0},
	}
	for _, tt := range tests {
		if got := poissonTail(tt.c, tt.lambda); math.Abs(got-tt.want) > 1e-3*tt.want+1e-12 {
			t.Errorf("poissonTail(%d, %g) = %g, want %g", tt.c, tt.lambda, got, tt.want)
		}
	}
	if got := poissonQuantile(40, 1e-8); got < 70 || got > 90 {
		t.Errorf("poissonQuantile(40, 1e-8) = %d, want about 80", got)
	}
}
