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
//	--to T      offsets allowed), or a duration ago (36h: 36 hours before now)
//
// The range is [--from, --to), or the --since before --to; --to defaults
// to now, --since to the command's default. --since and --from are
// exclusive.
const TimeGrammar = "D is 90s, 30m, 36h or 7d; T is RFC 3339 (2026-11-25T18:00:00Z) or a duration ago (36h)"

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

// ParseTime reads a --from or --to: RFC 3339, or a duration (ParseDuration)
// before now.
func ParseTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if d, err := ParseDuration(s); err == nil {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, errors.New("want an RFC 3339 time such as 2026-11-25T18:00:00Z, or a duration ago such as 36h or 7d")
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
		return from, to, "", fmt.Errorf("--from %s is not before --to %s", from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
	}
	if r.from == "" && r.to == "" {
		return from, to, "since " + r.since, nil
	}
	return from, to, fmt.Sprintf("between %s and %s", from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano)), nil
}
