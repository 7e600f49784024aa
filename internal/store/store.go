// Package store is spikehunt's one ClickHouse interface: DDL, columnar batch
// inserts, and streaming reads into Go values, over two backends.
//
//   - embedded (chdb:///path/to/dir): the real ClickHouse engine in-process,
//     libchdb.so loaded at run time. Its data directory survives restarts.
//   - server (clickhouse://host:9000/db, http(s)://host:8123/db): a ClickHouse
//     server over the native protocol (ch-go) or the HTTP interface.
//
// All three move data as ClickHouse Native blocks (ch-go proto columns), so
// an insert and a read have one code path whatever the backend.
//
// Lifecycle: Open returns a Store that must be closed. The embedded engine
// is one per process and bound to one data directory: a second Open of a
// different directory in the same process fails until every Store of the
// first one is closed. Closing the last embedded Store shuts the engine down;
// re-opening boots it again (about a second), so keep one open.
package store

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/ClickHouse/ch-go/proto"
)

// Store is a ClickHouse database. All methods are safe for concurrent use.
type Store interface {
	// Exec runs a statement that returns no rows: DDL, INSERT … SELECT, ALTER.
	Exec(ctx context.Context, query string, opts ...Option) error
	// Insert appends one columnar block to table. Every column must hold the
	// same number of rows. The caller keeps ownership of cols: they are fully
	// encoded before Insert returns, so the caller may Reset and reuse them.
	Insert(ctx context.Context, table string, cols proto.Input, opts ...Option) error
	// Query runs a SELECT and calls fn for each result block, in order. The
	// block's columns are valid only during the call: copy what must outlive
	// it. An error from fn stops the query and is returned.
	Query(ctx context.Context, query string, fn func(Block) error, opts ...Option) error
	// Backend names the backend: "embedded", "native" or "http".
	Backend() string
	// Close releases the connection(s).
	Close() error
}

// Block is one result block: parallel names, types and columns.
type Block struct {
	Names   []string
	Types   []string
	Columns []proto.ColResult
	Rows    int
}

// Col returns the column named name, or nil.
func (b Block) Col(name string) proto.ColResult {
	for i, n := range b.Names {
		if n == name {
			return b.Columns[i]
		}
	}
	return nil
}

// Option adjusts one statement.
type Option func(*stmtOptions)

type stmtOptions struct {
	settings []setting
	queryID  string
}

type setting struct{ key, value string }

// WithSetting sets a ClickHouse setting for this statement only, e.g.
// WithSetting("insert_deduplication_token", tok).
func WithSetting(key, value string) Option {
	return func(o *stmtOptions) { o.settings = append(o.settings, setting{key, value}) }
}

// WithQueryID names the statement (system.query_log, KILL QUERY) on the
// server backends; the embedded engine has no query_id and ignores it.
func WithQueryID(id string) Option { return func(o *stmtOptions) { o.queryID = id } }

func collect(opts []Option) stmtOptions {
	var o stmtOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// insertInto renders "INSERT INTO table (`c1`, `c2`)" without FORMAT or data.
// table is taken as written (it may be db.table).
func insertInto(table string, cols proto.Input) string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(table)
	b.WriteString(" (")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(QuoteIdent(c.Name))
	}
	b.WriteString(")")
	return b.String()
}

// QuoteString renders s as a ClickHouse string literal.
func QuoteString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return "'" + r.Replace(s) + "'"
}

// QuoteIdent renders name as a ClickHouse identifier.
func QuoteIdent(name string) string {
	return "`" + strings.NewReplacer("\\", "\\\\", "`", "\\`").Replace(name) + "`"
}

// Exception is an error reported by ClickHouse itself.
type Exception struct {
	Code    int    // ClickHouse error code, e.g. 60 for UNKNOWN_TABLE; 0 if unknown
	Name    string // e.g. "UNKNOWN_TABLE"
	Message string // the full text ClickHouse returned
	// HTTPStatus is the HTTP interface's status code (0 on the native
	// protocol).
	HTTPStatus int
}

func (e *Exception) Error() string { return firstLine(e.Message) }

// Well-known ClickHouse error codes callers branch on.
const (
	CodeSyntaxError      = 62
	CodeUnknownSetting   = 115
	CodeUnknownTable     = 60
	CodeUnknownDatabase  = 81
	CodeTimeoutExceeded  = 159
	CodeQueryWasCanceled = 394
	CodeAuthFailed       = 516
)

// IsCode reports whether err is a ClickHouse exception with the given code.
func IsCode(err error, code int) bool {
	var e *Exception
	return errors.As(err, &e) && e.Code == code
}

var (
	exceptionCode = regexp.MustCompile(`Code: (\d+)`)
	exceptionName = regexp.MustCompile(`\(([A-Z][A-Z0-9_]+)\)`)
)

func parseException(msg string) *Exception {
	e := &Exception{Message: strings.TrimSpace(msg)}
	if m := exceptionCode.FindStringSubmatch(msg); m != nil {
		e.Code, _ = strconv.Atoi(m[1])
	}
	if m := exceptionName.FindStringSubmatch(msg); m != nil {
		e.Name = m[1]
	}
	return e
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
