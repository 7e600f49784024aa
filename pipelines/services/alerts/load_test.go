package alerts

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// A process without a saved state rebuilds one from the detector tables:
// what the detectors wrote counts as published.
func TestAlertLoadStateFromTheDetectorTables(t *testing.T) {
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	f := fleet{t0: now.Add(-time.Hour)}
	windows := f.windows("billy", 0, "h1", "h2")
	ts := func(t time.Time) string { return t.Format("2006-01-02 15:04:05.000") }
	var rows []string
	for _, w := range windows {
		rows = append(rows, fmt.Sprintf("('%s', 'billy', '%s', '%s', '%s', '%s', %d, 4000, 20, 'v1', now64(3))",
			w.ID, w.Host, w.HWClass, ts(w.Start), ts(w.End), w.PeakUS))
	}
	// A retracted window and one past the horizon do not count.
	rows = append(rows, fmt.Sprintf("('gone', 'billy', 'h9', 'gen4', '%s', '%s', 1, 1, 1, 'v1', now64(3))", ts(f.t0.Add(time.Minute)), ts(f.t0.Add(time.Minute))))
	rows = append(rows, fmt.Sprintf("('old', 'billy', 'h8', 'gen4', '%s', '%s', 1, 1, 1, 'v1', now64(3))", ts(now.Add(-48*time.Hour)), ts(now.Add(-48*time.Hour))))
	if err := st.Exec(ctx, `INSERT INTO spikes (spike_id, service, host, hw_class, window_start, window_end, peak_us,
		baseline_us, score, detector_version, detected_at) VALUES `+strings.Join(rows, ", ")); err != nil {
		t.Fatal(err)
	}
	if err := st.Exec(ctx, `INSERT INTO spikes (spike_id, service, host, hw_class, window_start, window_end, peak_us,
		baseline_us, score, detector_version, detected_at, is_deleted) VALUES `+
		fmt.Sprintf("('gone', 'billy', 'h9', 'gen4', '%s', '%s', 1, 1, 1, 'v1', now64(3) + 1, 1)", ts(f.t0.Add(time.Minute)), ts(f.t0.Add(time.Minute)))); err != nil {
		t.Fatal(err)
	}
	pattern := func(id string, end time.Time, affected, deleted int) string {
		return fmt.Sprintf(`('%s', 'billy', 'fleet-recurrent', ['hw-class-skewed'], '%s', '%s', %d, 50, 1020, 0.9, 0.05,
			{'gen5': 2.1}, 0.4, [('spikehunt.softirqs', 'NET_RX', '', %d, 5)], 'v1', now64(3), %d)`,
			id, ts(end.Add(-6*time.Hour)), ts(end), affected, affected, deleted)
	}
	if err := st.Exec(ctx, `INSERT INTO patterns (pattern_id, service, class, modifiers, lookback_start, lookback_end,
		hosts_affected, hosts_total, recurrence_interval_s, regularity, synchronicity, hw_class_skew, illusion_share,
		suspects, detector_version, detected_at, is_deleted) VALUES `+strings.Join([]string{
		pattern("billy/fleet-recurrent", now.Add(-20*time.Minute), 30, 0),
		pattern("billy/fleet-recurrent", now.Add(-10*time.Minute), 40, 0), // the latest version wins
		pattern("billy/retracted", now.Add(-10*time.Minute), 40, 1),
		pattern("billy/long-gone", now.Add(-48*time.Hour), 40, 0),
	}, ", ")); err != nil {
		t.Fatal(err)
	}

	state, err := LoadState(ctx, st, now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(state.SentSpikes) != 2 || len(state.Patterns) != 1 || state.Patterns["billy/fleet-recurrent"].Facts.HostsAffected != 40 {
		t.Fatalf("loaded state: %d spikes %v, patterns %+v", len(state.SentSpikes), state.SentSpikes, state.Patterns)
	}

	// The detectors' next pass repeats what they wrote: nothing to send.
	d := decide(t, Config{}, state, Pass{NewSpikes: windows, Patterns: []detect.Pattern{f.pattern("billy", 40)}}, now)
	if len(d.Alerts) != 0 || d.Suppressed[ReasonDuplicate] != 2 {
		t.Errorf("after LoadState: %d alerts, suppressed %v", len(d.Alerts), d.Suppressed)
	}
	// A material change is measured against the loaded version.
	d = decide(t, Config{}, state, Pass{Patterns: []detect.Pattern{f.pattern("billy", 20)}}, now)
	if len(d.Alerts) != 1 || d.Alerts[0].Pattern.Change != alertdoc.ChangeChanged || d.Alerts[0].Pattern.Previous.HostsAffected != 40 {
		t.Errorf("change against the loaded version: %+v", d.Alerts)
	}
}
