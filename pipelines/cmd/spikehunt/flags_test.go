package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// Every command's -h writes its flags as the README does, --dsn (a
// one-letter flag keeps one dash, -o); the five query commands share one
// default --limit, and their -h says what each column means and in what
// unit.
func TestEveryCommandsHelpWritesFlagsAsTheREADMEDoes(t *testing.T) {
	singleDash := regexp.MustCompile(`(?m)^\s+-[a-z][a-z0-9.-]+`)
	for name := range commands {
		if name == "version" {
			continue
		}
		code, _, errs := runCLI(t, name, "-h")
		if code != 0 || !strings.Contains(errs, "Usage: spikehunt "+name) {
			t.Errorf("%s -h: exit %d\n%s", name, code, errs)
			continue
		}
		if m := singleDash.FindAllString(errs, -1); len(m) > 0 {
			t.Errorf("%s -h prints single-dash long flags %q:\n%s", name, m, errs)
		}
		if !strings.Contains(errs, "\n  --") {
			t.Errorf("%s -h prints no --flag:\n%s", name, errs)
		}
	}
	for cmd, columns := range map[string][]string{
		"spikes":   {"SPIKE ", "PEAK_MS ", "milliseconds", "SCORE ", "no unit", "TOP_SUSPECT ", "; - when no\n                counter moved", "suspects --spike ID says which"},
		"suspects": {"BASELINE ", "DURING ", "share of one CPU", "events per second", "DEVIATION ", "1.4826 × MAD", "TOP_SUSPECT_IN "},
		"patterns": {"CLASS ", "INTERVAL ", "REGULARITY ", "0–1", "SYNC ", "HW_SKEW ", "ILLUSION ", "0–100%"},
		"hosts":    {"REQUESTS ", "P50_MS, P99_MS", "MAX_MS ", "SPIKES "},
		"captures": {"CAPTURE ", "WINDOW_START ", "SIZE ", "LOST "},
	} {
		_, _, errs := runCLI(t, cmd, "-h")
		for _, want := range append(columns, "(default 50)", "overlaps [--from, --to)", "half-open", `{"rows": [...], "summary": {...}}`) {
			if !strings.Contains(errs, want) {
				t.Errorf("%s -h lacks %q:\n%s", cmd, want, errs)
			}
		}
	}
}

// detect takes the query commands' time grammar (--since 7d, --from and
// --to as RFC 3339 or a duration ago) and keeps --to; --until still works,
// with a warning, and is not in -h.
func TestDetectTakesTheQueryCommandsTimeGrammar(t *testing.T) {
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(context.Background(), st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	dsn := "chdb://" + st.Dir() + "?database=" + st.Database()
	to := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	for _, tc := range []struct {
		args      []string
		wantRange string // the first pass's range in the summary line, "" to skip
	}{
		{[]string{"--since", "7d"}, ""},
		{[]string{"--since", "1.5d", "--to", to.Format(time.RFC3339)}, to.Add(-36*time.Hour).Format(time.RFC3339) + " → " + to.Format(time.RFC3339)},
		{[]string{"--from", "36h", "--to", "2h"}, ""},
		{[]string{"--since", "1d", "--lookback", "1d", "--to", to.Format(time.DateOnly)}, to.Truncate(24*time.Hour).Add(-24*time.Hour).Format(time.RFC3339) + " → " + to.Truncate(24*time.Hour).Format(time.RFC3339)},
	} {
		code, out, errs := runCLI(t, append([]string{"detect", "--dsn", dsn, "--every", "0"}, tc.args...)...)
		// A range over --max-span (1h) goes in passes of an hour: the first
		// starts where the range does, the last ends where it ends.
		from, to, _ := strings.Cut(tc.wantRange, " → ")
		if code != 0 || !strings.Contains(out, "0 spike windows") || (tc.wantRange != "" && (!strings.HasPrefix(out, from+" → ") || !strings.Contains(out, "→ "+to+":"))) {
			t.Errorf("detect %v: exit %d\nstdout %s\nstderr %s", tc.args, code, out, errs)
		}
	}
	code, out, errs := runCLI(t, "detect", "--dsn", dsn, "--every", "0", "--since", "30m", "--until", to.Format(time.RFC3339))
	if code != 0 || !strings.Contains(errs, "--until is deprecated") || !strings.Contains(errs, "use --to") ||
		!strings.Contains(out, to.Add(-30*time.Minute).Format(time.RFC3339)+" → "+to.Format(time.RFC3339)) {
		t.Errorf("detect --until: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	_, _, help := runCLI(t, "detect", "-h")
	if strings.Contains(help, "--until") || !strings.Contains(help, "--to string") || !strings.Contains(help, "7d") {
		t.Errorf("detect -h: want --to and the time grammar, no --until:\n%s", help)
	}
}
