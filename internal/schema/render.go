package schema

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Migration is one schema version. Statements are text/template sources
// over a dialect (the Options plus the helpers below) and run in order; one
// that renders to nothing (a cluster-only Distributed table on a single
// server) is skipped.
type Migration struct {
	Version    int
	Name       string
	Statements []string
}

// Checksum identifies the migration's statements as written, before
// rendering, ignoring whitespace and whole-line comments: changing Options
// is not drift, editing an applied migration is.
func (m Migration) Checksum() string {
	h := sha256.New()
	for _, s := range m.Statements {
		h.Write([]byte(strings.Join(strings.Fields(stripComments(s)), " ")))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

//go:embed migrations/*.sql
var sources embed.FS

var defaultMigrations = mustLoad(sources)

// Default returns spikehunt's migrations, oldest first, as templates. Each
// call returns a fresh copy the caller may change.
func Default() []Migration {
	list := slices.Clone(defaultMigrations)
	for i := range list {
		list[i].Statements = slices.Clone(list[i].Statements)
	}
	return list
}

// Render returns the default migrations rendered for opts: the statements
// Apply runs after creating the database and schema_migrations. Their
// Checksum is not the recorded one, which is taken from the templates
// (Default).
func Render(opts Options) ([]Migration, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return renderList(Default(), opts)
}

func renderList(list []Migration, opts Options) ([]Migration, error) {
	d := dialect{opts}
	out := make([]Migration, 0, len(list))
	for _, m := range list {
		r := Migration{Version: m.Version, Name: m.Name}
		for i, src := range m.Statements {
			t, err := template.New(m.Name).Option("missingkey=error").Parse(src)
			if err != nil {
				return nil, fmt.Errorf("schema: migration %d %s, statement %d: %w", m.Version, m.Name, i+1, err)
			}
			var b strings.Builder
			if err := t.Execute(&b, d); err != nil {
				return nil, fmt.Errorf("schema: migration %d %s, statement %d: %w", m.Version, m.Name, i+1, err)
			}
			if s := strings.TrimSpace(b.String()); s != "" {
				r.Statements = append(r.Statements, s)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// dialect is what a statement template sees: the Options (TTLs as
// {{.RequestsTTLDays}} …) and what differs between one server and a cluster.
type dialect struct{ Options }

// Name qualifies table with the database.
func (d dialect) Name(table string) string {
	if d.Database == "" {
		return table
	}
	return d.Database + "." + table
}

// Local is the table that stores the rows on each server: table itself on a
// single server, <table>_local in a cluster (the Distributed table takes the
// plain name).
func (d dialect) Local(table string) string {
	if d.Cluster == "" {
		return d.Name(table)
	}
	return d.Name(table + "_local")
}

// OnCluster is " ON CLUSTER '<name>'" in a cluster.
func (d dialect) OnCluster() string {
	if d.Cluster == "" {
		return ""
	}
	return " ON CLUSTER " + store.QuoteString(d.Cluster)
}

// Engine renders a MergeTree-family engine with its parameters; in a cluster
// its Replicated form, one Keeper path per shard and table, the replica
// named by each server's {replica} macro.
func (d dialect) Engine(family, table string, params ...string) string {
	if d.Cluster != "" {
		family = "Replicated" + family
		params = append([]string{store.QuoteString("/clickhouse/tables/{shard}/{database}/" + table), "'{replica}'"}, params...)
	}
	if len(params) == 0 {
		return family
	}
	return family + "(" + strings.Join(params, ", ") + ")"
}

// Distributed renders, in a cluster only, the Distributed table under the
// plain name over <table>_local, routing inserts by shardingKey.
func (d dialect) Distributed(table, shardingKey string) string {
	if d.Cluster == "" {
		return ""
	}
	return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s%s AS %s\nENGINE = Distributed(%s, %s, %s, %s)",
		d.Name(table), d.OnCluster(), d.Local(table), store.QuoteString(d.Cluster), d.Database, table+"_local", shardingKey)
}

// Dedup is the table setting that keeps hashes of recent insert blocks, so a
// retried insert (same insert_deduplication_token) is dropped. Replicated
// tables keep them in Keeper, shared by the replicas.
func (d dialect) Dedup() string {
	if d.Cluster == "" {
		return fmt.Sprintf("non_replicated_deduplication_window = %d", d.DedupWindow)
	}
	return fmt.Sprintf("replicated_deduplication_window = %d", d.DedupWindow)
}

var (
	fileName   = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)
	terminator = regexp.MustCompile(`;[ \t]*(?:\n|$)`)
)

func mustLoad(fsys fs.FS) []Migration {
	list, err := load(fsys)
	if err != nil {
		panic(err) // the embedded sources are part of the build; a test loads them
	}
	return list
}

// load reads migrations/NNNN_name.sql in name order.
func load(fsys fs.FS) ([]Migration, error) {
	files, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var list []Migration
	for _, f := range files {
		m := fileName.FindStringSubmatch(path.Base(f))
		if m == nil {
			return nil, fmt.Errorf("schema: %s: name a migration NNNN_name.sql", f)
		}
		v, _ := strconv.Atoi(m[1])
		src, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		list = append(list, Migration{Version: v, Name: m[2], Statements: splitStatements(string(src))})
	}
	return list, checkList(list)
}

// splitStatements drops whole-line comments (they explain the schema to its
// reviewers, not to ClickHouse) and splits at each ';' that ends a line.
func splitStatements(src string) []string {
	var stmts []string
	for _, s := range terminator.Split(stripComments(src), -1) {
		if s = strings.TrimSpace(s); s != "" {
			stmts = append(stmts, s)
		}
	}
	return stmts
}

func stripComments(s string) string {
	lines := strings.Split(s, "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}

// checkList rejects a list Apply could not record faithfully.
func checkList(list []Migration) error {
	prev := 0
	for _, m := range list {
		switch {
		case m.Version < 1:
			return fmt.Errorf("schema: migration %d %s: versions start at 1", m.Version, m.Name)
		case m.Version <= prev:
			return fmt.Errorf("schema: migration %d %s: versions must increase (previous %d)", m.Version, m.Name, prev)
		case m.Version > 1<<31:
			return fmt.Errorf("schema: migration %d %s: version too large", m.Version, m.Name)
		case m.Name == "" || strings.ContainsAny(m.Name, "\n\r"):
			return fmt.Errorf("schema: migration %d: name must be one non-empty line", m.Version)
		case len(m.Statements) == 0:
			return fmt.Errorf("schema: migration %d %s: no statements", m.Version, m.Name)
		}
		prev = m.Version
	}
	return nil
}
