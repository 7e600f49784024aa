package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// detectFleet is 20 hosts × 30 min of one request a second at ~4 ms, where
// host 7 stalls for 1 s at minute 15; it returns the DSN and the start.
func detectFleet(t *testing.T) (dsn string, start time.Time) {
	t.Helper()
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	q := fmt.Sprintf(`INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, trace_id, span_id, thread_id, weight)
SELECT fromUnixTimestamp64Micro(toInt64((%d + s) * 1000000 + 500000), 'UTC'), 'billy', concat('h', toString(h)), 'gen4', '/get',
    if(h = 7 AND s = 900, 1000000, 3500 + cityHash64(n) %% 1000), 'OK', '', '', 1, 1
FROM (SELECT number AS n, intDiv(number, 20) AS s, number %% 20 AS h FROM numbers(36000))`, start.Unix())
	if err := st.Exec(ctx, q); err != nil {
		t.Fatal(err)
	}
	return "chdb://" + st.Dir() + "?database=" + st.Database(), start
}

func TestDetectCommandRunsAPassAndARerunChangesNothing(t *testing.T) {
	dsn, start := detectFleet(t)
	args := []string{"detect", "--dsn", dsn, "--service", "billy", "--every", "0",
		"--from", start.Format(time.RFC3339), "--to", start.Add(30 * time.Minute).Format(time.RFC3339)}
	code, out, errs := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	if !strings.Contains(errs, "detect: opened the embedded store") || !strings.Contains(errs, "service billy, first pass") {
		t.Errorf("progress missing from stderr:\n%s", errs)
	}
	line := regexp.MustCompile(`^\S+ → \S+: 1 service\(s\), 1 spike windows \(1 new or changed, 0 retracted\), 0 suspect rows, no pattern; pass \S+ \(spikes \S+, suspects \S+, patterns \S+\)\n$`)
	if !line.MatchString(out) {
		t.Errorf("summary line:\n%q", out)
	}
	code, out, errs = runCLI(t, args...)
	if code != 0 || !strings.Contains(out, "1 spike windows (0 new or changed, 0 retracted)") {
		t.Errorf("re-run: exit %d, stdout %q, stderr %q; want the same window, unchanged", code, out, errs)
	}
	// "As of" a time before the stall: nothing yet (data after --until is
	// not read), and the window, outside the range, is left alone.
	code, out, _ = runCLI(t, "detect", "--dsn", dsn, "--every", "0", "--since", "30m", "--until", start.Add(14*time.Minute).Format(time.RFC3339))
	if code != 0 || !strings.Contains(out, "0 spike windows (0 new or changed, 0 retracted)") {
		t.Errorf("as of before the stall: exit %d, stdout %q", code, out)
	}
	// A threshold the stall does not reach retracts the window.
	code, out, _ = runCLI(t, append(args, "--k", "1000")...)
	if code != 0 || !strings.Contains(out, "0 spike windows (0 new or changed, 1 retracted)") {
		t.Errorf("with --k 1000: exit %d, stdout %q; want the window retracted", code, out)
	}
}

func TestDetectCommandLineMistakes(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		inStderr string
	}{
		{[]string{"detect"}, "--dsn is required"},
		{[]string{"detect", "--dsn", "chdb:///x", "--from", "yesterday"}, `--from "yesterday": want an RFC 3339 time`},
		{[]string{"detect", "--dsn", "chdb:///x", "--k", "0.5"}, "K = 0.5, want 1–1000"},
		{[]string{"detect", "--dsn", "chdb:///x", "--since", "-1h"}, `--since "-1h": must be positive`},
		{[]string{"detect", "--dsn", "chdb:///x", "--every", "-1s"}, `invalid value "-1s" for flag --every: want 0 or a positive duration`},
		{[]string{"detect", "--dsn", "chdb:///x", "--lookback", "0"}, `invalid value "0" for flag --lookback: must be positive`},
		{[]string{"detect", "--dsn", "chdb:///x", "--alerts.pattern-change-every", "-1m"}, "PatternChangeEvery -1m0s is negative"},
		{[]string{"detect", "--dsn", "chdb:///x", "--alerts.spike-group-burst", "-3"}, "SpikeGroupBurst -3, want 1–1000"},
		{[]string{"detect", "--dsn", "chdb:///x", "--from", "2026-11-22T10:00:00Z", "--to", "2026-11-22T09:00:00Z"}, "is not before --to"}, // fixed date: flag validation, nothing is read
		{[]string{"detect", "--dsn", "chdb:///x", "--alerts.kafka.brokers", "k:9092"}, "needs --alerts.signing-key-file"},
	} {
		code, _, errs := runCLI(t, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.inStderr) {
			t.Errorf("spikehunt %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.inStderr)
		}
	}
}
