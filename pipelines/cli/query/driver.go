// Package query holds the query commands of spikehunt: spikes, patterns,
// hosts, suspects and captures. They read what the detectors and the
// captures index wrote and answer the question of the thousand spikes
// (docs/field-stories.md) at a glance: is it one machine, or all of them?
//
// Every command runs through one driver (command.run): flags, time range,
// store, query, the empty answer, then a table or JSON. A command supplies
// only its own flags and its load function. Results are decoded from typed
// columns (rows.go), and every WHERE clause is built by one builder
// (where.go).
//
// The demo (pipelines/cli/demo) words its finding with LoadHosts,
// LoadPatterns and the sentences here, so that the demo and the commands
// say the same thing of the same store.
package query

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	spikehunt "github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/pipelines/store"
)

// Now is the clock --since counts back from; tests may replace it.
var Now = time.Now

const defaultSince = "6h"

// command is one query command: what the driver cannot know.
type command struct {
	name, synopsis string
	defaultLimit   int
	// setup adds the command's own flags to fs, after the shared ones, and
	// returns what runs once they are parsed.
	setup func(fs *flag.FlagSet) query
}

// query is one parsed invocation of a command.
type query struct {
	// check rejects a combination of the command's own flags: a sentence
	// for the usage, "" when they are fine. Optional.
	check func() string
	// load reads the answer from the store.
	load func(ctx context.Context, st store.Store, s Scope) (answer, error)
}

// answer is what a query found, in both output forms.
type answer struct {
	rows any // a slice: what -o json writes
	n    int // len(rows); 0 is the empty answer
	// none is the empty answer's sentence.
	none string
	// table writes the table and the lines under it.
	table func(w io.Writer) error
}

// answerOf builds an answer of rows.
func answerOf[T any](rows []T, none string, table func(w io.Writer) error) answer {
	return answer{rows: rows, n: len(rows), none: none, table: table}
}

// run is the driver every query command shares: flags → time range →
// store → query → the empty answer, or a table, or JSON.
func (c command) run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := spikehunt.NewFlags(c.name, c.synopsis, stderr)
	f := addFlags(fs, c.defaultLimit)
	q := c.setup(fs)
	if err := spikehunt.Parse(fs, args); err != nil {
		return err
	}
	s, err := f.resolve(stderr, Now())
	if err != nil {
		return err
	}
	if q.check != nil {
		if msg := q.check(); msg != "" {
			fmt.Fprintln(stderr, msg)
			fs.Usage()
			return spikehunt.ErrUsage
		}
	}
	st, err := openStore(ctx, f.dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	a, err := q.load(ctx, st, s)
	if err != nil {
		return err
	}
	if a.n == 0 {
		return emptyLine(stdout, stderr, s.json, a.none)
	}
	if s.json {
		return writeJSON(stdout, a.rows)
	}
	return a.table(stdout)
}

// openStore opens the store a query reads. A query never creates one: a
// mistyped chdb:// path is an error that says so, and the path is left as
// it was.
func openStore(ctx context.Context, dsn string) (store.Store, error) {
	st, err := store.OpenExisting(ctx, dsn, migrationsTable)
	var no *store.NoStoreError
	if errors.As(err, &no) {
		return nil, fmt.Errorf("%s holds no spikehunt store (database %s has no %s table): run `spikehunt migrate --dsn %s` or `spikehunt demo --dsn %s`",
			no.Dir, no.Database, no.Table, dsn, dsn)
	}
	return st, err
}

// migrationsTable is the table every spikehunt store has from its first
// migration on (pipelines/schema): the mark of a store.
const migrationsTable = "schema_migrations"

// flags are the flags every query command takes.
type flags struct {
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

func addFlags(fs *flag.FlagSet, defaultLimit int) *flags {
	q := &flags{fs: fs}
	fs.StringVar(&q.dsn, "dsn", spikehunt.EnvOr("SPIKEHUNT_DSN", ""), "ClickHouse store: chdb:///dir, clickhouse://…, http(s)://… (env SPIKEHUNT_DSN)")
	fs.StringVar(&q.service, "service", "", "only this service (empty: every service)")
	fs.StringVar(&q.host, "host", "", "only this host")
	fs.StringVar(&q.since, "since", defaultSince, "how far back to look: 90s, 30m, 6h, 7d")
	fs.StringVar(&q.from, "from", "", "start of the range, RFC 3339 (instead of --since)")
	fs.StringVar(&q.to, "to", "", "end of the range, RFC 3339 (default now; needs --from)")
	fs.StringVar(&q.output, "o", "table", "output: table or json")
	fs.IntVar(&q.limit, "limit", defaultLimit, "at most this many rows (0: no limit)")
	return q
}

// Scope is what a query selects: one resolved time range, [From, To), and
// the service and host filters.
type Scope struct {
	Service, Host string
	From, To      time.Time
	// RangeText names the range in messages: "since 6h" or "between … and …".
	RangeText string
	limit     int
	json      bool
}

// resolve checks the parsed flags and resolves the time range against now.
// A mistake is printed with the usage and returned as spikehunt.ErrUsage.
func (q *flags) resolve(stderr io.Writer, now time.Time) (Scope, error) {
	bad := func(format string, a ...any) (Scope, error) {
		fmt.Fprintf(stderr, format+"\n\n", a...)
		q.fs.Usage()
		return Scope{}, spikehunt.ErrUsage
	}
	if q.dsn == "" {
		return bad("--dsn is required (or set SPIKEHUNT_DSN)")
	}
	s := Scope{Service: q.service, Host: q.host, limit: q.limit}
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
		s.From, s.To = from.UTC(), to.UTC()
		s.RangeText = fmt.Sprintf("between %s and %s", s.From.Format(time.RFC3339), s.To.Format(time.RFC3339))
	default:
		d, err := parseSince(q.since)
		if err != nil {
			return bad("--since %q: %v", q.since, err)
		}
		s.To = now.UTC()
		s.From = s.To.Add(-d)
		s.RangeText = "since " + q.since
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

// limitClause is " LIMIT n", or nothing without a limit.
func (s Scope) limitClause() string {
	if s.limit == 0 {
		return ""
	}
	return fmt.Sprintf(" LIMIT %d", s.limit)
}

// describe names the scope for messages: "for service billy on host h1 since 6h".
func (s Scope) describe() string {
	var b strings.Builder
	if s.Service != "" {
		b.WriteString("for service " + s.Service)
	} else {
		b.WriteString("for any service")
	}
	if s.Host != "" {
		b.WriteString(" on host " + s.Host)
	}
	b.WriteString(" " + s.RangeText)
	return b.String()
}

// none is the empty answer's sentence for the scope: "no spikes for …".
func (s Scope) none(what string) string {
	return fmt.Sprintf("no %s %s", what, s.describe())
}

// emptyLine reports an empty result: a sentence for people, an empty array
// for programs (with the sentence on stderr, so a pipe still parses).
func emptyLine(stdout, stderr io.Writer, asJSON bool, line string) error {
	if asJSON {
		fmt.Fprintln(stderr, line)
		_, err := io.WriteString(stdout, "[]\n")
		return err
	}
	_, err := fmt.Fprintln(stdout, line)
	return err
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
