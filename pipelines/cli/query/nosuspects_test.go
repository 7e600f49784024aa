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

// A spike window without suspects says why: its host sent no counters
// then, or none before it to compare with, or none of them moved.
func TestSuspectsOfASpikeWithoutAnySayWhy(t *testing.T) {
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	dsn := "chdb://" + st.Dir() + "?database=" + st.Database()
	start := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	at := func(d time.Duration) string { return start.Add(d).Format("2006-01-02 15:04:05.000") }
	exec := func(q string) {
		t.Helper()
		if err := st.Exec(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	exec(fmt.Sprintf(`INSERT INTO spikes (spike_id, service, host, hw_class, window_start, window_end, peak_us, baseline_us, score,
		detector_version, detected_at) VALUES ('quiet1', 'billy', 'h01', 'gen4', '%s', '%s', 900000, 4000, 36, 'v1', now64(3))`,
		at(0), at(2*time.Second)))
	// One series, counted every 10 s, from from to to (relative to the
	// window's start), flat.
	counters := func(from, to time.Duration) {
		var rows []string
		for d := from; d < to; d += 10 * time.Second {
			rows = append(rows, fmt.Sprintf("('%s', 10000, 'h01', 'system.cpu.time', 0, '', 'softirq', 0.1)", at(d)))
		}
		exec("INSERT INTO counters (ts_start, interval_ms, host, metric, cpu, device, mode, value) VALUES " + strings.Join(rows, ", "))
	}
	window := "the window " + start.Format("2006-01-02 15:04:05") + "–" + start.Add(2*time.Second).Format("15:04:05") + " UTC"
	for _, tc := range []struct {
		load func()
		want string
	}{
		{func() {}, "no suspects for spike quiet1: no kernel counters of host h01 cover " + window},
		{func() { counters(-5*time.Second, 20*time.Second) }, "no suspects for spike quiet1: host h01 has 1 counter series during " + window +
			" but none in the 30m before it, so nothing to compare them with"},
		{func() { counters(-30*time.Minute, -5*time.Second) }, "no suspects for spike quiet1: none of the 1 counter series of host h01 moved beyond its baseline during " +
			window + ": the time went inside the process"},
	} {
		tc.load()
		out, _ := cli(t, 0, "suspects", "--dsn", dsn, "--spike", "quiet1")
		if !strings.HasPrefix(out, tc.want) {
			t.Errorf("stdout %q, want %q…", out, tc.want)
		}
	}
}
