package query

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// causeFleet is one everyday cause as the store holds it after a
// detection pass: two hosts that stall for 1 s every 10 min over 2 h, the
// counters of the cause's cgroup or host read every step, the suspects
// the detector ranked and the pattern it found.
type causeFleet struct {
	service string
	step    time.Duration
	// The pattern's suspect family, and each host's device for it.
	metric, mode, family string
	devices              []string
	// counters are a host's rows for one step: stall says whether the
	// step holds one of its stalls.
	counters func(device string, stall bool) []causeCounter
}

type causeCounter struct {
	metric, mode string
	value        float64
	gauge        bool // interval_ms = 0
}

// seedCause stores f and returns the patterns command's arguments. The
// suspects' rates are the counters' over the step holding each stall, and
// their baseline 0 or the family's steady rate, as the detector reads them.
func seedCause(t *testing.T, f causeFleet) []string {
	t.Helper()
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	const tenYears = 3650
	if _, err := schema.Apply(ctx, st, schema.Options{RequestsTTLDays: tenYears, LatencyTTLDays: tenYears,
		CountersTTLDays: tenYears, DetectionsTTLDays: tenYears, CapturesTTLDays: tenYears}); err != nil {
		t.Fatal(err)
	}
	t0 := testenv.RecentDay().Add(6 * time.Hour)
	at := func(d time.Duration) string { return t0.Add(d).Format("2006-01-02 15:04:05.000") }
	exec := func(q string) {
		t.Helper()
		if err := st.Exec(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	// Stalls at 40 min, 50 min, …: each window has a full baseline.
	const every, first = 10 * time.Minute, 40 * time.Minute
	stallIn := func(s time.Duration) (time.Duration, bool) {
		if s < first {
			return 0, false
		}
		off := (s - first) % every
		start := s - off + every/2 // the stall lies 5 min into its period
		if start >= s && start < s+f.step {
			return start, true
		}
		return 0, false
	}
	var sp, sus, ctr []string
	for hi, device := range f.devices {
		host := fmt.Sprintf("h%d", hi+1)
		var during, base []float64
		for s := time.Duration(0); s < 2*time.Hour; s += f.step {
			start, stall := stallIn(s)
			for _, c := range f.counters(device, stall) {
				iv := f.step.Milliseconds()
				if c.gauge {
					iv = 0
				}
				ctr = append(ctr, fmt.Sprintf("('%s', %d, '%s', '%s', -1, '%s', '%s', %g)", at(s), iv, host, c.metric, device, c.mode, c.value))
				if c.metric == f.metric && c.mode == f.mode {
					if stall {
						during = append(during, c.value/f.step.Seconds())
					} else {
						base = append(base, c.value/f.step.Seconds())
					}
				}
			}
			if !stall {
				continue
			}
			id := fmt.Sprintf("%s-%s-%d", f.service, host, s/time.Second)
			sp = append(sp, fmt.Sprintf("('%s', '%s', '%s', 'gen5', '%s', '%s', 1000000, 5000, 200, 'v1', now64(3), 0)",
				id, f.service, host, at(start), at(start+time.Second)))
			sus = append(sus, fmt.Sprintf("('%s', '%s', '%s', '%s', 1, '%s', -1, '%s', '%s', %g, %g, 50, 'v1', now64(3))",
				id, f.service, host, at(start), f.metric, device, f.mode, base[len(base)/2], during[len(during)-1]))
		}
	}
	exec("INSERT INTO counters (ts_start, interval_ms, host, metric, cpu, device, mode, value) VALUES " + strings.Join(ctr, ", "))
	exec(`INSERT INTO spikes (spike_id, service, host, hw_class, window_start, window_end, peak_us, baseline_us, score,
		detector_version, detected_at, is_deleted) VALUES ` + strings.Join(sp, ", "))
	exec(`INSERT INTO spike_suspects (spike_id, service, host, window_start, rank, metric, cpu, device, mode, baseline,
		during, deviation, detector_version, detected_at) VALUES ` + strings.Join(sus, ", "))
	exec(fmt.Sprintf(`INSERT INTO patterns (pattern_id, service, class, modifiers, lookback_start, lookback_end, hosts_affected,
		hosts_total, recurrence_interval_s, regularity, synchronicity, hw_class_skew, illusion_share, suspects,
		detector_version, detected_at) VALUES ('p', '%s', 'fleet-recurrent', [], '%s', '%s', 2, 2, 600, 0.9, 0,
		{'gen5': 1}, 0.45, [('%s', '%s', '%s', 2, 600)], 'v1', now64(3))`, f.service, at(0), at(2*time.Hour), f.metric, f.mode, f.family))
	return []string{"patterns", "--dsn", "chdb://" + st.Dir() + "?database=" + st.Database(), "--service", f.service,
		"--from", t0.Format(time.RFC3339), "--to", t0.Add(2 * time.Hour).Format(time.RFC3339)}
}

// throttledPod is a pod with a 0.5-CPU limit, which runs in every 100 ms
// period and is throttled in 9 of the 10 periods of each stalled second.
func throttledPod(step time.Duration) func(string, bool) []causeCounter {
	return func(_ string, stall bool) []causeCounter {
		throttled := 0.0
		if stall {
			throttled = 9
		}
		return []causeCounter{
			{metric: "spikehunt.cgroup.cpu.periods", value: 10 * step.Seconds()},
			{metric: "spikehunt.cgroup.cpu.throttled_periods", value: throttled},
			{metric: "spikehunt.cgroup.cpu.throttled_time", value: throttled * 0.27},
			{metric: "spikehunt.cgroup.cpu.limit", value: 0.5, gauge: true},
		}
	}
}

// The everyday causes' sentences, from rows in the real engine: the
// throttled pod's periods and limit come from its counters over the
// stalls' windows and their baselines; the others' figures are the
// suspects' rates, put back into the stall when the step is coarser.
func TestTheEverydayCausesSentencesReadTheirFiguresFromTheStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    causeFleet
		want string
	}{{
		name: "a pod throttled in 9 of its 10 periods, counters every second",
		f: causeFleet{service: "checkout", step: time.Second, metric: "spikehunt.cgroup.cpu.throttled_time",
			family: "shop/checkout-7d9c8b6f5", devices: []string{"shop/checkout-7d9c8b6f5-x2k4q", "shop/checkout-7d9c8b6f5-b7m9z"},
			counters: throttledPod(time.Second)},
		want: "; pod shop/checkout-7d9c8b6f5 was CPU-throttled in 9 of 10 periods during the stalls (limit 0.5 CPU; baseline 0).",
	}, {
		name: "the same pod, counters every 30 s",
		f: causeFleet{service: "cart", step: 30 * time.Second, metric: "spikehunt.cgroup.cpu.throttled_time",
			family: "shop/checkout-7d9c8b6f5", devices: []string{"shop/checkout-7d9c8b6f5-x2k4q", "shop/checkout-7d9c8b6f5-b7m9z"},
			counters: throttledPod(30 * time.Second)},
		want: "; pod shop/checkout-7d9c8b6f5 was CPU-throttled in 9 of 10 periods during the stalls (limit 0.5 CPU; baseline 0; " +
			"counters every 30 s, coarser than the ~1.0 s stall: over a step it reads 0.3 of 10 periods, diluted).",
	}, {
		name: "a backup job next to the service",
		f: causeFleet{service: "search", step: time.Second, metric: "spikehunt.cgroup.cpu.usage",
			family: "system.slice/backup.service", devices: []string{"system.slice/backup.service", "system.slice/backup.service"},
			counters: func(_ string, stall bool) []causeCounter {
				v := 0.02
				if stall {
					v = 1.9
				}
				return []causeCounter{{metric: "spikehunt.cgroup.cpu.usage", value: v}}
			}},
		want: "; system.slice/backup.service used 1.9 CPUs during the stalls (baseline 0.02).",
	}, {
		name: "direct reclaim",
		f: causeFleet{service: "feed", step: time.Second, metric: "spikehunt.memory.reclaim.scanned", devices: []string{"", ""},
			counters: func(_ string, stall bool) []causeCounter {
				v := 0.0
				if stall {
					v = 3100
				}
				return []causeCounter{{metric: "spikehunt.memory.reclaim.scanned", value: v}}
			}},
		want: "; direct reclaim: 3,100 pages/s scanned by allocating tasks (baseline 0).",
	}, {
		name: "a listen queue overflowing, counters every 30 s",
		f: causeFleet{service: "login", step: 30 * time.Second, metric: "spikehunt.tcp.listen_overflows", devices: []string{"", ""},
			counters: func(_ string, stall bool) []causeCounter {
				v := 0.0
				if stall {
					v = 40
				}
				return []causeCounter{{metric: "spikehunt.tcp.listen_overflows", value: v}}
			}},
		want: "; the TCP listen queue overflowed 1.33×/s (baseline 0; counters every 30 s, coarser than the ~1.0 s stall: " +
			"read over a step, diluted; up to 40/s within the stall, if all of the step's excess fell in it): clients retry their SYN after 1 s.",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := patternSentence(t, seedCause(t, tc.f)); !strings.HasSuffix(got, tc.want) {
				t.Errorf("sentence:\n got %q\nwant it to end %q", got, tc.want)
			}
		})
	}
}

// A NIC's packets read by counters every 30 s around ~1 s stalls: the
// pattern's sentence (which the demo's report prints) gives the rate
// during the stalls that spikehunt suspects shows for the same store, the
// figure read, not that figure put back into the stall as if measured.
func TestThePatternSentenceGivesTheRateSpikehuntSuspectsShows(t *testing.T) {
	args := seedCause(t, causeFleet{service: "edge", step: 30 * time.Second, metric: "system.network.packets", mode: "receive",
		family: "eth0", devices: []string{"eth0", "eth0"},
		counters: func(_ string, stall bool) []causeCounter {
			v := 1800.0 // 60/s
			if stall {
				v = 424200 // 14140/s
			}
			return []causeCounter{{metric: "system.network.packets", mode: "receive", value: v}}
		}})
	sentence := patternSentence(t, args)
	out, _ := cli(t, 0, append([]string{"suspects"}, args[1:]...)...)
	lines := strings.Split(out, "\n")
	header := strings.Fields(lines[0])
	col := slices.Index(header, "DURING")
	if col < 0 || len(lines) < 2 {
		t.Fatalf("no DURING column in spikehunt suspects:\n%s", out)
	}
	during := strings.Fields(lines[1])[col]
	if want := "~" + during + " during the stalls"; !strings.Contains(sentence, want) {
		t.Errorf("spikehunt suspects says DURING %s; the sentence:\n got %q\nwant it to contain %q", during, sentence, want)
	}
}
