package eval

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/vocab"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// handFleet writes a five-host fleet's requests into st under service:
// each host serves 100 requests a minute for five minutes, weight 1,
// latencies 1,000 + 10k + 5 × host µs for k = 0…99, so every host-minute
// has a p99 near 2 ms, a little apart from host to host (the MAD is not
// zero). stall makes the last five requests of node-2's third minute
// take 800 ms (5% of its minute: its p99 is 800 ms; 1% of the fleet's:
// the fleet p99 stays near 2 ms). regress makes every request of the
// fifth minute three times slower on every host.
func handFleet(t *testing.T, st store.Store, service string, start time.Time, stall, regress bool) {
	t.Helper()
	q := fmt.Sprintf(`INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, weight)
SELECT
    fromUnixTimestamp64Milli(toInt64(%d + m * 60000 + k * 500), 'UTC'),
    %s, concat('node-', toString(h)), if(h %% 2 = 0, 'gen4', 'gen5'), '/v1/cart',
    toUInt32(multiIf(%d AND h = 2 AND m = 2 AND k >= 95, 800000, %d AND m = 4, 3 * (1000 + 10 * k + 5 * h), 1000 + 10 * k + 5 * h)),
    '200', 1
FROM (SELECT number %% 5 AS h, intDiv(number, 5) %% 5 AS m, intDiv(number, 25) AS k FROM numbers(2500))`,
		start.UnixMilli(), store.QuoteString(service), b2i(stall), b2i(regress))
	if err := st.Exec(context.Background(), q); err != nil {
		t.Fatal(err)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestBaselinesAlertAsTheirRulesSay runs the three rules in the real
// engine on a fleet small enough to check by hand: calibrated on a
// healthy copy, the fleet p99 rule misses one host stalling (1% of the
// fleet's requests) while the per-host rule and the MAD outlier rule
// flag exactly that host and minute; on a regression of the whole fleet
// the fleet and per-host rules alert and the outlier rule, which compares
// hosts with one another, does not.
func TestBaselinesAlertAsTheirRulesSay(t *testing.T) {
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	end := start.Add(5 * time.Minute)
	handFleet(t, st, "healthy", start, false, false)
	handFleet(t, st, "stall", start, true, false)
	handFleet(t, st, "regress", start, false, true)

	rules, err := Calibrate(ctx, st, "healthy", start, end)
	if err != nil {
		t.Fatal(err)
	}
	// Every healthy p99 is 1,985–2,010 µs (the 99th of 100 requests,
	// 1,980 + 5 × host, or the 100th), the fleet's the same: × 1.5.
	for name, got := range map[string]time.Duration{"fleet": rules.FleetP99, "host": rules.HostP99} {
		if got < 2970*time.Microsecond || got > 3020*time.Microsecond {
			t.Errorf("%s p99 threshold %v, want 1.5 × ~2 ms", name, got)
		}
	}
	if rules.MADTolerance != 3 {
		t.Errorf("MAD tolerance %g, want Datadog's 3", rules.MADTolerance)
	}

	minute := func(m int) time.Time { return start.Add(time.Duration(m) * time.Minute) }
	for _, tc := range []struct {
		service string
		want    map[string][]Flag
	}{
		{"healthy", map[string][]Flag{MethodFleetP99: {}, MethodHostP99: {}, MethodMAD: {}}},
		{"stall", map[string][]Flag{
			MethodFleetP99: {},
			MethodHostP99:  {{Host: "node-2", Minute: minute(2)}},
			MethodMAD:      {{Host: "node-2", Minute: minute(2)}},
		}},
		{"regress", map[string][]Flag{
			MethodFleetP99: {{Minute: minute(4)}},
			MethodHostP99: {{Host: "node-0", Minute: minute(4)}, {Host: "node-1", Minute: minute(4)}, {Host: "node-2", Minute: minute(4)},
				{Host: "node-3", Minute: minute(4)}, {Host: "node-4", Minute: minute(4)}},
			MethodMAD: {},
		}},
	} {
		t.Run(tc.service, func(t *testing.T) {
			run, err := RunBaselines(ctx, st, tc.service, start, end, rules)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []string{MethodFleetP99, MethodHostP99, MethodMAD} {
				// A one-minute breach never outlasts a pending period.
				if got := run.Flags[m+PendingSuffix]; len(got) != 0 {
					t.Errorf("%s%s = %v, want none", m, PendingSuffix, got)
				}
				delete(run.Flags, m+PendingSuffix)
			}
			if diff := cmp.Diff(tc.want, run.Flags); diff != "" {
				t.Errorf("flags (-want +got):\n%s", diff)
			}
			if len(run.Fleet) != 5 || run.Fleet["node-3"] != "gen5" {
				t.Errorf("fleet %v, want node-0…4 with their classes", run.Fleet)
			}
		})
	}
}

func TestCalibrateSaysHowToFixAnEmptyService(t *testing.T) {
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Minute)
	if _, err := Calibrate(ctx, st, "nobody", now.Add(-time.Hour), now); err == nil {
		t.Fatal("calibrated on no data")
	}
}

func TestScoreFlags(t *testing.T) {
	fleet := map[string]string{"a": "gen4", "b": "gen5", "c": "gen4", "d": "gen5"}
	truth := sim.Truth{Class: vocab.ClassFleetRecurrent, Windows: []sim.Window{
		{Host: "a", Start: at(90), End: at(91)},
		{Host: "b", Start: at(200), End: at(201)},
	}}
	minute := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	for _, tc := range []struct {
		name  string
		flags []Flag
		want  WindowScore
	}{
		{"a host's minute finds the stall in it; the wrong minute is wrong",
			[]Flag{{Host: "a", Minute: minute(1)}, {Host: "b", Minute: minute(1)}},
			WindowScore{Truth: 2, Detected: 2, Found: 1, Right: 1, HostsTruth: 2, HostsFound: 1}},
		{"a fleet minute is a window on every host and names none",
			[]Flag{{Minute: minute(1)}, {Minute: minute(3)}},
			WindowScore{Truth: 2, Detected: 8, Found: 2, Right: 2, HostsTruth: 2, HostsFound: 0}},
		{"nothing flagged", nil, WindowScore{Truth: 2, HostsTruth: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ScoreFlags(truth, MethodHostP99, tc.flags, fleet, t0, t0.Add(time.Hour))
			if diff := cmp.Diff(tc.want, s.Windows); diff != "" {
				t.Errorf("score (-want +got):\n%s", diff)
			}
			if s.Alerts != len(tc.flags) {
				t.Errorf("alerts %d, want %d", s.Alerts, len(tc.flags))
			}
			if s.Pattern != PatternMissed {
				t.Errorf("pattern %q from two flags, want %q", s.Pattern, PatternMissed)
			}
		})
	}
}

// TestScoreFlagsSeesARecurrenceInFlaggedMinutes: six hosts flagged every
// 17 minutes for three hours, at their own phases, are a fleet-recurrent
// pattern to the detector's classifier, and the same minutes flagged for
// the whole fleet are bursts (a synchronized pattern), not the truth's.
func TestScoreFlagsSeesARecurrenceInFlaggedMinutes(t *testing.T) {
	fleet := map[string]string{}
	var perHost []Flag
	for i := 0; i < 30; i++ {
		h := fmt.Sprintf("h%02d", i)
		fleet[h] = []string{"gen4", "gen5"}[i%2]
		for m := i % 17; m < 180; m += 17 {
			perHost = append(perHost, Flag{Host: h, Minute: t0.Add(time.Duration(m) * time.Minute)})
		}
	}
	truth := sim.Truth{Class: vocab.ClassFleetRecurrent}
	if s := ScoreFlags(truth, MethodHostP99, perHost, fleet, t0, t0.Add(3*time.Hour)); s.Pattern != PatternSeen {
		t.Errorf("per-host flags: pattern %q %v, want seen", s.Pattern, s.Classes)
	}
	var fleetFlags []Flag
	for m := 0; m < 180; m += 17 {
		fleetFlags = append(fleetFlags, Flag{Minute: t0.Add(time.Duration(m) * time.Minute)})
	}
	if s := ScoreFlags(truth, MethodFleetP99, fleetFlags, fleet, t0, t0.Add(3*time.Hour)); s.Pattern == PatternSeen {
		t.Errorf("fleet flags: pattern %q %v, want not the per-host recurrence", s.Pattern, s.Classes)
	}
}

func TestPatternVerdict(t *testing.T) {
	rec := []detect.Pattern{{Class: vocab.ClassFleetRecurrent}}
	for _, tc := range []struct {
		truth string
		got   []detect.Pattern
		want  string
	}{
		{vocab.ClassFleetRecurrent, rec, PatternSeen},
		{vocab.ClassFleetRecurrent, nil, PatternMissed},
		{vocab.ClassFleetSynchronized, rec, PatternWrong},
		{"", rec, PatternWrong},
		{"", nil, PatternNone},
	} {
		if got := PatternVerdict(sim.Truth{Class: tc.truth}, tc.got); got != tc.want {
			t.Errorf("truth %q, patterns %v: %q, want %q", tc.truth, tc.got, got, tc.want)
		}
	}
}

func TestPendingKeepsOnlyRunsOfTwoMinutesOrMore(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC) // fixed date: scored in memory, never stored
	minute := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	flags := []Flag{
		{Host: "a", Minute: minute(1)}, // alone: never fires
		{Host: "a", Minute: minute(3)}, {Host: "a", Minute: minute(4)}, {Host: "a", Minute: minute(5)},
		{Host: "b", Minute: minute(6)}, // a's run does not continue into b's minute
		{Host: "c", Minute: minute(8)}, {Host: "c", Minute: minute(9)},
	}
	want := []Flag{flags[1], flags[2], flags[3], flags[5], flags[6]}
	if got := Pending(flags); !slices.Equal(got, want) {
		t.Errorf("Pending = %v, want %v", got, want)
	}
	if got := Pending(nil); got == nil || len(got) != 0 {
		t.Errorf("Pending(nil) = %#v, want an empty list", got)
	}
}
