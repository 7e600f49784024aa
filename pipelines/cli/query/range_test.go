package query

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Every query command selects by one rule: a row whose interval [start,
// end) shares an instant with [--from, --to) is shown. Patterns by their
// look-back, captures and spikes by their window, hosts by the seconds of
// latency_1s and the spike windows, suspects by their spike's window. Half
// open: touching at an end is not overlap.
func TestEveryQueryCommandShowsTheRowsThatOverlapItsRange(t *testing.T) {
	f := seedQueryFleet(t)
	seedCaptures(t, f)
	at := func(d time.Duration) string { return f.t0.Add(d).Format(time.RFC3339Nano) }
	for _, tc := range []struct {
		name     string
		cmd      string
		from, to time.Duration
		want     string // in stdout; "" when the answer must be empty
		notWant  string
	}{
		// The pattern's latest look-back is [t0, t0+60m), with 3 of 5
		// hosts; the one before, [t0-30m, t0+30m), had 2.
		{"a pattern whose look-back is exactly the range", "patterns", 0, 60 * time.Minute, "fleet-recurrent  hw-class-skewed  3/5 (60%)", ""},
		{"a pattern whose look-back covers the range", "patterns", 10 * time.Minute, 20 * time.Minute, "fleet-recurrent  hw-class-skewed  3/5 (60%)", ""},
		{"a pattern whose look-back ends where the range starts", "patterns", 60 * time.Minute, 2 * time.Hour, "", ""},
		// c1 covers [17m-10s, 17m+10s), c5 [17m-5s, 17m+5s).
		{"a capture that began before the range", "captures", 17*time.Minute - 2*time.Second, 17*time.Minute + 2*time.Second, "c1", ""},
		{"a capture that ends where the range starts", "captures", 17*time.Minute + 10*time.Second, 18 * time.Minute, "", ""},
		{"a capture that starts where the range ends", "captures", 16 * time.Minute, 17*time.Minute - 10*time.Second, "", ""},
		{"one capture touching, one overlapping", "captures", 17*time.Minute + 5*time.Second, 17*time.Minute + 6*time.Second, "c1", "c5"},
		// s-h03-1 is [17m, 17m+2s).
		{"a spike window that began before the range", "spikes", 17*time.Minute + time.Second, 17*time.Minute + 90*time.Second, "h03", ""},
		{"a spike window that ends where the range starts", "spikes", 17*time.Minute + 2*time.Second, 18 * time.Minute, "", ""},
		{"a spike window that starts where the range ends", "spikes", 16 * time.Minute, 17 * time.Minute, "", ""},
		{"the suspects of a spike window that began before the range", "suspects", 17*time.Minute + time.Second, 18 * time.Minute, "system.cpu.time", ""},
		{"the spikes of a host whose window began before the range", "hosts", 17*time.Minute + time.Second, 18 * time.Minute, "h03", ""},
		// The last request second is [5m9s, 5m10s).
		{"a second of latency that began before the range", "hosts", 5*time.Minute + 9500*time.Millisecond, 6 * time.Minute, "h01", ""},
		{"a second of latency that ends where the range starts", "hosts", 5*time.Minute + 10*time.Second, 6 * time.Minute, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{tc.cmd, "--dsn", f.dsn, "--service", "billy", "--from", at(tc.from), "--to", at(tc.to)}
			if tc.cmd == "captures" {
				args = []string{tc.cmd, "--dsn", f.dsn, "--from", at(tc.from), "--to", at(tc.to)}
			}
			out, _ := cli(t, 0, args...)
			empty := strings.HasPrefix(out, "no ")
			switch {
			case tc.want == "" && !empty:
				t.Errorf("spikehunt %s: want the empty answer, got:\n%s", strings.Join(args, " "), out)
			case tc.want != "" && (empty || !strings.Contains(out, tc.want)):
				t.Errorf("spikehunt %s: want %q in:\n%s", strings.Join(args, " "), tc.want, out)
			case tc.notWant != "" && len(tableRows(out, tc.notWant)) > 0:
				t.Errorf("spikehunt %s: want no %q row in:\n%s", strings.Join(args, " "), tc.notWant, out)
			}
		})
	}
}

// `suspects --limit N` shows the N newest spike windows that have suspects:
// a newer window without any (a counter step coarser than the window, a
// host without the agent's samplers) does not use up the limit.
func TestSuspectsLimitCountsOnlyWindowsThatHaveSuspects(t *testing.T) {
	f := seedQueryFleet(t)
	st, err := store.Open(context.Background(), f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Three windows newer than every window with suspects, none with any.
	var rows []string
	for i, h := range []string{"h01", "h02", "h01"} {
		rows = append(rows, fmt.Sprintf("('quiet-%d', 'billy', '%s', 'gen4', '%s', '%s', 900000, 5000, 36, 'v1', now64(3), 0)",
			i, h, f.at(55*time.Minute+time.Duration(i)*time.Minute), f.at(55*time.Minute+time.Duration(i)*time.Minute+time.Second)))
	}
	if err := st.Exec(context.Background(), `INSERT INTO spikes (spike_id, service, host, hw_class, window_start, window_end,
		peak_us, baseline_us, score, detector_version, detected_at, is_deleted) VALUES `+strings.Join(rows, ", ")); err != nil {
		t.Fatal(err)
	}
	out, _ := cli(t, 0, append([]string{"suspects", "--dsn", f.dsn, "--service", "billy", "--limit", "1"}, f.rangeArgs()...)...)
	if !strings.Contains(out, "h03   "+utcTime(f.t0.Add(51*time.Minute))) || strings.Contains(out, "quiet") {
		t.Errorf("want the newest window with suspects, s-h03-3 (h03 at +51m):\n%s", out)
	}
	if n := len(tableRows(out, "h0[0-9]")); n != 1 {
		t.Errorf("--limit 1: want 1 window, got %d:\n%s", n, out)
	}
}
