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
	"strings"
	"text/tabwriter"
	"time"

	spikehunt "github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/pipelines/store"
)

// Now is the clock --since counts back from; tests may replace it.
var Now = time.Now

// DefaultSince and DefaultLimit are every query command's defaults: the
// last six hours, and at most 50 rows shown (a screenful; the summary under
// a table, and in JSON, still counts every row found).
const (
	DefaultSince = "6h"
	DefaultLimit = 50
)

// command is one query command: what the driver cannot know.
type command struct {
	name, synopsis string
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
	f := addFlags(fs)
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
	rng     *spikehunt.TimeRange
	output  string
	limit   int
}

func addFlags(fs *flag.FlagSet) *flags {
	q := &flags{fs: fs}
	fs.StringVar(&q.dsn, "dsn", spikehunt.EnvOr("SPIKEHUNT_DSN", ""), "the store: chdb:///dir (embedded), clickhouse://host:9000/db, http(s)://host:8123/db (env SPIKEHUNT_DSN); a query never creates one")
	fs.StringVar(&q.service, "service", "", "only this service (empty: every service)")
	fs.StringVar(&q.host, "host", "", "only this host")
	q.rng = spikehunt.AddTimeRange(fs, DefaultSince)
	fs.StringVar(&q.output, "o", "table", `output: table, or json: {"rows": [...], "summary": {...}} (README "JSON output")`)
	fs.IntVar(&q.limit, "limit", DefaultLimit, "show at most this many rows, the newest (0: all); the summary counts every row found")
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
	var err error
	if s.From, s.To, s.RangeText, err = q.rng.Resolve(now); err != nil {
		return bad("%v", err)
	}
	return s, nil
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
