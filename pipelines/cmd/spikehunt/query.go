package main

// The query commands (spikes, patterns, hosts, suspects) read what the
// detectors wrote and answer the question of the thousand spikes (docs/field-stories.md) at a glance: is it one
// machine, or all of them? They share the flags, the time range, the store
// access and the two output forms defined here; each command lives in a
// query_<name>.go of its own.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/store"
)

// queryNow is the clock --since counts back from.
var queryNow = time.Now

const defaultSince = "6h"

// queryFlags are the flags every query command takes.
type queryFlags struct {
	fs      *flag.FlagSet
	dsn     string
	service string
	host    string
	since   string
	from    string
	to      string
	output  string
	limit   int
}

func addQueryFlags(fs *flag.FlagSet, defaultLimit int) *queryFlags {
	q := &queryFlags{fs: fs}
	fs.StringVar(&q.dsn, "dsn", envOr("SPIKEHUNT_DSN", ""), "ClickHouse store: chdb:///dir, clickhouse://…, http(s)://… (env SPIKEHUNT_DSN)")
	fs.StringVar(&q.service, "service", "", "only this service (empty: every service)")
	fs.StringVar(&q.host, "host", "", "only this host")
	fs.StringVar(&q.since, "since", defaultSince, "how far back to look: 90s, 30m, 6h, 7d")
	fs.StringVar(&q.from, "from", "", "start of the range, RFC 3339 (instead of --since)")
	fs.StringVar(&q.to, "to", "", "end of the range, RFC 3339 (default now; needs --from)")
	fs.StringVar(&q.output, "o", "table", "output: table or json")
	fs.IntVar(&q.limit, "limit", defaultLimit, "at most this many rows (0: no limit)")
	return q
}

// queryScope is what the flags select: one resolved time range and filters.
type queryScope struct {
	service, host string
	from, to      time.Time
	// rangeText names the range in messages: "since 6h" or "between … and …".
	rangeText string
	limit     int
	json      bool
}

// resolve checks the parsed flags and resolves the time range against now.
// A mistake is printed with the usage and returned as errUsage.
func (q *queryFlags) resolve(stderr io.Writer, now time.Time) (queryScope, error) {
	bad := func(format string, a ...any) (queryScope, error) {
		fmt.Fprintf(stderr, format+"\n\n", a...)
		q.fs.Usage()
		return queryScope{}, errUsage
	}
	if q.dsn == "" {
		return bad("--dsn is required (or set SPIKEHUNT_DSN)")
	}
	s := queryScope{service: q.service, host: q.host, limit: q.limit}
	switch q.output {
	case "table":
	case "json":
		s.json = true
	default:
		return bad("-o must be table or json, not %q", q.output)
	}
	if q.limit < 0 {
		return bad("--limit must be 0 (no limit) or more")
	}
	sinceSet := false
	q.fs.Visit(func(f *flag.Flag) {
		if f.Name == "since" {
			sinceSet = true
		}
	})
	switch {
	case q.from == "" && q.to != "":
		return bad("--to needs --from")
	case q.from != "" && sinceSet:
		return bad("give either --since or --from/--to, not both")
	case q.from != "":
		from, err := time.Parse(time.RFC3339, q.from)
		if err != nil {
			return bad("--from %q is not an RFC 3339 time such as 2025-06-01T12:00:00Z", q.from)
		}
		to := now
		if q.to != "" {
			if to, err = time.Parse(time.RFC3339, q.to); err != nil {
				return bad("--to %q is not an RFC 3339 time such as 2025-06-01T18:00:00Z", q.to)
			}
		}
		if !from.Before(to) {
			return bad("--from must be before --to")
		}
		s.from, s.to = from.UTC(), to.UTC()
		s.rangeText = fmt.Sprintf("between %s and %s", s.from.Format(time.RFC3339), s.to.Format(time.RFC3339))
	default:
		d, err := parseSince(q.since)
		if err != nil {
			return bad("--since %q: %v", q.since, err)
		}
		s.to = now.UTC()
		s.from = s.to.Add(-d)
		s.rangeText = "since " + q.since
	}
	return s, nil
}

// parseSince is time.ParseDuration plus a day unit ("7d"), which operators
// type and Go does not know.
func parseSince(s string) (time.Duration, error) {
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseFloat(n, 64)
		if err != nil {
			return 0, errors.New("want a duration such as 30m, 6h or 7d")
		}
		d = time.Duration(days * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, errors.New("want a duration such as 30m, 6h or 7d")
		}
	}
	if d <= 0 {
		return 0, errors.New("must be positive")
	}
	return d, nil
}

// timeCond renders "col >= from AND col < to" for a DateTime or DateTime64
// column.
func (s queryScope) timeCond(col string) string {
	return fmt.Sprintf("%s >= fromUnixTimestamp64Milli(%d, 'UTC') AND %s < fromUnixTimestamp64Milli(%d, 'UTC')",
		col, s.from.UnixMilli(), col, s.to.UnixMilli())
}

// where renders the scope's filters on a table with service and host columns
// and the time column timeCol.
func (s queryScope) where(timeCol string) string {
	conds := []string{s.timeCond(timeCol)}
	if s.service != "" {
		conds = append(conds, "service = "+store.QuoteString(s.service))
	}
	if s.host != "" {
		conds = append(conds, "host = "+store.QuoteString(s.host))
	}
	return strings.Join(conds, " AND ")
}

// limitClause is " LIMIT n", or nothing without a limit.
func (s queryScope) limitClause() string {
	if s.limit == 0 {
		return ""
	}
	return fmt.Sprintf(" LIMIT %d", s.limit)
}

// describe names the scope for messages: "for service billy on host h1 since 6h".
func (s queryScope) describe() string {
	var b strings.Builder
	if s.service != "" {
		b.WriteString("for service " + s.service)
	} else {
		b.WriteString("for any service")
	}
	if s.host != "" {
		b.WriteString(" on host " + s.host)
	}
	b.WriteString(" " + s.rangeText)
	return b.String()
}

// empty reports an empty result: a sentence for people, an empty array for
// programs (with the sentence on stderr, so a pipe still parses).
func (s queryScope) empty(stdout, stderr io.Writer, what string) error {
	return emptyLine(stdout, stderr, s.json, fmt.Sprintf("no %s %s", what, s.describe()))
}

// emptyLine reports an empty result with a sentence of the caller's own.
func emptyLine(stdout, stderr io.Writer, asJSON bool, line string) error {
	if asJSON {
		fmt.Fprintln(stderr, line)
		_, err := io.WriteString(stdout, "[]\n")
		return err
	}
	_, err := fmt.Fprintln(stdout, line)
	return err
}

// selectRows runs a query and returns its rows by column name. what names
// the query in errors. A missing table gets a hint: the usual cause is a
// store the schema was never applied to.
func selectRows(ctx context.Context, st store.Store, what, query string) ([]resultRow, error) {
	t, err := store.Select(ctx, st, query)
	if err != nil {
		var ex *store.Exception
		if errors.As(err, &ex) && ex.Code == store.CodeUnknownTable {
			return nil, fmt.Errorf("query %s: %w (has the schema been applied? spikehunt migrate --dsn …)", what, err)
		}
		return nil, fmt.Errorf("query %s: %w", what, err)
	}
	cols := make(map[string]int, len(t.Names))
	for i, n := range t.Names {
		cols[n] = i
	}
	rows := make([]resultRow, len(t.Rows))
	for i, r := range t.Rows {
		rows[i] = resultRow{cols: cols, vals: r}
	}
	return rows, nil
}

// resultRow is one row of store.Select's text rendering, read by column
// name. A value that does not parse panics with errBadColumn: the queries
// are ours, so a mismatch is a bug, and check turns it into an error.
type resultRow struct {
	cols map[string]int
	vals []string
}

type errBadColumn struct{ err error }

func (r resultRow) str(name string) string {
	i, ok := r.cols[name]
	if !ok {
		panic(errBadColumn{fmt.Errorf("no column %q in the result", name)})
	}
	return r.vals[i]
}

// float reads a number; NaN and ±Inf (a quantile of nothing) read as 0, which
// JSON can carry.
func (r resultRow) float(name string) float64 {
	v, err := strconv.ParseFloat(r.str(name), 64)
	if err != nil {
		panic(errBadColumn{fmt.Errorf("column %s: %w", name, err)})
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

func (r resultRow) int(name string) int64 {
	v, err := strconv.ParseInt(r.str(name), 10, 64)
	if err != nil {
		panic(errBadColumn{fmt.Errorf("column %s: %w", name, err)})
	}
	return v
}

func (r resultRow) time(name string) time.Time {
	v, err := time.Parse(time.RFC3339Nano, r.str(name))
	if err != nil {
		panic(errBadColumn{fmt.Errorf("column %s: %w", name, err)})
	}
	return v.UTC()
}

// json decodes a column rendered with toJSONString.
func (r resultRow) json(name string, v any) {
	if err := json.Unmarshal([]byte(r.str(name)), v); err != nil {
		panic(errBadColumn{fmt.Errorf("column %s: %w", name, err)})
	}
}

// decodeRows converts rows with fn, turning a column mismatch into an error.
func decodeRows[T any](what string, rows []resultRow, fn func(resultRow) T) (out []T, err error) {
	defer func() {
		if p := recover(); p != nil {
			bc, ok := p.(errBadColumn)
			if !ok {
				panic(p)
			}
			err = fmt.Errorf("read %s: %w", what, bc.err)
		}
	}()
	out = make([]T, 0, len(rows))
	for _, r := range rows {
		out = append(out, fn(r))
	}
	return out, nil
}

// writeJSON writes v, a slice, as one indented JSON array.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable aligns columns separated by tabs; call Flush when done.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// ms renders microseconds as milliseconds: whole above 100 ms, where a
// decimal is noise, one decimal below.
func ms(us float64) string {
	m := us / 1000
	if m >= 100 {
		return strconv.FormatFloat(m, 'f', 0, 64)
	}
	return strconv.FormatFloat(m, 'f', 1, 64)
}

// roughDuration renders an interval the way people say it: 45s, 17m, 2.5h, 3d.
func roughDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 90*time.Second:
		return fmt.Sprintf("%ds", int(d.Round(time.Second)/time.Second))
	case d < 90*time.Minute:
		return fmt.Sprintf("%dm", int(d.Round(time.Minute)/time.Minute))
	case d < 48*time.Hour:
		return strings.TrimSuffix(strconv.FormatFloat(d.Hours(), 'f', 1, 64), ".0") + "h"
	default:
		return strings.TrimSuffix(strconv.FormatFloat(d.Hours()/24, 'f', 1, 64), ".0") + "d"
	}
}

// windowDuration renders a spike window's length: 1s, 2.5s, 3m10s.
func windowDuration(d time.Duration) string {
	if d < time.Minute {
		return strings.TrimSuffix(strconv.FormatFloat(d.Seconds(), 'f', 1, 64), ".0") + "s"
	}
	return d.Round(time.Second).String()
}

// pct renders a share 0..1 as a whole percentage.
func pct(share float64) string { return fmt.Sprintf("%.0f%%", share*100) }

// share is a/b, 0 when b is 0.
func share(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// utcTime renders a timestamp for tables: seconds, UTC, no zone letters.
func utcTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// suspectLabel names a counter family compactly for tables: "softirq cpu
// 0,2,4,6" for system.cpu.time in mode softirq on those CPUs, "NET_RX
// softirq cpu 2", "network.pause_frames eth0".
func suspectLabel(metric, mode, device string, cpus []int) string {
	var parts []string
	switch metric {
	case "system.cpu.time":
		parts = append(parts, orDash(mode))
	case "spikehunt.softirqs":
		parts = append(parts, mode+" softirq")
	default:
		parts = append(parts, strings.TrimPrefix(strings.TrimPrefix(metric, "spikehunt."), "system."))
		if mode != "" {
			parts = append(parts, mode)
		}
	}
	if device != "" {
		parts = append(parts, device)
	}
	if len(cpus) > 0 {
		parts = append(parts, "cpu "+joinInts(cpus, ","))
	}
	return strings.Join(parts, " ")
}

// suspectPhrase names a counter family in a sentence: "NET_RX softirq",
// "softirq CPU time", "interrupts of eth0-TxRx-0", "pause frames on eth0".
func suspectPhrase(metric, mode, device string) string {
	var s string
	switch metric {
	case "spikehunt.softirqs":
		s = mode + " softirq"
		device = ""
	case "system.cpu.time":
		s = mode + " CPU time"
	case "spikehunt.interrupts":
		s = "interrupts"
		if device != "" {
			return s + " of " + device
		}
	case "spikehunt.network.pause_frames":
		s = "pause frames"
	case "spikehunt.cpu.run_delay":
		s = "run-queue delay"
	case "spikehunt.pressure.stall_time":
		s = strings.TrimSpace(mode + " pressure stall time")
		mode = ""
	default:
		s = strings.NewReplacer(".", " ", "_", " ").Replace(strings.TrimPrefix(strings.TrimPrefix(metric, "spikehunt."), "system."))
		if mode != "" {
			s += " (" + mode + ")"
		}
	}
	if device != "" {
		s += " on " + device
	}
	return strings.TrimSpace(s)
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
}

// cpuList renders CPUs for a sentence: "CPU 3", "CPUs 0, 2, 4 and 6", and
// "12 CPUs" when listing them would not help anyone.
func cpuList(cpus []int) string {
	switch n := len(cpus); {
	case n == 1:
		return fmt.Sprintf("CPU %d", cpus[0])
	case n > 8:
		return fmt.Sprintf("%d CPUs", n)
	default:
		return "CPUs " + joinInts(cpus[:n-1], ", ") + " and " + strconv.Itoa(cpus[n-1])
	}
}

// cpuCount is how often one CPU appeared among a counter family's suspects.
type cpuCount struct {
	cpu, n int
}

// frequentCPUs keeps the CPUs that appeared at least half as often as the
// most frequent one, in ascending order: a family that moves on CPUs 0, 2, 4
// and 6 in every spike and on CPU 5 once is "CPUs 0, 2, 4 and 6".
func frequentCPUs(counts []cpuCount) []int {
	top := 0
	for _, c := range counts {
		if c.cpu >= 0 && c.n > top {
			top = c.n
		}
	}
	var out []int
	for _, c := range counts {
		if c.cpu >= 0 && top > 0 && 2*c.n >= top {
			out = append(out, c.cpu)
		}
	}
	sort.Ints(out)
	return out
}

// plural: "1 host", "3 hosts".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// inList renders strings as a SQL IN list: ('a', 'b').
func inList(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = store.QuoteString(s)
	}
	return "(" + strings.Join(q, ", ") + ")"
}
