package cli

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The one time grammar of every spikehunt command that takes a range
// (spikes, patterns, hosts, suspects, captures, detect):
//
//	--since D   a duration: Go's (90s, 30m, 36h, 1h30m) or days (7d, 1.5d)
//	--from T    a time: RFC 3339 (2026-11-25T18:00:00Z, fractions and
//	--to T      offsets allowed), a date (2026-11-30: its midnight UTC), or
//	            a duration ago (36h: 36 hours before now)
//
// The range is [--from, --to), or the --since before --to; --to defaults
// to now, --since to the command's default. --since and --from are
// exclusive. Every other duration flag of a command takes D too
// (DurationVar: detect --every and --lookback, demo --hours; and any
// flag.Duration, which Parse lets take days: detect --gap 1d), and every
// other time flag T (sim --from, eval --from). Times are printed to the
// second, with milliseconds only when they have a fraction (FormatTime).
const TimeGrammar = "D is 90s, 30m, 36h or 7d; T is RFC 3339 (2026-11-25T18:00:00Z), a date (2026-11-25, midnight UTC) or a duration ago (36h)"

// ParseDuration reads a --since: a Go duration or a number of days ("7d",
// "1.5d"), positive.
func ParseDuration(s string) (time.Duration, error) {
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseFloat(n, 64)
		if err != nil {
			return 0, errors.New("want a duration such as 90s, 30m, 36h or 7d")
		}
		d = time.Duration(days * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, errors.New("want a duration such as 90s, 30m, 36h or 7d")
		}
	}
	if d <= 0 {
		return 0, errors.New("must be positive")
	}
	return d, nil
}

// ParseTime reads a --from or --to: RFC 3339, a date (its midnight UTC),
// or a duration (ParseDuration) before now.
func ParseTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if d, err := ParseDuration(s); err == nil {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, errors.New("want an RFC 3339 time such as 2026-11-25T18:00:00Z, a date such as 2026-11-25 (midnight UTC), or a duration ago such as 36h or 7d")
}

// FormatTime prints t in UTC as RFC 3339 to the second, with milliseconds
// when it has a fraction of a second: never nanoseconds.
func FormatTime(t time.Time) string {
	t = t.UTC()
	if t.Nanosecond() == 0 {
		return t.Format(time.RFC3339)
	}
	return t.Format("2006-01-02T15:04:05.000Z07:00")
}

// FormatDuration prints d as the time grammar writes it: 6h, 90m, 1h30m,
// 45s, 7d (whole days), 1.5s; "0" for zero.
func FormatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// duration is a flag.Value in the time grammar's D (DurationVar).
type duration struct {
	p *time.Duration
	// unit, when set, is what a bare number counts: demo --hours 6.
	unit time.Duration
	// zero lets 0 through: detect --every 0, once.
	zero bool
}

func (d *duration) String() string {
	if d == nil || d.p == nil {
		return ""
	}
	return FormatDuration(*d.p)
}

func (d *duration) Set(s string) error {
	if d.zero && (s == "0" || s == "0s") {
		*d.p = 0
		return nil
	}
	if d.unit != 0 {
		if n, err := strconv.ParseFloat(s, 64); err == nil {
			if n <= 0 {
				return errors.New("must be positive")
			}
			*d.p = time.Duration(n * float64(d.unit))
			return nil
		}
	}
	v, err := ParseDuration(s)
	if err != nil && d.zero {
		return errors.New("want 0 or a positive duration such as 90s, 30m, 36h or 7d")
	}
	if err != nil {
		return err
	}
	*d.p = v
	return nil
}

// TypeName is the word the usage prints after the flag's name.
func (d *duration) TypeName() string { return "duration" }

// DurationVar defines a duration flag in the time grammar (90s, 30m, 36h,
// 7d), positive; with zeroOK, 0 too.
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, zeroOK bool, usage string) {
	*p = value
	fs.Var(&duration{p: p, zero: zeroOK}, name, usage)
}

// DurationUnitVar is DurationVar where a bare number counts in unit:
// --hours 6 and --hours 6h are the same.
func DurationUnitVar(fs *flag.FlagSet, p *time.Duration, name string, value, unit time.Duration, usage string) {
	*p = value
	fs.Var(&duration{p: p, unit: unit}, name, usage)
}

// TimeRange is the --since, --from and --to of a command (AddTimeRange).
type TimeRange struct {
	fs              *flag.FlagSet
	since, from, to string
}

// AddTimeRange defines --since (default defaultSince), --from and --to on
// fs in the one time grammar (TimeGrammar).
func AddTimeRange(fs *flag.FlagSet, defaultSince string) *TimeRange {
	r := &TimeRange{fs: fs}
	fs.StringVar(&r.since, "since", defaultSince, "the range is this long, up to --to: a duration, 90s, 30m, 36h or 7d")
	fs.StringVar(&r.from, "from", "", "start of the range, instead of --since: RFC 3339 (2026-11-25T18:00:00Z) or a duration ago (36h)")
	fs.StringVar(&r.to, "to", "", "end of the range, excluded: RFC 3339 or a duration ago (default now)")
	Group(fs, "since", "from", "to")
	return r
}

// Resolve checks the range's flags and resolves them against now: the
// range [from, to), and text naming it in messages ("since 6h", or
// "between 2026-11-25T18:00:00Z and 2026-11-26T00:00:00Z"). An error is a
// usage mistake, worded for the user.
func (r *TimeRange) Resolve(now time.Time) (from, to time.Time, text string, err error) {
	// To the second: a range counted back from the clock is printed
	// whole ("between 2026-11-25T18:00:00Z and …"), and a second is the
	// finest grain of every table a range selects.
	now = now.UTC().Truncate(time.Second)
	sinceSet := false
	r.fs.Visit(func(f *flag.Flag) { sinceSet = sinceSet || f.Name == "since" })
	if r.from != "" && sinceSet {
		return from, to, "", errors.New("give either --since or --from, not both")
	}
	to = now.UTC()
	if r.to != "" {
		if to, err = ParseTime(r.to, now); err != nil {
			return from, to, "", fmt.Errorf("--to %q: %w", r.to, err)
		}
	}
	if r.from != "" {
		if from, err = ParseTime(r.from, now); err != nil {
			return from, to, "", fmt.Errorf("--from %q: %w", r.from, err)
		}
	} else {
		d, err := ParseDuration(r.since)
		if err != nil {
			return from, to, "", fmt.Errorf("--since %q: %w", r.since, err)
		}
		from = to.Add(-d)
	}
	if !from.Before(to) {
		return from, to, "", fmt.Errorf("--from %s is not before --to %s", FormatTime(from), FormatTime(to))
	}
	if r.from == "" && r.to == "" {
		return from, to, "since " + r.since, nil
	}
	return from, to, fmt.Sprintf("between %s and %s", FormatTime(from), FormatTime(to)), nil
}

// days is a flag.Duration's value that also takes a number of days ("1d",
// "1.5d"), so that every duration flag of a command speaks the one time
// grammar; Go's own forms pass through unchanged, and a Go duration never
// ends in d.
type days struct{ flag.Value }

func (d days) Set(s string) error {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if v, err := strconv.ParseFloat(n, 64); err == nil {
			return d.Value.Set(time.Duration(v * float64(24*time.Hour)).String())
		}
	}
	return d.Value.Set(s)
}

// TypeName is the word the usage prints after the flag's name.
func (days) TypeName() string { return "duration" }

// acceptDays lets every flag.Duration of fs take days too (days); the
// time grammar's own flags already do.
func acceptDays(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if _, done := f.Value.(days); done {
			return
		}
		if g, ok := f.Value.(flag.Getter); ok {
			if _, isDur := g.Get().(time.Duration); isDur {
				f.Value = days{f.Value}
			}
		}
	})
}
