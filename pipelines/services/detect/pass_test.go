package detect

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spikehunt/spikehunt/internal/store"
)

const (
	liveSpikes = `SELECT spike_id, service, host, hw_class, window_start, window_end, peak_us, baseline_us, score, detector_version
FROM spikes FINAL WHERE is_deleted = 0 ORDER BY service, host, window_start`
	liveSuspects = `SELECT spike_id, host, window_start, rank, metric, cpu, device, mode, baseline, during, deviation
FROM spike_suspects FINAL WHERE is_deleted = 0 ORDER BY service, host, window_start, rank`
	livePatterns = `SELECT pattern_id, service, class, modifiers, lookback_start, lookback_end, hosts_affected, hosts_total,
    recurrence_interval_s, regularity, synchronicity, hw_class_skew, illusion_share, suspects
FROM patterns FINAL WHERE is_deleted = 0 ORDER BY service, pattern_id, lookback_end`
	// Keys with more than one live row: 0 when nothing was duplicated.
	duplicateKeys = `SELECT toUInt64(
    ifNull((SELECT count() FROM (SELECT 1 FROM spikes FINAL WHERE is_deleted = 0 GROUP BY service, host, window_start HAVING count() > 1)), 0) +
    ifNull((SELECT count() FROM (SELECT 1 FROM spike_suspects FINAL WHERE is_deleted = 0 GROUP BY service, host, window_start, rank HAVING count() > 1)), 0) +
    ifNull((SELECT count() FROM (SELECT 1 FROM patterns FINAL WHERE is_deleted = 0 GROUP BY service, pattern_id, lookback_end HAVING count() > 1)), 0))`
)

// loadStallingFleet is a fleet whose rows all three detectors write: host 3
// stalls every 3 min from minute 20 (an isolated host), the first of them
// with a disk read latency jump in its counters; every host shares one 30 s
// stall at minute 45.
func loadStallingFleet(t *testing.T) *store.Embedded {
	t.Helper()
	st := migrated(t)
	fleetLoad{hosts: 40, seconds: 3600, stall: "(h = 3 AND s >= 1200 AND s % 180 = 5) OR (s >= 2700 AND s < 2730)"}.insert(t, st)
	insertCounters(t, st, host(3), 3600, withExtra(quietHost(), func(c counterSeries) bool {
		return c.metric == "system.disk.operation_time" && c.mode == "read"
	}, 40, 1265, 1266))
	return st
}

func TestDetectPassRerunRewritesIdenticalRows(t *testing.T) {
	ctx := context.Background()
	st := loadStallingFleet(t)
	cfg := Config{Service: "billy", From: dataStart, To: sec(3600)}
	first, err := Pass(ctx, st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Spikes) < 40 || len(first.Patterns) == 0 {
		t.Fatalf("want ≥ 40 windows and a pattern to compare, got %d windows and %d patterns", len(first.Spikes), len(first.Patterns))
	}
	before := map[string][][]string{}
	for _, q := range []string{liveSpikes, liveSuspects, livePatterns} {
		before[q] = queryRows(t, st, q)
	}
	second, err := Pass(ctx, st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !second.DetectedAt.After(first.DetectedAt) {
		t.Errorf("the second pass is stamped %v, not after the first (%v)", second.DetectedAt, first.DetectedAt)
	}
	for _, q := range []string{liveSpikes, liveSuspects, livePatterns} {
		if diff := cmp.Diff(before[q], queryRows(t, st, q)); diff != "" {
			t.Errorf("a re-run changed the rows (-first +second):\n%s\n%s", diff, q)
		}
	}
	if n := queryRows(t, st, duplicateKeys)[0][0]; n != "0" {
		t.Errorf("%s keys have more than one live row", n)
	}
	if len(second.Retracted) != 0 || len(second.RetractedPatterns) != 0 || second.NewSpikes() != 0 {
		t.Errorf("a re-run retracted %v, patterns %v, and found %d new windows; want none", second.Retracted, second.RetractedPatterns, second.NewSpikes())
	}
	// Every written row of the second pass carries its stamp.
	if n := queryRows(t, st, `SELECT count() FROM spikes FINAL WHERE is_deleted = 0 AND detected_at != `+msLit(second.DetectedAt))[0][0]; n != "0" {
		t.Errorf("%s spike rows were not rewritten by the second pass", n)
	}
}

func TestDetectPassRetractsWhatARerunNoLongerFinds(t *testing.T) {
	ctx := context.Background()
	st := loadStallingFleet(t)
	cfg := Config{Service: "billy", From: dataStart, To: sec(3600)}
	first, err := Pass(ctx, st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if first.SuspectRows == 0 || len(first.Patterns) == 0 {
		t.Fatalf("want suspects and patterns to retract; got %d suspect rows, %d patterns", first.SuspectRows, len(first.Patterns))
	}
	// A threshold no stall reaches: every window, its suspects and the
	// pattern of this look-back end go.
	cfg.Spikes.K = 1000
	second, err := Pass(ctx, st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, w := range first.Spikes {
		ids = append(ids, w.ID)
	}
	slices.Sort(ids)
	if diff := cmp.Diff(ids, second.Retracted); diff != "" {
		t.Errorf("retracted spike ids (-want +got):\n%s", diff)
	}
	var patterns []string
	for _, p := range first.Patterns {
		patterns = append(patterns, p.ID)
	}
	slices.Sort(patterns)
	if diff := cmp.Diff(patterns, second.RetractedPatterns); diff != "" {
		t.Errorf("retracted patterns (-want +got):\n%s", diff)
	}
	for _, q := range []string{liveSpikes, liveSuspects, livePatterns} {
		if rows := queryRows(t, st, q); len(rows) != 0 {
			t.Errorf("%d live rows remain: %v\n%s", len(rows), rows[0], q)
		}
	}
	// And back: the rows return.
	cfg.Spikes.K = 0
	third, err := Pass(ctx, st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(third.Spikes) != len(first.Spikes) || third.NewSpikes() != len(first.Spikes) || len(third.Patterns) != len(first.Patterns) {
		t.Errorf("after retraction a pass finds %d windows (%d new) and %d patterns; want %d, %d, %d",
			len(third.Spikes), third.NewSpikes(), len(third.Patterns), len(first.Spikes), len(first.Spikes), len(first.Patterns))
	}
}

// Passes that follow one another: a window straddling the boundary between
// two passes is one row, rewritten whole by the second pass.
func TestDetectPassesInSequenceRewriteAStraddlingWindow(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	fleetLoad{hosts: 20, seconds: 3600, stall: "h = 3 AND s >= 1797 AND s < 1803"}.insert(t, st)
	first, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(1800)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]window{{host(3), 1797, 1800}}, windowsOf(readSpikes(t, st, "billy"))); diff != "" {
		t.Fatalf("after the first pass (-want +got):\n%s", diff)
	}
	second, err := Pass(ctx, st, Config{Service: "billy", From: sec(1800), To: sec(3600)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]window{{host(3), 1797, 1803}}, windowsOf(readSpikes(t, st, "billy"))); diff != "" {
		t.Fatalf("after the second pass (-want +got):\n%s", diff)
	}
	if len(second.Spikes) != 1 || !second.Spikes[0].Changed || second.Spikes[0].ID != first.Spikes[0].ID {
		t.Errorf("the second pass returned %+v; want the same window id, changed", second.Spikes)
	}
	third, err := Pass(ctx, st, Config{Service: "billy", From: sec(1800), To: sec(3600)})
	if err != nil {
		t.Fatal(err)
	}
	if len(third.Spikes) != 1 || third.Spikes[0].Changed {
		t.Errorf("re-running the second pass returned %+v; want the window, unchanged", third.Spikes)
	}
	// A pass whose pad does not reach the window leaves it alone.
	if _, err := Pass(ctx, st, Config{Service: "billy", From: sec(3000), To: sec(3600)}); err != nil {
		t.Fatal(err)
	}
	if n := len(readSpikes(t, st, "billy")); n != 1 {
		t.Errorf("a later pass left %d windows, want the one", n)
	}
}

func TestDetectPassOverEveryService(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	fleetLoad{service: "billy", hosts: 10, seconds: 1800, stall: "h = 1 AND s = 900"}.insert(t, st)
	fleetLoad{service: "cart", hosts: 10, seconds: 1800, stall: "h = 2 AND s = 1000"}.insert(t, st)
	res, err := Pass(ctx, st, Config{From: dataStart, To: sec(1800)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"billy", "cart"}, res.Services); diff != "" {
		t.Errorf("services (-want +got):\n%s", diff)
	}
	var got []string
	for _, w := range res.Spikes {
		got = append(got, w.Service+"/"+w.Host+"@"+w.Start.Sub(dataStart).String())
	}
	if diff := cmp.Diff([]string{"billy/host-001@15m0s", "cart/host-002@16m40s"}, got); diff != "" {
		t.Errorf("windows (-want +got):\n%s", diff)
	}
}

func TestDetectConfigValidate(t *testing.T) {
	to := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC) // fixed date: config validation only, nothing is read
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults over an hour are valid", Config{From: to.Add(-time.Hour), To: to}, true},
		{"To must be set", Config{From: to}, false},
		{"From must be before To", Config{From: to, To: to}, false},
		{"K below 1 is refused", Config{From: to.Add(-time.Hour), To: to, Spikes: SpikeConfig{K: 0.5}}, false},
		{"a pad no longer than the merge gap is refused", Config{From: to.Add(-time.Hour), To: to, Spikes: SpikeConfig{MergeGap: 10 * time.Second, Pad: 10 * time.Second}}, false},
		{"a bucket of a fraction of a second is refused", Config{From: to.Add(-time.Hour), To: to, Spikes: SpikeConfig{Bucket: 90500 * time.Millisecond}}, false},
		{"more than 255 suspects do not fit the rank column", Config{From: to.Add(-time.Hour), To: to, Suspects: SuspectConfig{Max: 300}}, false},
		{"a look-back under 10 min is refused", Config{From: to.Add(-time.Hour), To: to, Patterns: PatternConfig{Lookback: time.Minute}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.cfg
			err := tt.cfg.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok = %v", err, tt.ok)
			}
			var ce *ConfigError
			if err != nil && (!errors.Is(err, ErrConfig) || !errors.As(err, &ce) || ce.Problem == "") {
				t.Errorf("Validate() = %v, want a *ConfigError with its problem", err)
			}
			if diff := cmp.Diff(before, tt.cfg, cmpopts.IgnoreFields(Config{}, "Now")); diff != "" || tt.cfg.Now != nil {
				t.Errorf("Validate changed the config (-before +after):\n%s", diff)
			}
			if d := tt.cfg.WithDefaults(); tt.ok && (d.Spikes.K != DefaultK || d.Spikes.Floor != DefaultFloor || d.Patterns.Lookback != DefaultLookback || d.Now == nil) {
				t.Errorf("WithDefaults did not fill the defaults: %+v", d.Spikes)
			}
		})
	}
}
