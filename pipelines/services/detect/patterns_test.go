package detect

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spikehunt/spikehunt/internal/vocab"
)

// periodicStall is a SQL condition for a 1 s stall every `period` seconds
// (a SQL expression of h, fixed per host) at a random phase per host.
func periodicStall(period string) string {
	phase := fmt.Sprintf("(cityHash64(h, 12) %% %s)", period)
	return fmt.Sprintf("(s + %[1]s - %[2]s) %% %[1]s = 0", period, phase)
}

// Patterns end to end: synthetic fleets through requests, latency_1s, the
// spike windows and the classifier, into the patterns table.
func TestDetectPatternsEndToEnd(t *testing.T) {
	fifteenToTwenty := "(900 + cityHash64(h, 11) % 301)"
	tests := []struct {
		name  string
		load  fleetLoad
		want  []string // classes with modifiers, sorted
		check func(t *testing.T, ps []Pattern)
	}{
		{
			name: "a 1 s stall every 15–20 min on 300 hosts at random phases is fleet-recurrent, found by the second spike",
			// 50 min: every host had its second spike by minute 40.
			load: fleetLoad{hosts: 300, seconds: 3000, stall: periodicStall(fifteenToTwenty)},
			want: []string{vocab.ClassFleetRecurrent},
			check: func(t *testing.T, ps []Pattern) {
				p := ps[0]
				if p.RecurrenceInterval < 16*time.Minute || p.RecurrenceInterval > 19*time.Minute {
					t.Errorf("interval %v, want about 17.5 min", p.RecurrenceInterval)
				}
				if p.HostsAffected != 300 || p.HostsTotal != 300 || p.Regularity < 0.7 || p.Synchronicity > 0.1 {
					t.Errorf("hosts %d/%d, regularity %.2f, synchronicity %.2f; want 300/300, regular, unsynchronized",
						p.HostsAffected, p.HostsTotal, p.Regularity, p.Synchronicity)
				}
				// Per host-minute p99 averaged over the fleet is mostly the stalls.
				if p.IllusionShare < 0.5 {
					t.Errorf("illusion share %.2f, want most of the averaged p99", p.IllusionShare)
				}
			},
		},
		{
			name: "twice the stall rate on gen5 is fleet-recurrent, hw-class-skewed",
			load: fleetLoad{hosts: 300, seconds: 3000, stall: periodicStall("if(h % 2 = 1, 450 + cityHash64(h, 11) % 151, 900 + cityHash64(h, 11) % 301)")},
			want: []string{vocab.ClassFleetRecurrent + "+" + vocab.ModifierHWClassSkewed},
			check: func(t *testing.T, ps []Pattern) {
				if s := ps[0].HWClassSkew; s["gen5"] < 1.2 || s["gen4"] > 0.8 {
					t.Errorf("hw_class_skew %v, want gen5 ≈ 1.33, gen4 ≈ 0.67", s)
				}
			},
		},
		{
			name: "the same 30 s stall on every host hourly is fleet-synchronized",
			load: fleetLoad{hosts: 100, seconds: 7200, stall: "(s >= 1805 AND s < 1835) OR (s >= 5405 AND s < 5435)"},
			want: []string{vocab.ClassFleetSynchronized},
			check: func(t *testing.T, ps []Pattern) {
				if p := ps[0]; p.Synchronicity != 1 || p.HostsAffected != 100 || p.RecurrenceInterval != time.Hour {
					t.Errorf("synchronicity %.2f, hosts %d, interval %v; want 1, 100, 1h", p.Synchronicity, p.HostsAffected, p.RecurrenceInterval)
				}
			},
		},
		{
			name: "one host spiking every 3 min is isolated-host",
			load: fleetLoad{hosts: 100, seconds: 3600, stall: "h = 7 AND s % 180 = 5"},
			want: []string{vocab.ClassIsolatedHost},
			check: func(t *testing.T, ps []Pattern) {
				p := ps[0]
				if diff := cmp.Diff([]string{host(7)}, p.AffectedHostsSample); diff != "" || p.HostsAffected != 1 || p.RecurrenceInterval != 3*time.Minute {
					t.Errorf("affected %d, interval %v; hosts (-want +got):\n%s", p.HostsAffected, p.RecurrenceInterval, diff)
				}
				// The NET_RX storms on CPUs 0 and 2 that came with each stall.
				if len(p.Suspects) == 0 {
					t.Fatalf("no pattern suspects")
				}
				s := p.Suspects[0]
				if !slices.Contains([]string{"spikehunt.softirqs/NET_RX", "system.cpu.time/softirq"}, s.Metric+"/"+s.Mode) ||
					s.Hosts != 1 || !cmp.Equal([]int{0, 2}, sortedInts(s.CPUs)) {
					t.Errorf("pattern suspects %+v: want the NET_RX storm on CPUs 0 and 2 first", p.Suspects)
				}
			},
		},
		{
			name: "rare independent spikes on 300 hosts are no pattern",
			load: fleetLoad{hosts: 300, seconds: 3600, stall: "cityHash64(h, s, 5) % 18000 = 0"},
			want: nil,
		},
		{
			name: "a healthy fleet is no pattern",
			load: fleetLoad{hosts: 50, seconds: 1800},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			st := migrated(t)
			tt.load.insert(t, st)
			if tt.want != nil && tt.want[0] == vocab.ClassIsolatedHost {
				insertCounters(t, st, host(7), tt.load.seconds, storms(quietHost(), 5, 180))
			}
			res, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(tt.load.seconds)})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d host-seconds: pass %v (spikes %v, suspects %v, patterns %v)", tt.load.hosts*tt.load.seconds,
				res.Timing.Total.Round(time.Millisecond), res.Timing.Spikes.Round(time.Millisecond),
				res.Timing.Suspects.Round(time.Millisecond), res.Timing.Patterns.Round(time.Millisecond))
			if diff := cmp.Diff(tt.want, classes(res.Patterns)); diff != "" {
				t.Fatalf("patterns (-want +got):\n%s\n%d windows on %d hosts", diff, len(res.Spikes), len(hostsOf(res.Spikes)))
			}
			// The table holds the patterns the pass returned.
			rows := queryRows(t, st, `SELECT class, arrayStringConcat(modifiers, ','), hosts_affected, hosts_total, lookback_end
FROM patterns FINAL WHERE is_deleted = 0 ORDER BY class`)
			var want [][]string
			for _, p := range res.Patterns {
				want = append(want, []string{p.Class, joinComma(p.Modifiers), fmt.Sprint(p.HostsAffected), fmt.Sprint(p.HostsTotal),
					sec(tt.load.seconds).Format(time.RFC3339Nano)})
			}
			if diff := cmp.Diff(want, rows); diff != "" {
				t.Errorf("patterns table (-want +got):\n%s", diff)
			}
			if tt.check != nil {
				tt.check(t, res.Patterns)
			}
		})
	}
}

// storms adds a 100% NET_RX softirq storm on CPUs 0 and 2 for 1 s every
// `every` seconds from `from`.
func storms(s []counterSeries, from, every int) []counterSeries {
	out := make([]counterSeries, len(s))
	for i, c := range s {
		if (c.metric == "spikehunt.softirqs" && c.mode == "NET_RX" || c.metric == "system.cpu.time" && c.mode == "softirq") && (c.cpu == 0 || c.cpu == 2) {
			c.extra = map[string]float64{"spikehunt.softirqs": 100_000, "system.cpu.time": 1}[c.metric]
			c.extraFrom, c.extraTo, c.extraEvery, c.extraLen = from, 1<<30, every, 1
		}
		out[i] = c
	}
	return out
}

func hostsOf(ws []SpikeWindow) map[string]bool {
	out := map[string]bool{}
	for _, w := range ws {
		out[w.Host] = true
	}
	return out
}

func joinComma(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}

func sortedInts(xs []int) []int {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s
}

func TestDetectIllusionShare(t *testing.T) {
	tests := []struct {
		name                  string
		sumAll, sumClean      float64
		minutes, cleanMinutes int64
		want                  float64
	}{
		{"no spikes: the clean average is the average", 600, 600, 100, 100, 0},
		{"spikes make nine tenths of the average", 1000, 90, 100, 90, 0.9},
		{"no data", 0, 0, 0, 0, 0},
		{"a clean average above the whole is clamped to 0", 100, 200, 100, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := illusionShare(tt.sumAll, tt.minutes, tt.sumClean, tt.cleanMinutes); fmt.Sprintf("%.6f", got) != fmt.Sprintf("%.6f", tt.want) {
				t.Errorf("illusionShare = %g, want %g", got, tt.want)
			}
		})
	}
}

func TestDetectPatternSuspectsAreTheFamiliesMostAffectedHostsShare(t *testing.T) {
	cfg := PatternConfig{}.withDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	softirq := func(host string, spikes int, cpus ...int16) suspectFamily {
		return suspectFamily{host: host, metric: "system.cpu.time", mode: "softirq", spikes: spikes, cpus: cpus, score: 2000}
	}
	disk := func(host string, spikes int) suspectFamily {
		return suspectFamily{host: host, metric: "system.disk.operation_time", mode: "write", device: "sda", spikes: spikes, score: 9000}
	}
	tests := []struct {
		name     string
		affected []string
		families []suspectFamily
		want     []PatternSuspect
	}{
		{
			name:     "softirq on CPUs 0, 2, 4, 6 of every host is the suspect, most frequent CPUs first",
			affected: []string{"a", "b", "c"},
			families: []suspectFamily{softirq("a", 10, 0, 2, 4, 6, 0), softirq("b", 10, 2, 0, 4, 6), softirq("c", 10, 6, 4, 0)},
			want:     []PatternSuspect{{Metric: "system.cpu.time", Mode: "softirq", CPUs: []int{0, 4, 6, 2}, Hosts: 3, Score: 2000}},
		},
		{
			name:     "a family on one host in ten is not the pattern's",
			affected: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"},
			families: []suspectFamily{disk("a", 10)},
			want:     nil,
		},
		{
			name:     "hosts outside the pattern do not count",
			affected: []string{"a"},
			families: []suspectFamily{disk("a", 10), softirq("z", 10, 1)},
			want:     []PatternSuspect{{Metric: "system.disk.operation_time", Mode: "write", Device: "sda", Hosts: 1, Score: 9000}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			affected, spikes := map[string]bool{}, map[string]int{}
			for _, h := range tt.affected {
				affected[h], spikes[h] = true, 10
			}
			if diff := cmp.Diff(tt.want, patternSuspects(affected, spikes, tt.families, cfg)); diff != "" {
				t.Errorf("pattern suspects (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDetectPatternIDIsStablePerServiceAndClass(t *testing.T) {
	a, b := PatternID("billy", vocab.ClassFleetRecurrent), PatternID("billy", vocab.ClassFleetRecurrent)
	if a != b || a == PatternID("billy", vocab.ClassIsolatedHost) || a == PatternID("cart", vocab.ClassFleetRecurrent) {
		t.Errorf("pattern ids: %s %s %s %s", a, b, PatternID("billy", vocab.ClassIsolatedHost), PatternID("cart", vocab.ClassFleetRecurrent))
	}
}
