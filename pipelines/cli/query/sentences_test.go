package query

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// seedSkewedFleet stores the demo's shape on four hosts: gen4 hosts stall
// every 18 min, gen5 hosts every 9 min; each stall holds one request for
// 996 ms, which arrived in the second before the window's first slow
// second, while the window's own peak is 637 ms; softirq CPU time moves on
// CPUs 0, 2, 4 and 6 of 8, read by 30 s counters. It returns the patterns
// command's arguments.
func seedSkewedFleet(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	const tenYears = 3650
	if _, err := schema.Apply(ctx, st, schema.Options{RequestsTTLDays: tenYears, LatencyTTLDays: tenYears,
		CountersTTLDays: tenYears, DetectionsTTLDays: tenYears, CapturesTTLDays: tenYears}); err != nil {
		t.Fatal(err)
	}
	t0 := testenv.RecentDay().Add(18 * time.Hour)
	at := func(d time.Duration) string { return t0.Add(d).Format("2006-01-02 15:04:05.000") }
	exec := func(q string) {
		t.Helper()
		if err := st.Exec(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	var req, sp, sus, ctr []string
	hosts := []struct {
		host, class string
		every       time.Duration
	}{{"g4a", "gen4", 18 * time.Minute}, {"g4b", "gen4", 18 * time.Minute}, {"g5a", "gen5", 9 * time.Minute}, {"g5b", "gen5", 9 * time.Minute}}
	for hi, h := range hosts {
		for k := 1; time.Duration(k)*h.every < 2*time.Hour; k++ {
			start := time.Duration(k)*h.every + time.Duration(hi)*time.Minute
			id := fmt.Sprintf("%s-%d", h.host, k)
			req = append(req,
				fmt.Sprintf("('%s', 'svc', '%s', '%s', '/get', 996000, 'OK', 1, 1)", at(start-500*time.Millisecond), h.host, h.class),
				fmt.Sprintf("('%s', 'svc', '%s', '%s', '/get', 637000, 'OK', 1, 1)", at(start+100*time.Millisecond), h.host, h.class))
			sp = append(sp, fmt.Sprintf("('%s', 'svc', '%s', '%s', '%s', '%s', 637000, 5000, 127, 'v1', now64(3), 0)",
				id, h.host, h.class, at(start), at(start+time.Second)))
			for r, cpu := range []int{0, 2, 4, 6} {
				sus = append(sus, fmt.Sprintf("('%s', 'svc', '%s', '%s', %d, 'system.cpu.time', %d, '', 'softirq', 0.0087, 0.0405, 4, 'v1', now64(3))",
					id, h.host, at(start), r+1, cpu))
			}
		}
		for s := time.Duration(0); s < 2*time.Hour; s += 30 * time.Second {
			for cpu := 0; cpu < 8; cpu++ {
				ctr = append(ctr, fmt.Sprintf("('%s', 30000, '%s', 'system.cpu.time', %d, '', 'softirq', 0.26)", at(s), h.host, cpu))
			}
		}
	}
	exec("INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, thread_id, weight) VALUES " + strings.Join(req, ", "))
	exec(`INSERT INTO spikes (spike_id, service, host, hw_class, window_start, window_end, peak_us, baseline_us, score,
		detector_version, detected_at, is_deleted) VALUES ` + strings.Join(sp, ", "))
	exec(`INSERT INTO spike_suspects (spike_id, service, host, window_start, rank, metric, cpu, device, mode, baseline,
		during, deviation, detector_version, detected_at) VALUES ` + strings.Join(sus, ", "))
	exec("INSERT INTO counters (ts_start, interval_ms, host, metric, cpu, device, mode, value) VALUES " + strings.Join(ctr, ", "))
	exec(fmt.Sprintf(`INSERT INTO patterns (pattern_id, service, class, modifiers, lookback_start, lookback_end, hosts_affected,
		hosts_total, recurrence_interval_s, regularity, synchronicity, hw_class_skew, illusion_share, suspects,
		detector_version, detected_at) VALUES ('p', 'svc', 'fleet-recurrent', ['hw-class-skewed'], '%s', '%s', 4, 4, 720, 0.9, 0,
		{'gen4': 0.67, 'gen5': 1.33}, 0.45, [('system.cpu.time', 'softirq', '', 4, 600)], 'v1', now64(3))`, at(0), at(2*time.Hour)))
	return []string{"patterns", "--dsn", "chdb://" + st.Dir() + "?database=" + st.Database(), "--service", "svc",
		"--from", t0.Format(time.RFC3339), "--to", t0.Add(2 * time.Hour).Format(time.RFC3339)}
}

func patternSentence(t *testing.T, args []string) string {
	t.Helper()
	out, _ := cli(t, 0, args...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

func TestThePatternSentenceGivesEachHardwareClassItsOwnInterval(t *testing.T) {
	got := patternSentence(t, seedSkewedFleet(t))
	if want := "Every host stalls at its own phase, gen4 hosts every ~18 min, gen5 every ~9 min;"; !strings.HasPrefix(got, want) {
		t.Errorf("sentence:\n got %q\nwant it to begin %q", got, want)
	}
}

func TestThePatternSentenceGivesTheSlowestRequestOfAStallAndSaysWhatItIs(t *testing.T) {
	got := patternSentence(t, seedSkewedFleet(t))
	if want := "; the slowest request of a stall takes ~996 ms (median over the pattern's stalls);"; !strings.Contains(got, want) {
		t.Errorf("sentence:\n got %q\nwant it to contain %q", got, want)
	}
}

func TestThePatternSentenceGivesSuspectsAsSharesOfCPUsAndSaysTheCounterStepDilutesThem(t *testing.T) {
	got := patternSentence(t, seedSkewedFleet(t))
	want := "; softirq: 4 of 8 CPUs (0, 2, 4 and 6) at ~97% during the stalls (baseline 0.9%; counters every 30 s, coarser than the ~996 ms stall: over a step it reads 4.0%, diluted)."
	if !strings.HasSuffix(got, want) {
		t.Errorf("sentence:\n got %q\nwant it to end %q", got, want)
	}
}

func TestSuspectsShowCPUTimeAsAShareOfACPUAndSayWhenTheCounterStepIsCoarserThanTheWindow(t *testing.T) {
	args := seedSkewedFleet(t)
	out, _ := cli(t, 0, "suspects", args[1], args[2], "--spike", "g5a-1")
	rows := tableRows(out, "g5a")
	if len(rows) != 1 || len(rows[0]) < 9 || rows[0][7] != "0.9%" || rows[0][8] != "4.0%" {
		t.Errorf("want the softirq CPU time at 0.9%% baseline and 4.0%% during:\n%s", out)
	}
	if want := "Counters every 30 s, coarser than the 1 s spike windows: DURING is diluted"; !strings.Contains(out, want) {
		t.Errorf("want %q under the table:\n%s", want, out)
	}
}
