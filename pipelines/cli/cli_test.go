package cli

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestTheTimeGrammarReadsDurationsDaysAndTimes(t *testing.T) {
	now := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{"90s": 90 * time.Second, "36h": 36 * time.Hour, "7d": 7 * 24 * time.Hour, "1.5d": 36 * time.Hour, "1h30m": 90 * time.Minute} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "soon", "-1h", "0d", "7"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q): no error", bad)
		}
	}
	for in, want := range map[string]time.Time{
		"2026-11-25T18:00:00Z":        time.Date(2026, 11, 25, 18, 0, 0, 0, time.UTC),
		"2026-11-25T19:00:00.5+01:00": time.Date(2026, 11, 25, 18, 0, 0, 500e6, time.UTC),
		"2026-11-30":                  time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),
		"36h":                         now.Add(-36 * time.Hour),
		"7d":                          now.Add(-7 * 24 * time.Hour),
	} {
		if got, err := ParseTime(in, now); err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestTimeRangeResolvesEachCombinationOfItsFlags(t *testing.T) {
	now := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		args     []string
		from, to time.Time
		text     string
		err      string
	}{
		{nil, now.Add(-6 * time.Hour), now, "since 6h", ""},
		{[]string{"--since", "7d"}, now.Add(-7 * 24 * time.Hour), now, "since 7d", ""},
		{[]string{"--since", "1h", "--to", "2026-11-26T00:00:00Z"}, now.Add(-7 * time.Hour), now.Add(-6 * time.Hour), "between 2026-11-25T23:00:00Z and 2026-11-26T00:00:00Z", ""},
		{[]string{"--from", "2h", "--to", "1h"}, now.Add(-2 * time.Hour), now.Add(-time.Hour), "between 2026-11-26T04:00:00Z and 2026-11-26T05:00:00Z", ""},
		{[]string{"--from", "2026-11-25", "--to", "2026-11-26"}, now.Add(-30 * time.Hour), now.Add(-6 * time.Hour), "between 2026-11-25T00:00:00Z and 2026-11-26T00:00:00Z", ""},
		{[]string{"--from", "2026-11-25T23:00:00.25Z", "--to", "2026-11-26"}, now.Add(-7*time.Hour + 250*time.Millisecond), now.Add(-6 * time.Hour), "between 2026-11-25T23:00:00.250Z and 2026-11-26T00:00:00Z", ""},
		{[]string{"--from", "2h", "--since", "1h"}, time.Time{}, time.Time{}, "", "either --since or --from"},
		{[]string{"--from", "1h", "--to", "2h"}, time.Time{}, time.Time{}, "", "is not before --to"},
		{[]string{"--to", "tomorrow"}, time.Time{}, time.Time{}, "", `--to "tomorrow": want an RFC 3339 time`},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		r := AddTimeRange(fs, "6h")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		from, to, text, err := r.Resolve(now)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err %v, want %q", tc.args, err, tc.err)
			}
		case err != nil || !from.Equal(tc.from) || !to.Equal(tc.to) || text != tc.text:
			t.Errorf("%v: [%v, %v) %q %v; want [%v, %v) %q", tc.args, from, to, text, err, tc.from, tc.to, tc.text)
		}
	}
}

func TestUsagePrintsDoubleDashesAndHidesDeprecatedAliases(t *testing.T) {
	var out bytes.Buffer
	fs := NewFlags("detect", "Does it.", &out)
	to := fs.String("to", "", "end")
	fs.String("o", "table", "output")
	Deprecate(fs, "until", "to")
	if err := Parse(fs, []string{"-until", "5m"}); err != nil {
		t.Fatal(err)
	}
	if *to != "5m" || !strings.Contains(out.String(), "warning: --until is deprecated and will be removed; use --to") {
		t.Errorf("--until: to = %q, output %q", *to, out.String())
	}
	out.Reset()
	fs.Usage()
	if u := out.String(); !strings.Contains(u, "  --to string\n") || !strings.Contains(u, "  -o string\n") ||
		!strings.Contains(u, `(default "table")`) || strings.Contains(u, "until") {
		t.Errorf("usage:\n%s", u)
	}
}

// A range counted back from a clock with nanoseconds is printed to the
// second, not "…T04:00:00.123456789Z".
func TestARangeCountedBackFromTheClockIsPrintedToTheSecond(t *testing.T) {
	now := time.Date(2026, 11, 26, 6, 0, 0, 123456789, time.UTC)
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	r := AddTimeRange(fs, "6h")
	if err := fs.Parse([]string{"--from", "2h", "--to", "1h"}); err != nil {
		t.Fatal(err)
	}
	_, _, text, err := r.Resolve(now)
	if want := "between 2026-11-26T04:00:00Z and 2026-11-26T05:00:00Z"; err != nil || text != want {
		t.Errorf("text %q, %v; want %q", text, err, want)
	}
}

func TestDurationFlagsTakeTheTimeGrammar(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	var every, lookback, hours time.Duration
	DurationVar(fs, &every, "every", 30*time.Second, true, "")
	DurationVar(fs, &lookback, "lookback", 6*time.Hour, false, "")
	DurationUnitVar(fs, &hours, "hours", 6*time.Hour, time.Hour, "")
	if got := fs.Lookup("lookback").DefValue; got != "6h" {
		t.Errorf("--lookback's default prints %q, want 6h", got)
	}
	for _, tc := range []struct {
		args                   []string
		every, lookback, hours time.Duration
	}{
		{[]string{"--every", "1d", "--lookback", "1d", "--hours", "6h"}, 24 * time.Hour, 24 * time.Hour, 6 * time.Hour},
		{[]string{"--every", "0", "--lookback", "90m", "--hours", "1.5"}, 0, 90 * time.Minute, 90 * time.Minute},
		{[]string{"--every", "30s", "--lookback", "1.5d", "--hours", "2d"}, 30 * time.Second, 36 * time.Hour, 48 * time.Hour},
	} {
		if err := fs.Parse(tc.args); err != nil || every != tc.every || lookback != tc.lookback || hours != tc.hours {
			t.Errorf("%v: every %v, lookback %v, hours %v, %v", tc.args, every, lookback, hours, err)
		}
	}
	for _, bad := range [][]string{{"--lookback", "0"}, {"--every", "-1h"}, {"--hours", "-2"}, {"--every", "soon"}} {
		if err := fs.Parse(bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	for d, want := range map[time.Duration]string{0: "0", 6 * time.Hour: "6h", 90 * time.Minute: "1h30m", 30 * time.Minute: "30m",
		45 * time.Second: "45s", 7 * 24 * time.Hour: "7d", 1500 * time.Millisecond: "1.5s"} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// Every plain flag.Duration of a command (detect --gap, --pad, --bucket)
// takes days as the time grammar's own flags do, and keeps Go's forms,
// zero and negatives as it had them.
func TestEveryDurationFlagTakesDays(t *testing.T) {
	var out bytes.Buffer
	fs := NewFlags("x", "", &out)
	gap := fs.Duration("gap", 2*time.Second, "slow seconds at most this far apart are one window")
	maxAge := fs.Duration("max-age", 0, "negative: no bound")
	for _, tc := range []struct {
		args        []string
		gap, maxAge time.Duration
	}{
		{[]string{"--gap", "1d", "--max-age", "0.5d"}, 24 * time.Hour, 12 * time.Hour},
		{[]string{"--gap", "1m30s", "--max-age", "-1s"}, 90 * time.Second, -time.Second},
		{[]string{"--gap", "0", "--max-age", "-1d"}, 0, -24 * time.Hour},
	} {
		if err := Parse(fs, tc.args); err != nil || *gap != tc.gap || *maxAge != tc.maxAge {
			t.Errorf("%v: gap %v, max-age %v, %v", tc.args, *gap, *maxAge, err)
		}
	}
	out.Reset()
	if err := Parse(fs, []string{"--gap", "1x"}); err == nil || !strings.Contains(out.String(), "--gap") {
		t.Errorf("--gap 1x: %v, %q; want a usage error naming --gap", err, out.String())
	}
	out.Reset()
	if err := Parse(fs, []string{"-h"}); err != flag.ErrHelp || !strings.Contains(out.String(), "--gap duration") {
		t.Errorf("-h: %v; usage %q, want --gap named a duration", err, out.String())
	}
}

// A flag mistake is one line that names flags as the usage does, with the
// nearest flag for a typo; the usage is not printed.
func TestAFlagMistakeIsOneLineWithTwoDashes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sinc", "1h"}, "unknown flag --sinc; did you mean --since?\n"},
		{[]string{"-xyzzy"}, "unknown flag --xyzzy\n"},
		{[]string{"--limit", "many"}, `invalid value "many" for flag --limit: parse error` + "\n"},
		{[]string{"--all=maybe"}, `invalid boolean value "maybe" for --all: parse error` + "\n"},
		{[]string{"--since"}, "flag needs an argument: --since\n"},
		{[]string{"extra"}, `unexpected argument "extra" (flags come as --name value)` + "\n"},
	} {
		var out bytes.Buffer
		fs := NewFlags("spikes", "Lists.", &out)
		AddTimeRange(fs, "6h")
		fs.Int("limit", 50, "rows")
		fs.Bool("all", false, "all")
		if err := Parse(fs, tc.args); err != ErrUsage || out.String() != tc.want {
			t.Errorf("%v: %v, output %q; want ErrUsage and %q", tc.args, err, out.String(), tc.want)
		}
		var stderr bytes.Buffer
		if code := ExitCode("spikes", ErrUsage, &stderr); code != 2 || stderr.String() != "run 'spikehunt spikes -h' for help\n" {
			t.Errorf("ExitCode: %d %q", code, stderr.String())
		}
	}
	for word, want := range map[string]string{"spiks": "spikes", "sspikes": "spikes", "patern": "patterns", "x": "", "capture": "captures", "frobnicate": ""} {
		if got := Nearest(word, []string{"spikes", "suspects", "patterns", "captures", "hosts"}); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", word, got, want)
		}
	}
}

// A flag whose help continues another's is printed under it, and the rest
// in alphabetical order.
func TestTheUsageKeepsAGroupUnderItsFirstFlag(t *testing.T) {
	var out bytes.Buffer
	fs := NewFlags("detect", "Does it.", &out)
	fs.String("dsn", "", "store")
	AddTimeRange(fs, "6h")
	fs.Float64("k", 8, "a second is slow past k × the typical latency")
	fs.Duration("floor", 0, "… and past this absolute floor")
	fs.String("alpha", "", "first")
	Group(fs, "k", "floor")
	if err := Parse(fs, []string{"-h"}); err != flag.ErrHelp {
		t.Fatal(err)
	}
	var names []string
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(l, "  -") {
			names = append(names, f[0])
		}
	}
	want := "--alpha --dsn -k --floor --since --from --to"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("flags in the order %s, want %s:\n%s", got, want, out.String())
	}
}
