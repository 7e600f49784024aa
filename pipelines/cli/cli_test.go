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
