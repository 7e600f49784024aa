package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/defaults"
)

// Embedded is the in-process ClickHouse engine (libchdb) over one data
// directory.
//
// Concurrency: the engine runs one statement per connection at a time, so
// Embedded keeps a small pool of connections and gives each statement one of
// them for its whole life. Statements beyond the pool size wait their turn.
//
// Cancellation: the engine cannot interrupt a running statement. When ctx
// ends, the call returns ctx.Err() at once; the statement itself runs on in
// the background until it finishes (a Query's context deadline is passed to
// the engine as max_execution_time so it stops there), and its connection is
// then replaced, because a cancelled stream spoils the connection it ran on.
type Embedded struct {
	lib      *libchdb
	dir      string
	config   string // the engine's config.xml (engine_config.go)
	external bool   // EmbeddedConfig.ExternalSources
	database string
	pool     chan *chdbConn
	size     int

	closeOnce sync.Once
	wg        sync.WaitGroup // background statements outliving their callers
	// bgMu orders background's wg.Add before Close's wg.Wait: a statement
	// that starts once Close has begun is refused, never added to a
	// WaitGroup being waited on (which panics).
	bgMu   sync.Mutex
	closed bool
}

// errClosed is a statement on a store that Close has begun closing.
var errClosed = errors.New("store: the embedded store is closed")

type chdbConn struct {
	p  unsafe.Pointer // chdb_connection* as chdb_connect returned it; chdb_close_conn takes it
	h  uintptr        // *p: the chdb_connection every statement takes
	db string         // current database (USE) of this connection
	// set lists the settings SET for the current statement; release resets them.
	set []string
}

// The engine is one per process, bound to one data directory.
var engine struct {
	sync.Mutex
	dir      string
	external bool
	conns    int
}

// EmbeddedConfig configures OpenEmbedded.
type EmbeddedConfig struct {
	// Dir is the data directory; created if missing (unless RequireTable).
	Dir string
	// Database is created if missing (unless RequireTable) and made
	// current on every connection. Default "default".
	Database string
	// RequireTable, when set, opens only a store that already holds this
	// table in Database (schema_migrations for a spikehunt store): the
	// check reads the data directory before the engine boots, so a
	// mistyped path creates nothing, neither the directory, the engine's
	// config nor the database. The error wraps ErrNoStore. Leave it empty
	// for whatever writes the schema (migrate, the demo, ingest).
	RequireTable string
	// Connections is the pool size, 1–64. Default 4. Each connection runs one
	// statement at a time.
	Connections int
	// ExternalSources lets statements reach outside the data directory: the
	// table functions and engines file, url, remote, s3, hdfs, mysql,
	// postgresql, sqlite, odbc, jdbc, mongodb, redis, azureBlobStorage and
	// their kin, dictionaries (whose sources do the same), BACKUP, and the
	// settings that name server-side files (format_schema,
	// format_template_row, ...). Off, the engine's own grants refuse them
	// (engine_config.go). Turn it on only where every client of the store
	// may read and write what the process can.
	ExternalSources bool
}

// WithDefaults returns c with an empty Database and zero Connections set
// to their defaults; c itself is not changed.
func (c EmbeddedConfig) WithDefaults() EmbeddedConfig {
	defaults.Fill(&c.Database, "default")
	defaults.Fill(&c.Connections, 4)
	return c
}

// Validate checks c as OpenEmbedded would run it, its zero fields taken as
// their defaults. It does not change c.
func (c EmbeddedConfig) Validate() error {
	if c.Dir == "" {
		return errors.New("embedded store: empty data directory")
	}
	c = c.WithDefaults()
	if !settingName.MatchString(c.Database) {
		return fmt.Errorf("embedded store: invalid database name %q", c.Database)
	}
	if c.Connections < 1 || c.Connections > 64 {
		return fmt.Errorf("embedded store: connections = %d, want 1–64", c.Connections)
	}
	return nil
}

// OpenEmbedded boots (or joins) the process's embedded engine on cfg.Dir.
func OpenEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("embedded store: %w", err)
	}
	if cfg.RequireTable != "" {
		if err := requireTable(dir, cfg.Database, cfg.RequireTable); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded store: create data directory: %w", err)
	}
	lib, err := loadLibchdb()
	if err != nil {
		return nil, err
	}
	config, err := writeEngineConfig(dir, cfg.ExternalSources)
	if err != nil {
		return nil, err
	}
	e := &Embedded{lib: lib, dir: dir, config: config, external: cfg.ExternalSources, size: cfg.Connections,
		database: cfg.Database, pool: make(chan *chdbConn, cfg.Connections)}
	for i := 0; i < cfg.Connections; i++ {
		c, err := e.connect()
		if err != nil {
			e.Close()
			return nil, err
		}
		e.pool <- c
	}
	if cfg.Database != "default" {
		c, err := e.acquire(ctx, "default", nil)
		if err == nil {
			err = e.background(ctx, c, func() error {
				return e.querySync(c, "CREATE DATABASE IF NOT EXISTS "+QuoteIdent(cfg.Database), nil)
			})
		}
		if err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// ErrNoStore is wrapped by OpenEmbedded's error when RequireTable is set and
// the data directory does not hold that table.
var ErrNoStore = errors.New("no such store")

// NoStoreError says which data directory and database lack the table, and
// which other databases of the same directory hold it (Elsewhere, sorted).
type NoStoreError struct {
	Dir, Database, Table string
	Elsewhere            []string
}

func (e *NoStoreError) Error() string {
	return fmt.Sprintf("embedded store: %s holds no table %s.%s", e.Dir, e.Database, e.Table)
}

func (e *NoStoreError) Unwrap() error { return ErrNoStore }

// requireTable checks, without booting the engine, that dir holds table in
// database. The engine keeps a table's definition in
// metadata/<database>/<table>.sql (the Atomic database engine's layout, a
// link into store/), written when the table is created.
func requireTable(dir, database, table string) error {
	if _, err := os.Stat(filepath.Join(dir, "metadata", escapeFileName(database), escapeFileName(table)+".sql")); err != nil {
		return &NoStoreError{Dir: dir, Database: database, Table: table, Elsewhere: DatabasesWithTable(dir, table)}
	}
	return nil
}

// DatabasesWithTable lists, sorted and without booting the engine, the
// databases of the data directory dir that hold table (requireTable's
// layout). A directory that does not exist holds none.
func DatabasesWithTable(dir, table string) []string {
	dbs, err := os.ReadDir(filepath.Join(dir, "metadata"))
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range dbs { // an Atomic database's entry is a link into store/
		if _, err := os.Stat(filepath.Join(dir, "metadata", d.Name(), escapeFileName(table)+".sql")); err == nil {
			if name, ok := unescapeFileName(d.Name()); ok {
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// unescapeFileName undoes escapeFileName.
func unescapeFileName(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), true
}

// escapeFileName is the engine's escaping of a database or table name in a
// file name: letters, digits and '_' stay, every other byte is %XX.
func escapeFileName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func (e *Embedded) connect() (*chdbConn, error) {
	engine.Lock()
	defer engine.Unlock()
	if engine.conns > 0 && engine.dir != e.dir {
		return nil, fmt.Errorf("embedded store: the engine in this process is open on %s; close every store on it before opening %s (one data directory per process)", engine.dir, e.dir)
	}
	// The engine reads its configuration once, when it boots.
	if engine.conns > 0 && engine.external != e.external {
		return nil, fmt.Errorf("embedded store: the engine in this process was booted with external sources %s; close every store on it before opening one with them %s",
			onOff(engine.external), onOff(e.external))
	}
	args := []string{"clickhouse", "--path=" + e.dir, "--config-file=" + e.config}
	var pin runtime.Pinner
	defer pin.Unpin()
	argv := make([]*byte, len(args))
	for i, a := range args {
		b := append([]byte(a), 0)
		pin.Pin(&b[0])
		argv[i] = &b[0]
	}
	p := e.lib.connect(int32(len(args)), unsafe.Pointer(&argv[0]))
	runtime.KeepAlive(argv)
	if p == nil || *(*uintptr)(p) == 0 {
		return nil, fmt.Errorf("embedded store: chdb_connect(%s) failed: is the directory writable and not used by another process?", e.dir)
	}
	engine.dir = e.dir
	engine.external = e.external
	engine.conns++
	return &chdbConn{p: p, h: *(*uintptr)(p), db: "default"}, nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func (e *Embedded) disconnect(c *chdbConn) {
	engine.Lock()
	defer engine.Unlock()
	e.lib.closeConn(c.p)
	engine.conns--
}

// Backend implements Store.
func (e *Embedded) Backend() string { return "embedded" }

// Database is the database statements run in unless they name another.
func (e *Embedded) Database() string { return e.database }

// Dir is the data directory.
func (e *Embedded) Dir() string { return e.dir }

// Close waits for background statements, then closes every connection.
func (e *Embedded) Close() error {
	e.closeOnce.Do(func() {
		e.bgMu.Lock()
		e.closed = true
		e.bgMu.Unlock()
		e.wg.Wait()
		for i := 0; i < e.size; i++ {
			select {
			case c := <-e.pool:
				e.disconnect(c)
			default: // never connected (OpenEmbedded failed part-way)
			}
		}
	})
	return nil
}

// acquire takes a connection from the pool and prepares it for one
// statement: its database, then its settings as SET statements, because a
// SETTINGS clause means something else in DDL. release undoes the settings.
func (e *Embedded) acquire(ctx context.Context, database string, settings []setting) (*chdbConn, error) {
	var c *chdbConn
	select {
	case c = <-e.pool:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if database == "" {
		database = e.database
	}
	if c.db != database {
		if err := e.querySync(c, "USE "+QuoteIdent(database), nil); err != nil {
			e.pool <- c
			return nil, err
		}
		c.db = database
	}
	for _, st := range settings {
		if !settingName.MatchString(st.key) {
			e.release(c)
			return nil, fmt.Errorf("invalid setting name %q", st.key)
		}
		c.set = append(c.set, st.key)
		if err := e.querySync(c, "SET "+st.key+" = "+QuoteString(st.value), nil); err != nil {
			e.release(c)
			return nil, err
		}
	}
	return c, nil
}

// release resets the statement's settings and returns c to the pool.
func (e *Embedded) release(c *chdbConn) {
	for _, k := range c.set {
		// Cannot fail for a setting that was just SET.
		_ = e.querySync(c, "SET "+k+" = DEFAULT", nil)
	}
	c.set = c.set[:0]
	e.pool <- c
}

// querySync runs one statement to completion; the output, if any, goes to w.
func (e *Embedded) querySync(c *chdbConn, query string, w io.Writer) error {
	return e.querySyncFormat(c, query, "TabSeparated", w)
}

func (e *Embedded) querySyncFormat(c *chdbConn, query, format string, w io.Writer) error {
	return e.querySyncParams(c, query, format, nil, w)
}

func (e *Embedded) querySyncParams(c *chdbConn, query, format string, params []QueryParam, w io.Writer) error {
	q := []byte(query)
	res := e.lib.query(c.h, q, format, params)
	runtime.KeepAlive(q)
	defer func() {
		if res != 0 {
			e.lib.destroyResult(res)
		}
	}()
	if err := e.lib.resultErr(res); err != nil {
		return err
	}
	if w != nil {
		if _, err := w.Write(e.lib.resultBytes(res)); err != nil {
			return err
		}
	}
	return nil
}

// begin counts a statement that runs on a goroutine of its own, for Close
// to wait for, or refuses it (and returns c to the pool) once Close has
// begun. Every such goroutine starts through begin: an Add that races
// Close's Wait panics ("WaitGroup is reused before previous Wait has
// returned"), as a streaming read once did when it skipped this check.
func (e *Embedded) begin(c *chdbConn) error {
	e.bgMu.Lock()
	if e.closed {
		e.bgMu.Unlock()
		e.release(c)
		return errClosed
	}
	e.wg.Add(1)
	e.bgMu.Unlock()
	return nil
}

// background runs fn with c on its own goroutine and returns fn's error, or
// ctx.Err() as soon as ctx ends; in that case fn still runs to its end and
// returns c to the pool itself.
func (e *Embedded) background(ctx context.Context, c *chdbConn, fn func() error) error {
	done := make(chan error, 1)
	if err := e.begin(c); err != nil {
		return err
	}
	go func() {
		defer e.wg.Done()
		err := fn()
		e.release(c)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Exec implements Store.
func (e *Embedded) Exec(ctx context.Context, query string, opts ...Option) error {
	c, err := e.acquire(ctx, "", collect(opts).settings)
	if err != nil {
		return err
	}
	return e.background(ctx, c, func() error { return e.querySync(c, query, nil) })
}

// Insert implements Store: the block is encoded in Native format and pushed
// through the engine's streaming-insert API.
func (e *Embedded) Insert(ctx context.Context, table string, cols proto.Input, opts ...Option) error {
	var buf proto.Buffer
	if err := EncodeNative(&buf, cols); err != nil {
		return err
	}
	return e.InsertRaw(ctx, RawStatement{Query: insertInto(table, cols), Settings: collect(opts).settings}, "Native", bytes.NewReader(buf.Buf))
}

// RawStatement is a statement as a ClickHouse client sent it: the HTTP
// interface passes its URL parameters through here.
type RawStatement struct {
	Query    string
	Database string // "" = the store's database
	Settings []setting
	// Params bind the query's {name:Type} placeholders (the HTTP
	// interface's param_name parameters).
	Params []QueryParam
}

// Setting adds a per-statement setting.
func (s *RawStatement) Setting(key, value string) {
	s.Settings = append(s.Settings, setting{key, value})
}

// InsertRaw streams data in the given input format into the INSERT
// statement st.Query (without FORMAT clause or data), reading data to EOF.
func (e *Embedded) InsertRaw(ctx context.Context, st RawStatement, format string, data io.Reader) error {
	c, err := e.acquire(ctx, st.Database, st.Settings)
	if err != nil {
		return err
	}
	return e.background(ctx, c, func() error {
		q := []byte(st.Query)
		s := e.lib.insert(c.h, q, format, st.Params)
		runtime.KeepAlive(q)
		if s == 0 {
			return errors.New("chdb_stream_insert returned no stream")
		}
		defer e.lib.insertDestroy(s)
		if msg := cString(e.lib.insertError(s)); msg != "" {
			return parseException(msg)
		}
		chunk := make([]byte, 1<<20)
		for {
			n, rerr := io.ReadFull(data, chunk)
			if n > 0 {
				if e.lib.insertAppend(s, bytesPtr(chunk[:n]), uintptr(n)) != 0 {
					msg := cString(e.lib.insertError(s))
					return parseException(orDefault(msg, "insert stream refused data"))
				}
			}
			if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
				break
			}
			if rerr != nil {
				e.lib.insertCancel(s)
				return fmt.Errorf("read insert data: %w", rerr)
			}
		}
		runtime.KeepAlive(chunk)
		res := e.lib.insertDone(s)
		defer func() {
			if res != 0 {
				e.lib.destroyResult(res)
			}
		}()
		return e.lib.resultErr(res)
	})
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// Query implements Store.
func (e *Embedded) Query(ctx context.Context, query string, fn func(Block) error, opts ...Option) error {
	o := collect(opts)
	if dl, ok := ctx.Deadline(); ok {
		secs := math.Ceil(time.Until(dl).Seconds())
		o.settings = append(o.settings, setting{"max_execution_time", fmt.Sprint(math.Max(secs, 1))})
	}
	r, err := e.stream(ctx, RawStatement{Query: query, Settings: o.settings}, "Native")
	if err != nil {
		return err
	}
	defer r.Close()
	return DecodeNative(r, fn)
}

// QueryRaw runs st and copies its output, in the given format, to w as the
// engine produces it. A FORMAT clause inside the query wins over format.
func (e *Embedded) QueryRaw(ctx context.Context, st RawStatement, format string, w io.Writer) error {
	r, err := e.stream(ctx, st, format)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(w, r)
	return err
}
