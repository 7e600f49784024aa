package alerts

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/internal/vocab"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

// fleet makes detector output for the tests: spike windows of the thousand
// spikes (a second each, softirq on CPUs 0 and 2) and one recurrent pattern.
type fleet struct{ t0 time.Time }

func newFleet() fleet { return fleet{t0: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)} } // fixed date: decided in memory with a fake clock, never stored or sent

// windows is one spike window per host, starting at t0+at. Hosts whose name
// ends in an odd digit are gen5.
func (f fleet) windows(service string, at time.Duration, hosts ...string) []detect.SpikeWindow {
	var out []detect.SpikeWindow
	for i, h := range hosts {
		start := f.t0.Add(at + time.Duration(i)*time.Second)
		class := "gen4"
		if (h[len(h)-1]-'0')%2 == 1 {
			class = "gen5"
		}
		out = append(out, detect.SpikeWindow{
			ID: fmt.Sprintf("%s/%s/%d", service, h, start.Unix()), Service: service, Host: h, HWClass: class,
			Start: start, End: start.Add(time.Second), PeakUS: uint32(1_000_000 + 10_000*i), BaselineUS: 4000,
			Score: 20, DetectedAt: start.Add(30 * time.Second), DetectorVer: "v1",
			Suspects: []detect.Suspect{
				{Rank: 1, Metric: "system.cpu.time", Mode: "softirq", CPU: 0, Baseline: 0.02, During: 0.9, Deviation: 40},
				{Rank: 2, Metric: "system.cpu.time", Mode: "softirq", CPU: 2, Baseline: 0.02, During: 0.8, Deviation: 35},
				{Rank: 3, Metric: "spikehunt.interrupts", Device: "eth0", CPU: 0, Baseline: 1000, During: 9000, Deviation: 8},
			},
		})
	}
	return out
}

func (f fleet) pattern(service string, affected int) detect.Pattern {
	return detect.Pattern{
		ID: service + "/fleet-recurrent", Service: service, Class: vocab.ClassFleetRecurrent,
		Modifiers: []string{vocab.ModifierHWClassSkewed}, LookbackStart: f.t0.Add(-6 * time.Hour), LookbackEnd: f.t0,
		HostsAffected: affected, HostsTotal: 50, RecurrenceInterval: 17 * time.Minute, Regularity: 0.9, Synchronicity: 0.05,
		HWClassSkew: map[string]float64{"gen4": 0.5, "gen5": 2.1}, IllusionShare: 0.4,
		Suspects:            []detect.PatternSuspect{{Metric: "spikehunt.softirqs", Mode: "NET_RX", CPUs: []int{0, 2, 4, 6}, Hosts: affected, Score: 5}},
		AffectedHostsSample: []string{"h1", "h2"}, DetectedAt: f.t0, DetectorVer: "v1",
	}
}

func decide(t *testing.T, cfg Config, st State, pass Pass, now time.Time) Decision {
	t.Helper()
	d, err := Decide(cfg, st, pass, now)
	if err != nil {
		t.Fatal(err)
	}
	requireValid(t, d.Alerts...)
	return d
}

func TestAlertSpikeGroupSummarizesOnePassOfAService(t *testing.T) {
	f := newFleet()
	windows := append(f.windows("billy", 0, "h1", "h2", "h3"), f.windows("billy", 17*time.Minute, "h1")...)
	d := decide(t, Config{MaxHosts: 2}, State{}, Pass{NewSpikes: windows}, f.t0.Add(20*time.Minute))
	if len(d.Alerts) != 1 {
		t.Fatalf("want one spike-group alert, got %d", len(d.Alerts))
	}
	a := d.Alerts[0]
	want := &alertdoc.SpikeGroup{
		Count: 4, HostsCount: 3, Hosts: []string{"h1", "h2"}, HWClasses: map[string]int{"gen4": 1, "gen5": 3},
		FirstWindowStart: f.t0, LastWindowEnd: f.t0.Add(17*time.Minute + time.Second),
		PeakMS: 1020, PeakHost: "h3",
		SpikeIDs: []string{"billy/h1/1748779200", "billy/h1/1748780220", "billy/h2/1748779201", "billy/h3/1748779202"},
		TopSuspects: []alertdoc.GroupSuspect{
			{Metric: "system.cpu.time", Mode: "softirq", CPUs: []int{0, 2}, Rank1Windows: 4, Windows: 4, Hosts: 3},
			{Metric: "spikehunt.interrupts", Device: "eth0", CPUs: []int{0}, Rank1Windows: 0, Windows: 4, Hosts: 3},
		},
	}
	if diff := cmp.Diff(want, a.SpikeGroup); diff != "" {
		t.Errorf("spike group (-want +got):\n%s", diff)
	}
	if a.Kind != alertdoc.KindSpikeGroup || a.Service != "billy" || a.DetectorVersion != "v1" || a.Schema != alertdoc.SchemaVersion ||
		!a.GeneratedAt.Equal(f.t0.Add(20*time.Minute)) || !strings.HasPrefix(a.AlertID, "spikegroup-") {
		t.Errorf("envelope: %+v", a)
	}

	// The id is the windows', not the order they came in or the time.
	reversed := []detect.SpikeWindow{windows[3], windows[2], windows[1], windows[0]}
	d2 := decide(t, Config{}, State{}, Pass{NewSpikes: reversed}, f.t0.Add(time.Hour))
	if d2.Alerts[0].AlertID != a.AlertID {
		t.Errorf("same windows, another order and time: id %s, want %s", d2.Alerts[0].AlertID, a.AlertID)
	}
}

func TestAlertSpikeWindowsAreNeverSentTwice(t *testing.T) {
	f := newFleet()
	type step struct {
		name       string
		at         time.Duration
		pass       Pass
		wantSent   []int // spike-group counts, in service order
		suppressed map[string]int
	}
	billy := f.windows("billy", 0, "h1", "h2")
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"the same windows reported by the next pass are duplicates", []step{
			{"first", 0, Pass{NewSpikes: billy}, []int{2}, map[string]int{}},
			{"again", time.Minute, Pass{NewSpikes: billy}, nil, map[string]int{ReasonDuplicate: 2}},
			{"one new among old", 2 * time.Minute, Pass{NewSpikes: append(f.windows("billy", time.Minute, "h3"), billy...)}, []int{1}, map[string]int{ReasonDuplicate: 2}},
		}},
		{"a window twice in one pass is sent once", []step{
			{"first", 0, Pass{NewSpikes: append(billy, billy[0])}, []int{2}, map[string]int{ReasonDuplicate: 1}},
		}},
		{"each service gets its own alert", []step{
			{"two services", 0, Pass{NewSpikes: append(f.windows("zeta", 0, "z1"), billy...)}, []int{2, 1}, map[string]int{}},
		}},
		{"windows older than the horizon are stale, not news", []step{
			{"backfill", 25 * time.Hour, Pass{NewSpikes: billy}, nil, map[string]int{ReasonStale: 2}},
		}},
		{"the horizon forgets old windows, which are then stale", []step{
			{"first", 0, Pass{NewSpikes: billy}, []int{2}, map[string]int{}},
			{"a day later", 25 * time.Hour, Pass{NewSpikes: billy}, nil, map[string]int{ReasonStale: 2}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := State{}
			for _, s := range tc.steps {
				d := decide(t, Config{}, st, s.pass, f.t0.Add(s.at))
				var counts []int
				for _, a := range d.Alerts {
					counts = append(counts, a.SpikeGroup.Count)
				}
				if diff := cmp.Diff(s.wantSent, counts); diff != "" {
					t.Errorf("%s: spike-group counts (-want +got):\n%s", s.name, diff)
				}
				if diff := cmp.Diff(s.suppressed, d.Suppressed); diff != "" {
					t.Errorf("%s: suppressed (-want +got):\n%s", s.name, diff)
				}
				st = d.Next
			}
			if n := len(st.SentSpikes); tc.name == "the horizon forgets old windows, which are then stale" && n != 0 {
				t.Errorf("%d windows remembered past the horizon", n)
			}
		})
	}
}

func TestAlertRateLimitFoldsHeldBackWindowsIntoTheNextAlert(t *testing.T) {
	f := newFleet()
	cfg := Config{SpikeGroupsPerMinute: 1, SpikeGroupBurst: 1}
	type want struct {
		count, suppressedAlerts int // of the alert sent; count 0 = none sent
		rateLimited             int
	}
	st := State{}
	for i, s := range []struct {
		at   time.Duration
		pass Pass
		want want
	}{
		{0, Pass{NewSpikes: f.windows("billy", 0, "h1")}, want{1, 0, 0}},
		{10 * time.Second, Pass{NewSpikes: f.windows("billy", 10*time.Second, "h2", "h3")}, want{0, 0, 1}},
		{20 * time.Second, Pass{NewSpikes: f.windows("billy", 20*time.Second, "h4")}, want{0, 0, 1}},
		// A pass without new windows has nothing to hold back: no count.
		{40 * time.Second, Pass{}, want{0, 0, 0}},
		// A minute after the first alert the bucket has a token again.
		{61 * time.Second, Pass{}, want{3, 2, 0}},
		{62 * time.Second, Pass{NewSpikes: f.windows("billy", 62*time.Second, "h5")}, want{0, 0, 1}},
		// Another service has a bucket of its own.
		{63 * time.Second, Pass{NewSpikes: f.windows("zeta", 63*time.Second, "z1")}, want{1, 0, 0}},
	} {
		d := decide(t, cfg, st, s.pass, f.t0.Add(s.at))
		var got want
		if len(d.Alerts) > 1 {
			t.Fatalf("step %d: %d alerts", i, len(d.Alerts))
		}
		if len(d.Alerts) == 1 {
			got.count, got.suppressedAlerts = d.Alerts[0].SpikeGroup.Count, d.Alerts[0].SpikeGroup.SuppressedAlerts
		}
		got.rateLimited = d.Suppressed[ReasonRateLimited]
		if got != s.want {
			t.Errorf("step %d at +%v: got %+v, want %+v", i, s.at, got, s.want)
		}
		st = d.Next
	}
	if n := len(st.Pending["billy"]); n != 1 {
		t.Errorf("billy's h5 window should still be pending, have %d", n)
	}
}

func TestAlertPatternChanges(t *testing.T) {
	f := newFleet()
	p := f.pattern("billy", 40)
	with := func(edit func(*detect.Pattern)) detect.Pattern {
		q := p
		q.Modifiers = append([]string(nil), p.Modifiers...)
		edit(&q)
		return q
	}
	type step struct {
		pass    Pass
		want    string // "change [what]" of the one pattern alert, or "" for none
		prevHA  int    // Previous.HostsAffected when want is changed or resolved
		advance time.Duration
	}
	for _, tc := range []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"an unchanged pattern is announced once", Config{}, []step{
			{Pass{Patterns: []detect.Pattern{p}}, "new []", 0, 0},
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.LookbackEnd = q.LookbackEnd.Add(time.Minute) })}}, "", 0, 0},
		}},
		{"a drift under 20% is not news, but drifts add up against what was published", Config{}, []step{
			{Pass{Patterns: []detect.Pattern{p}}, "new []", 0, 0},
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.HostsAffected = 44 })}}, "", 0, 0},
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.HostsAffected = 47 })}}, "", 0, 0},
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.HostsAffected = 48 })}}, "changed [hosts_affected]", 40, 15 * time.Minute},
		}},
		{"fewer hosts by a fifth is a change", Config{}, []step{
			{Pass{Patterns: []detect.Pattern{p}}, "new []", 0, 0},
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.HostsAffected = 32 })}}, "changed [hosts_affected]", 40, 15 * time.Minute},
		}},
		{"class, modifiers and interval changes are named", Config{}, []step{
			{Pass{Patterns: []detect.Pattern{p}}, "new []", 0, 0},
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) {
				q.Class, q.Modifiers, q.RecurrenceInterval = vocab.ClassFleetSynchronized, nil, 25*time.Minute
			})}}, "changed [class modifiers recurrence_interval]", 40, 15 * time.Minute},
		}},
		{"a pattern's changes are spaced by PatternChangeEvery, against what was published", Config{PatternChangeEvery: 10 * time.Minute}, []step{
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.HostsAffected = 5 })}}, "new []", 0, 0},
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.HostsAffected = 12 })}}, "", 0, time.Minute},
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.HostsAffected = 30 })}}, "", 0, 8 * time.Minute},
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.HostsAffected = 40 })}}, "changed [hosts_affected]", 5, time.Minute},
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.HostsAffected = 20 })}}, "", 0, 5 * time.Minute},
			// Back where it was published before the interval ended: nothing to say.
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.HostsAffected = 41 })}}, "", 0, 5 * time.Minute},
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.HostsAffected = 41 })}}, "", 0, 10 * time.Minute},
			// Resolution is not spaced.
			{Pass{Services: []string{"billy"}}, "resolved []", 40, time.Minute},
		}},
		{"modifiers are compared as sets", Config{}, []step{
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.Modifiers = []string{"b", "a"} })}}, "new []", 0, 0},
			{Pass{Patterns: []detect.Pattern{with(func(q *detect.Pattern) { q.Modifiers = []string{"a", "b"} })}}, "", 0, 0},
		}},
		{"a pattern missing from a pass over its service resolves", Config{}, []step{
			{Pass{Patterns: []detect.Pattern{p}}, "new []", 0, 0},
			{Pass{Services: []string{"zeta"}}, "", 0, 0},
			{Pass{Services: []string{"billy"}}, "resolved []", 40, 0},
			{Pass{}, "", 0, 0},
			{Pass{Patterns: []detect.Pattern{p}}, "new []", 0, 0},
		}},
		{"a catch-up's pass that skipped the patterns neither resolves nor changes one", Config{}, []step{
			{Pass{Patterns: []detect.Pattern{p}}, "new []", 0, 0},
			{Pass{Services: []string{"billy"}, PatternsSkipped: true}, "", 0, time.Minute},
			{Pass{PatternsSkipped: true}, "", 0, time.Minute},
			{Pass{Patterns: []detect.Pattern{p}}, "", 0, time.Minute},
			{Pass{Services: []string{"billy"}}, "resolved []", 40, 0},
		}},
		{"ResolveAfter waits out a flicker", Config{ResolveAfter: 5 * time.Minute}, []step{
			{Pass{Patterns: []detect.Pattern{p}}, "new []", 0, 0},
			{Pass{}, "", 0, time.Minute},
			{Pass{Patterns: []detect.Pattern{p}}, "", 0, time.Minute},
			{Pass{}, "", 0, 4 * time.Minute},
			{Pass{}, "", 0, 4 * time.Minute},
			{Pass{}, "resolved []", 40, 2 * time.Minute},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, now := State{}, f.t0
			for i, s := range tc.steps {
				now = now.Add(s.advance)
				d := decide(t, tc.cfg, st, s.pass, now)
				got := ""
				if len(d.Alerts) > 1 {
					t.Fatalf("step %d: %d alerts", i, len(d.Alerts))
				}
				if len(d.Alerts) == 1 {
					a := d.Alerts[0].Pattern
					got = fmt.Sprintf("%s %v", a.Change, a.Changes)
					if s.prevHA != 0 && (a.Previous == nil || a.Previous.HostsAffected != s.prevHA) {
						t.Errorf("step %d: previous = %+v, want hosts_affected %d", i, a.Previous, s.prevHA)
					}
					if a.Change == alertdoc.ChangeNew && a.Previous != nil {
						t.Errorf("step %d: a new pattern has a previous state", i)
					}
				}
				if got != s.want {
					t.Errorf("step %d: got %q, want %q", i, got, s.want)
				}
				st = d.Next
			}
		})
	}
}

func TestAlertPatternContentAndID(t *testing.T) {
	f := newFleet()
	d := decide(t, Config{}, State{}, Pass{Patterns: []detect.Pattern{f.pattern("billy", 48)}}, f.t0)
	a := d.Alerts[0]
	want := &alertdoc.PatternChange{Change: alertdoc.ChangeNew, Changes: []string{}, PatternFacts: alertdoc.PatternFacts{
		PatternID: "billy/fleet-recurrent", Class: "fleet-recurrent", Modifiers: []string{"hw-class-skewed"},
		HostsAffected: 48, HostsTotal: 50, HostsAffectedShare: 0.96, RecurrenceIntervalS: 1020, Regularity: 0.9,
		Synchronicity: 0.05, HWClassSkew: map[string]float64{"gen4": 0.5, "gen5": 2.1}, IllusionShare: 0.4,
		Suspects:            []alertdoc.PatternSuspect{{Metric: "spikehunt.softirqs", Mode: "NET_RX", CPUs: []int{0, 2, 4, 6}, Hosts: 48, Score: 5}},
		AffectedHostsSample: []string{"h1", "h2"}, LookbackStart: f.t0.Add(-6 * time.Hour), LookbackEnd: f.t0,
	}}
	if diff := cmp.Diff(want, a.Pattern); diff != "" {
		t.Errorf("pattern alert (-want +got):\n%s", diff)
	}
	// The same decision a pass later (after a restart without state) is
	// recognizably the same alert.
	later := f.pattern("billy", 48)
	later.LookbackStart, later.LookbackEnd = later.LookbackStart.Add(time.Hour), later.LookbackEnd.Add(time.Hour)
	d2 := decide(t, Config{}, State{}, Pass{Patterns: []detect.Pattern{later}}, f.t0.Add(time.Hour))
	if d2.Alerts[0].AlertID != a.AlertID {
		t.Errorf("same pattern state, later look-back: id %s, want %s", d2.Alerts[0].AlertID, a.AlertID)
	}
	d3 := decide(t, Config{}, State{}, Pass{Patterns: []detect.Pattern{f.pattern("billy", 20)}}, f.t0)
	if d3.Alerts[0].AlertID == a.AlertID {
		t.Error("another hosts_affected, same id")
	}
}

// A restart that restores the saved state (through JSON, as a caller
// persists it) sends nothing that was sent before.
func TestAlertRestartRestoresTheState(t *testing.T) {
	f := newFleet()
	cfg := Config{SpikeGroupsPerMinute: 1, SpikeGroupBurst: 1}
	first := Pass{NewSpikes: f.windows("billy", 0, "h1", "h2"), Patterns: []detect.Pattern{f.pattern("billy", 40)}}
	d := decide(t, cfg, State{}, first, f.t0)
	if len(d.Alerts) != 2 {
		t.Fatalf("first pass: %d alerts", len(d.Alerts))
	}
	// The second pass is rate-limited: its window waits in the state.
	d = decide(t, cfg, d.Next, Pass{NewSpikes: f.windows("billy", time.Minute, "h3"), Patterns: first.Patterns}, f.t0.Add(10*time.Second))
	if len(d.Alerts) != 0 {
		t.Fatalf("second pass: %d alerts", len(d.Alerts))
	}
	saved, err := json.Marshal(d.Next)
	if err != nil {
		t.Fatal(err)
	}
	var restored State
	if err := json.Unmarshal(saved, &restored); err != nil {
		t.Fatal(err)
	}
	// The new process sees the first pass's output again: nothing new; a
	// minute later the held-back window goes out.
	d = decide(t, cfg, restored, first, f.t0.Add(61*time.Second))
	if len(d.Alerts) != 1 || d.Alerts[0].SpikeGroup == nil || d.Alerts[0].SpikeGroup.Count != 1 ||
		d.Alerts[0].SpikeGroup.SuppressedAlerts != 1 || d.Alerts[0].SpikeGroup.Hosts[0] != "h3" {
		t.Fatalf("after restore: %+v", d.Alerts)
	}
	if d.Suppressed[ReasonDuplicate] != 2 {
		t.Errorf("duplicates after restore: %v", d.Suppressed)
	}
	// Without the state, everything would have gone out again.
	if d := decide(t, cfg, State{}, first, f.t0.Add(61*time.Second)); len(d.Alerts) != 2 {
		t.Errorf("control: %d alerts from an empty state, want 2", len(d.Alerts))
	}
}

func TestAlertDecideLeavesItsInputAlone(t *testing.T) {
	f := newFleet()
	d := decide(t, Config{}, State{}, Pass{NewSpikes: f.windows("billy", 0, "h1"), Patterns: []detect.Pattern{f.pattern("billy", 40)}}, f.t0)
	before, _ := json.Marshal(d.Next)
	pass := Pass{NewSpikes: f.windows("billy", time.Minute, "h2"), Patterns: []detect.Pattern{f.pattern("billy", 10)}}
	a := decide(t, Config{}, d.Next, pass, f.t0.Add(time.Minute))
	b := decide(t, Config{}, d.Next, pass, f.t0.Add(time.Minute))
	after, _ := json.Marshal(d.Next)
	if string(before) != string(after) {
		t.Error("Decide changed the state it was given")
	}
	if diff := cmp.Diff(a.Alerts, b.Alerts); diff != "" {
		t.Errorf("same inputs, other alerts:\n%s", diff)
	}
}

func TestAlertConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, ""},
		{Config{SpikeGroupsPerMinute: -1}, "SpikeGroupsPerMinute"},
		{Config{SpikeGroupBurst: -2}, "SpikeGroupBurst"},
		{Config{DedupHorizon: time.Second}, "DedupHorizon"},
		{Config{ResolveAfter: -time.Second}, "ResolveAfter"},
		{Config{PatternChangeEvery: -time.Second}, "PatternChangeEvery"},
		{Config{MaxHosts: -1, MaxSuspects: 1000}, "MaxHosts -1, want 1–10000; MaxSuspects"},
	} {
		err := tc.cfg.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
