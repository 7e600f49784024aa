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
// The demo (pipelines/lab/demo) words its finding with LoadHosts,
// LoadPatterns and the sentences here, so that the demo and the commands
// say the same thing of the same store.
//
// Why one package: every command runs through one driver (the time range,
// the scope, the store, a table or JSON), and the sentences are words over
// the records the loaders read; split, the records and the driver would
// be exported only for one another. Each command is its own file; the
// pattern sentences are in sentences.go and causes.go, beside their tests,
// and the patterns' loaders in patterns_load.go.
package query

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	spikehunt "github.com/spikehunt/spikehunt/pipelines/cli"
)

// Now is the clock --since counts back from; tests may replace it.
var Now = time.Now

// jsonNote is the -o json paragraph of every query command's -h.
const jsonNote = `-o json writes {"rows": [...], "summary": {...}}: the table's rows with every
field (times RFC 3339 UTC, latencies in ms, durations in s), and the summary's
range, filters, found/shown/limit and the lines under the table (docs/reference.md).`

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
	// rows says what interval the range overlaps (rangeRule); columns
	// documents the table's columns (columns.go).
	rows, columns string
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
	rows any // a slice: the rows of -o json
	n    int // len(rows); 0 is the empty answer
	// none is the empty answer's sentence.
	none string
	// table writes the table and the lines under it.
	table func(w io.Writer) error
	// summary is what the lines under the table say, for -o json;
	// nil: the scope's, with found = shown.
	summary func() (Summary, error)
	// spike is the --spike id the answer is of, which replaces the range.
	spike string
}

// answerOf builds an answer of rows.
func answerOf[T any](rows []T, none string, table func(w io.Writer) error) answer {
	return answer{rows: rows, n: len(rows), none: none, table: table}
}

// withSummary sets the answer's summary.
func (a answer) withSummary(f func() (Summary, error)) answer {
	a.summary = f
	return a
}

// Output is what -o json writes: one object, the same keys for every query
// command. The keys are part of the CLI's interface: add keys, never
// rename them (docs/reference.md "JSON output").
type Output struct {
	Rows    any     `json:"rows"` // the table's rows, never null
	Summary Summary `json:"summary"`
}

// Summary is what the lines under a table say, as values.
type Summary struct {
	// From and To are the range, [from, to); null with --spike, which
	// does not apply it.
	From *time.Time `json:"from"`
	To   *time.Time `json:"to"`
	// Service, Host and Spike are the filters ("" when not given).
	Service string `json:"service"`
	Host    string `json:"host"`
	Spike   string `json:"spike,omitempty"`
	// Found is how many rows the query found, Shown how many of them are
	// in rows (at most --limit; Limit 0 is no limit).
	Found int `json:"found"`
	Shown int `json:"shown"`
	Limit int `json:"limit"`
	// Lines are the sentences under the table, or the empty answer's.
	Lines []string `json:"lines"`
	// HostsWithSpikes and HostsReporting (spikes): the windows were on
	// HostsWithSpikes of the HostsReporting hosts that reported latency
	// in the range ("6 spike windows on 3 of 5 hosts").
	HostsWithSpikes *int `json:"hosts_with_spikes,omitempty"`
	HostsReporting  *int `json:"hosts_reporting,omitempty"`
	// Services (hosts): per service, how many of its hosts had spikes
	// ("300 of 300 hosts had spikes").
	Services []ServiceSummary `json:"services,omitempty"`
	// Captures (captures): hosts, spike windows covered, lossy traces.
	Captures *CaptureCounts `json:"captures,omitempty"`
}

// ServiceSummary is one service's line under the hosts table.
type ServiceSummary struct {
	Service         string  `json:"service"`
	Hosts           int     `json:"hosts"`
	HostsWithSpikes int     `json:"hosts_with_spikes"`
	MedianSpikes    float64 `json:"median_spikes_per_affected_host"`
}

// CaptureCounts is the line under the captures table, as values.
type CaptureCounts struct {
	Hosts          int `json:"hosts"`
	SpikeWindows   int `json:"spike_windows"`
	WithLostEvents int `json:"with_lost_events"`
}

// bySpike marks a summary of --spike id: no range.
func (m *Summary) bySpike(id string) {
	if id != "" {
		m.From, m.To, m.Spike = nil, nil, id
	}
}

// summary is the scope's part of a Summary.
func (s Scope) summary(found, shown int, lines ...string) Summary {
	from, to := s.From, s.To
	if lines == nil {
		lines = []string{}
	}
	return Summary{From: &from, To: &to, Service: s.Service, Host: s.Host, Found: found, Shown: shown, Limit: s.limit, Lines: lines}
}

// run is the driver every query command shares: flags → time range →
// store → query → the empty answer, or a table, or JSON.
func (c command) run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := spikehunt.NewFlags(c.name, c.synopsis+"\n\n"+rangeRule(c.rows)+"\n\n"+c.columns+"\n\n"+jsonNote, stderr)
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
			return spikehunt.ErrUsage
		}
	}
	st, err := OpenStore(ctx, f.dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	a, err := q.load(ctx, st, s)
	if err != nil {
		return err
	}
	if a.n == 0 {
		// An empty answer from a store that holds no rows at all is not
		// "no spikes in this range": it is the wrong store.
		if err := emptyStore(ctx, st, f.dsn); err != nil {
			return err
		}
	}
	if !s.json {
		if a.n == 0 {
			_, err := fmt.Fprintln(stdout, a.none)
			return err
		}
		return a.table(stdout)
	}
	sum := s.summary(a.n, a.n)
	if a.n == 0 {
		sum.bySpike(a.spike)
		// The sentence on stderr too, so that a pipe still parses.
		fmt.Fprintln(stderr, a.none)
		sum.Lines = []string{a.none}
		return writeJSON(stdout, Output{Rows: []struct{}{}, Summary: sum})
	}
	if a.summary != nil {
		if sum, err = a.summary(); err != nil {
			return err
		}
	}
	sum.bySpike(a.spike)
	return writeJSON(stdout, Output{Rows: a.rows, Summary: sum})
}

// OpenStore opens the store a query reads. A query never creates one: a
// mistyped chdb:// path is an error that says so, and the path is left as
// it was. When the database the DSN names holds no store but another
// database of the same directory does, the error names the DSN to use
// instead, and never suggests a migration that would make an empty store.
func OpenStore(ctx context.Context, dsn string) (store.Store, error) {
	st, err := store.OpenExisting(ctx, dsn, migrationsTable)
	var no *store.NoStoreError
	if errors.As(err, &no) {
		if len(no.Elsewhere) > 0 {
			return nil, fmt.Errorf("%s has no spikehunt store in database %s; %s", no.Dir, no.Database, elsewhere(dsn, no.Elsewhere))
		}
		return nil, fmt.Errorf("%s holds no spikehunt store (database %s has no %s table): make one with spikehunt migrate --dsn %s, or spikehunt demo --dsn %s",
			no.Dir, no.Database, no.Table, shellQuote(dsn), shellQuote(dsn))
	}
	return st, err
}

// elsewhere is the advice to use another database of the same data
// directory: "this store has spikehunt data in database demo: use --dsn
// 'chdb://dir?database=demo'".
func elsewhere(dsn string, dbs []string) string {
	noun := "database"
	if len(dbs) > 1 {
		noun = "databases"
	}
	return fmt.Sprintf("this store has spikehunt data in %s %s: use --dsn %s", noun, strings.Join(dbs, ", "), shellQuote(withDatabase(dsn, dbs[0])))
}

// withDatabase is the chdb:// DSN dsn with its database parameter set to
// db, its other parameters kept.
func withDatabase(dsn, db string) string {
	base, rawQuery, _ := strings.Cut(dsn, "?")
	params, err := url.ParseQuery(rawQuery)
	if err != nil {
		params = url.Values{}
	}
	params.Set("database", db)
	// database first, as the README writes it.
	out := base + "?database=" + url.QueryEscape(db)
	params.Del("database")
	if rest := params.Encode(); rest != "" {
		out += "&" + rest
	}
	return out
}

// shellQuote quotes s for a POSIX shell (and zsh, where an unquoted ? is a
// glob): 'chdb:///x?database=demo'.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// emptyStore returns an error when the store's database has tables with
// no rows in any of them (a store that was migrated and never loaded), and
// nil when it has rows or cannot tell (tables whose engine does not count
// its rows, such as a cluster's Distributed tables).
func emptyStore(ctx context.Context, st store.Store, dsn string) error {
	type counts struct{ tables, rows uint64 }
	c, err := readRows(ctx, st, "system.tables", `SELECT countIf(engine LIKE '%MergeTree%') AS tables,
		sumIf(ifNull(total_rows, 0), engine LIKE '%MergeTree%') AS rows
	FROM system.tables WHERE database = currentDatabase() AND name != '`+migrationsTable+`'`, func(c *columns) func(int) counts {
		tables, rows := col[uint64](c, "tables"), col[uint64](c, "rows")
		return func(i int) counts { return counts{tables.Row(i), rows.Row(i)} }
	})
	if err != nil || len(c) == 0 || c[0].tables == 0 || c[0].rows > 0 {
		return err
	}
	where := "this spikehunt store"
	advice := "load it (spikehunt ingest, spikehunt sim or spikehunt demo), then run spikehunt detect"
	if e, ok := st.(interface{ Dir() string }); ok {
		db := "default"
		if d, ok := st.(interface{ Database() string }); ok {
			db = d.Database()
		}
		where = fmt.Sprintf("database %s of %s", db, e.Dir())
		var others []string
		for _, o := range store.DatabasesWithTable(e.Dir(), migrationsTable) {
			if o != db {
				others = append(others, o)
			}
		}
		if len(others) > 0 {
			advice = elsewhere(dsn, others)
		}
	}
	return fmt.Errorf("%s is a spikehunt store with no rows in any table: nothing was ingested or detected there; %s", where, advice)
}

// migrationsTable is the table every spikehunt store has from its first
// migration on (internal/schema): the mark of a store.
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
	fs.StringVar(&q.output, "o", "table", `output: table (or text, as captures explain calls it), or json: {"rows": [...], "summary": {...}} (docs/reference.md "JSON output")`)
	fs.IntVar(&q.limit, "limit", DefaultLimit, "show at most this many rows (0: all); the summary counts every row found")
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
// A mistake is printed in one line and returned as spikehunt.ErrUsage.
func (q *flags) resolve(stderr io.Writer, now time.Time) (Scope, error) {
	bad := func(format string, a ...any) (Scope, error) {
		fmt.Fprintf(stderr, format+"\n", a...)
		return Scope{}, spikehunt.ErrUsage
	}
	if q.dsn == "" {
		return bad("--dsn is required (or set SPIKEHUNT_DSN)")
	}
	s := Scope{Service: q.service, Host: q.host, limit: q.limit}
	switch q.output {
	case "table", "text":
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

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable aligns columns separated by tabs; call Flush when done.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}
