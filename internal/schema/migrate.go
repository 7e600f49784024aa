package schema

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/spikehunt/spikehunt/internal/store"
)

// Errors Apply returns before it runs any migration; callers branch on them
// with errors.Is.
var (
	// ErrDrift: an applied migration's checksum differs from the recorded one.
	ErrDrift = errors.New("applied migration changed")
	// ErrUnknownVersion: the database has a version this build does not know.
	ErrUnknownVersion = errors.New("database is newer than this build")
	// ErrOutOfOrder: a pending migration is older than an applied one.
	ErrOutOfOrder = errors.New("pending migration older than an applied one")
)

// MigrationError is a migration that failed part-way. The versions before
// it are recorded and it is not, so a re-run starts again at its first
// statement (every statement is idempotent).
type MigrationError struct {
	Version   int
	Name      string
	Statement int    // 1-based; 0 when recording the version failed
	SQL       string // the failed statement
	Err       error
}

func (e *MigrationError) Error() string {
	at := fmt.Sprintf("statement %d (%s)", e.Statement, firstLine(e.SQL))
	if e.Statement == 0 {
		at = "recording it in schema_migrations"
	}
	return fmt.Sprintf("schema: migration %d %s failed at %s: %s; it is not recorded (earlier versions are): fix the cause and re-run migrate, which resumes at version %d",
		e.Version, e.Name, at, firstLine(e.Err.Error()), e.Version)
}

func (e *MigrationError) Unwrap() error { return e.Err }

// Apply brings the database up to the Default migrations; see ApplyList.
func Apply(ctx context.Context, st store.Store, opts Options) (applied []int, err error) {
	return ApplyList(ctx, st, Default(), opts)
}

// ApplyList runs the migrations of list (templates, as Default returns
// them) that the database has not recorded, oldest first, and returns the
// versions it applied. Before running anything it refuses drift (ErrDrift),
// a database ahead of list (ErrUnknownVersion) and a pending version below
// an applied one (ErrOutOfOrder). A failing statement stops it with a
// *MigrationError. Statements should name tables with {{.Name "t"}} or
// {{.Local "t"}}: a bare name resolves in the store's current database, not
// in Options.Database.
func ApplyList(ctx context.Context, st store.Store, list []Migration, opts Options) (applied []int, err error) {
	if opts.Database == "" {
		if opts.Database, err = currentDatabase(ctx, st); err != nil {
			return nil, err
		}
	}
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := checkList(list); err != nil {
		return nil, err
	}
	rendered, err := renderList(list, opts)
	if err != nil {
		return nil, err
	}
	// A store that already records its migrations is read first, with
	// no DDL: an up-to-date store then needs no user that may change the
	// schema (serve-clickhouse gives DDL to its migrate user only).
	done, err := readApplied(ctx, st, opts)
	if err != nil {
		for _, s := range bootstrap(opts) {
			if err := st.Exec(ctx, s); err != nil {
				return nil, fmt.Errorf("schema: %s: %w", firstLine(s), err)
			}
		}
		if done, err = readApplied(ctx, st, opts); err != nil {
			return nil, err
		}
	}
	if err := checkApplied(list, done, opts.Database); err != nil {
		return nil, err
	}
	for i, m := range rendered {
		if _, ok := done[m.Version]; ok {
			continue
		}
		for j, s := range m.Statements {
			if err := st.Exec(ctx, s); err != nil {
				return applied, &MigrationError{Version: m.Version, Name: m.Name, Statement: j + 1, SQL: s, Err: err}
			}
		}
		if err := st.Exec(ctx, recordStatement(opts, list[i])); err != nil {
			return applied, &MigrationError{Version: m.Version, Name: m.Name, Err: err}
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

// bootstrap creates the database and the applied-versions table.
//
// schema_migrations is ReplacingMergeTree by version, so two migrate runs
// racing each other leave one row per version. In a cluster its Keeper path
// has no {shard}: every server of every shard is a replica of one table, so
// whichever server migrate connects to reads the same history.
func bootstrap(o Options) []string {
	d := dialect{o}
	engine := "ReplacingMergeTree(applied_at)"
	if o.Cluster != "" {
		engine = "ReplicatedReplacingMergeTree('/clickhouse/tables/all-shards/{database}/schema_migrations', '{replica}', applied_at)"
	}
	var stmts []string
	if o.Database != "" {
		stmts = append(stmts, "CREATE DATABASE IF NOT EXISTS "+o.Database+d.OnCluster())
	}
	return append(stmts, `CREATE TABLE IF NOT EXISTS `+d.Name("schema_migrations")+d.OnCluster()+`
(
    version     UInt32,
    name        String,
    checksum    String,
    applied_at  DateTime64(3, 'UTC')
)
ENGINE = `+engine+`
ORDER BY version`)
}

type appliedRow struct{ name, checksum string }

func readApplied(ctx context.Context, st store.Store, o Options) (map[int]appliedRow, error) {
	table := dialect{o}.Name("schema_migrations")
	if o.Cluster != "" {
		// Wait for this replica to have every row another server wrote.
		if err := st.Exec(ctx, "SYSTEM SYNC REPLICA "+table); err != nil {
			return nil, fmt.Errorf("schema: sync %s: %w", table, err)
		}
	}
	rows := map[int]appliedRow{}
	err := st.Query(ctx, "SELECT version, name, checksum FROM "+table+" FINAL", func(b store.Block) error {
		v, ok1 := b.Columns[0].(*proto.ColUInt32)
		n, ok2 := b.Columns[1].(*proto.ColStr)
		c, ok3 := b.Columns[2].(*proto.ColStr)
		if !ok1 || !ok2 || !ok3 {
			return fmt.Errorf("unexpected column types %v", b.Types)
		}
		for i := 0; i < b.Rows; i++ {
			rows[int(v.Row(i))] = appliedRow{n.Row(i), c.Row(i)}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("schema: read %s: %w", table, err)
	}
	return rows, nil
}

func checkApplied(list []Migration, done map[int]appliedRow, database string) error {
	known := map[int]bool{}
	maxApplied := 0
	for v := range done {
		maxApplied = max(maxApplied, v)
	}
	for _, m := range list {
		known[m.Version] = true
		r, ok := done[m.Version]
		if !ok {
			if m.Version < maxApplied {
				return fmt.Errorf("schema: migration %d %s is pending but version %d is already applied: %w; renumber it above %d", m.Version, m.Name, maxApplied, ErrOutOfOrder, maxApplied)
			}
			continue
		}
		if sum := m.Checksum(); sum != r.checksum {
			return fmt.Errorf("schema: migration %d %s was applied with checksum %.12s but now has %.12s: %w; revert the edit and put the change in a new migration", m.Version, m.Name, r.checksum, sum, ErrDrift)
		}
	}
	for _, v := range slices.Sorted(maps.Keys(done)) {
		if !known[v] {
			return fmt.Errorf("schema: database %s has migration %d %s, which this build does not know: %w; run a newer spikehunt migrate", database, v, done[v].name, ErrUnknownVersion)
		}
	}
	return nil
}

func recordStatement(o Options, m Migration) string {
	return fmt.Sprintf("INSERT INTO %s (version, name, checksum, applied_at) SELECT %d, %s, %s, now64(3)",
		dialect{o}.Name("schema_migrations"), m.Version, store.QuoteString(m.Name), store.QuoteString(m.Checksum()))
}

func currentDatabase(ctx context.Context, st store.Store) (string, error) {
	var db string
	err := st.Query(ctx, "SELECT currentDatabase()", func(b store.Block) error {
		if c, ok := b.Columns[0].(*proto.ColStr); ok && b.Rows > 0 {
			db = c.Row(0)
		}
		return nil
	})
	if err == nil && db == "" {
		err = errors.New("no result")
	}
	if err != nil {
		return "", fmt.Errorf("schema: current database: %w", err)
	}
	return db, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		return s[:i]
	}
	return s
}
