// Package chhttp serves the ClickHouse HTTP interface over the embedded
// engine, so that Grafana, clickhouse-go and any other ClickHouse client can
// open a store that lives inside a spikehunt process.
//
// What it implements of the interface: the query in the `query` parameter or
// the body (or both, concatenated), or in a multipart/form-data body's
// `query` field, `default_format` and a FORMAT clause, `database`,
// `query_id`, settings as URL parameters, query parameters ({name:Type}
// placeholders bound from `param_name` URL parameters or form fields, by
// the engine: params.go), INSERT with its data in the body in any input
// format (Native included), HTTP compression of request and response
// bodies (gzip, deflate, zstd, lz4: encoding.go), ClickHouse's compressed
// blocks (`decompress=1` request bodies, `compress=1` responses:
// blocks.go), errors the way ClickHouse reports them (X-ClickHouse-Exception-Code
// and the message in the body), `/ping`, and basic, header and
// URL-parameter authentication of a read-write and a read-only user. Every
// statement is bounded by max_execution_time and passes the gate (gate.go)
// first.
//
// What it does not: sessions (`session_id` is accepted and ignored: every
// statement starts from the store's defaults, and SET, USE and temporary
// tables are refused), external tables (form file parts), brotli, xz,
// bzip2 and snappy bodies. Each of those is answered NOT_IMPLEMENTED
// (code 48), never read as something else.
//
// Native output and client_protocol_version: the engine writes Native at
// protocol revision 0. A client that sends client_protocol_version (as
// clickhouse-go does) expects block info and per-column serialization flags,
// so the handler re-encodes each block at the client's revision.
package chhttp

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/ch-go/compress"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Engine is what the handler needs of a store: the embedded backend.
type Engine interface {
	QueryRaw(ctx context.Context, st store.RawStatement, format string, w io.Writer) error
	InsertRaw(ctx context.Context, st store.RawStatement, format string, data io.Reader) error
}

// Handler is an http.Handler speaking the ClickHouse HTTP interface.
type Handler struct {
	pools      Pools
	database   string
	cfg        Config
	refused    *prometheus.CounterVec
	compressed *prometheus.CounterVec
	killed     prometheus.Counter
	defaults   settingDefaults
	seq        atomic.Uint64
	// watches are the pools' calls in flight, for Healthz: read-only,
	// ingest, migrate, control.
	watches [4]*poolWatch
}

// Pools are the engine's connections, one pool per role, so that one
// role's statements cannot starve another's, and Control, for the
// handler's own statements (KILL QUERY of a statement whose client has
// left). They may all be one store (New).
type Pools struct {
	ReadOnly, Ingest, Migrate, Control Engine
}

func (p Pools) of(r Role) Engine {
	switch r {
	case RoleReadOnly:
		return p.ReadOnly
	case RoleIngest:
		return p.Ingest
	}
	return p.Migrate
}

// New returns a handler over eng for every role; zero fields of cfg take
// DefaultConfig's values. Check cfg with Validate first.
func New(eng Engine, cfg Config) *Handler {
	return NewPools(Pools{eng, eng, eng, eng}, cfg)
}

// NewPools returns a handler with a pool of the engine's connections for
// each role.
func NewPools(p Pools, cfg Config) *Handler {
	db := "default"
	if d, ok := p.Control.(interface{ Database() string }); ok {
		db = d.Database()
	}
	var watches [4]*poolWatch
	for i, e := range []*Engine{&p.ReadOnly, &p.Ingest, &p.Migrate, &p.Control} {
		watches[i] = &poolWatch{name: [...]string{"read-only", "ingest", "migrate", "control"}[i], calls: map[uint64]time.Time{}}
		*e = watched{*e, watches[i]}
	}
	return &Handler{pools: p, watches: watches, database: db, cfg: cfg.withDefaults(), refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spikehunt_chhttp_refused_total",
		Help: "Statements the gate refused, by reason: into_outfile, from_infile, statement, role, table_function, table_engine, function, format, setting, system_table, database, session_statement, insert_with_semicolon, unparsable (several statements or a syntax error).",
	}, []string{"reason"}), compressed: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spikehunt_chhttp_compressed_bodies_total",
		Help: "Compressed request and response bodies, by direction (request, response) and format: an HTTP Content-Encoding (gzip, deflate, zstd, lz4) or ClickHouse's compressed blocks (clickhouse_blocks: decompress=1 requests, compress=1 responses).",
	}, []string{"direction", "format"}), killed: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spikehunt_chhttp_abandoned_queries_killed_total",
		Help: "Statements killed because their client left before they ended.",
	})}
}

// Register adds the handler's metrics to reg.
func (h *Handler) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{h.refused, h.compressed, h.killed} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// refuse answers a statement the gate turned away and counts it.
func (h *Handler) refuse(w http.ResponseWriter, rf responseFormat, ref *refusal) {
	if ref.reason != "" {
		h.refused.WithLabelValues(ref.reason).Inc()
	}
	writeErrorAs(w, rf, ref.status, ref.err)
}

// URL parameters that are part of the interface rather than settings.
var notSettings = map[string]bool{
	"query": true, "database": true, "default_format": true, "user": true, "password": true,
	"query_id": true, "session_id": true, "session_timeout": true, "session_check": true,
	"compress": true, "decompress": true, "client_protocol_version": true, "buffer_size": true,
	"wait_end_of_query": true, "enable_http_compression": true, "http_zlib_compression_level": true,
	"network_compression_method": true,
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/ping", "/replicas_status":
		io.WriteString(w, "Ok.\n")
		return
	case "/", "/query":
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		writeError(w, http.StatusMethodNotAllowed, &store.Exception{Code: 1, Message: "Code: 1. DB::Exception: only GET and POST are supported. (UNSUPPORTED_METHOD)"})
		return
	}
	role, ok := h.authorize(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Basic realm="spikehunt"`)
		writeError(w, http.StatusUnauthorized, &store.Exception{Code: store.CodeAuthFailed,
			Message: "Code: 516. DB::Exception: Authentication failed: password is incorrect, or there is no user with such name. (AUTHENTICATION_FAILED)"})
		return
	}
	authenticated(r)
	p := r.URL.Query()
	rf, err := h.responseFormat(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	decoded, err := requestDecoder(r.Body, r.Header.Get("Content-Encoding"), h.cfg.MaxCompressedBlockBytes)
	if err != nil {
		writeErrorAs(w, rf, http.StatusBadRequest, err)
		return
	}
	defer decoded.Close()
	body := io.Reader(bodyReader{decoded, r.Header.Get("Content-Encoding")})
	if e := canonicalEncoding(r.Header.Get("Content-Encoding")); e != "" {
		h.compressed.WithLabelValues("request", e).Inc()
	}
	if p.Get("decompress") == "1" {
		body = newBlockReader(body, h.cfg.MaxCompressedBlockBytes)
		h.compressed.WithLabelValues("request", "clickhouse_blocks").Inc()
	}
	params, err := urlParams(p)
	if err != nil {
		writeErrorAs(w, rf, http.StatusBadRequest, err)
		return
	}
	// The database and the default format may come as headers too
	// (client-v2 sends them so); a URL parameter wins.
	database := p.Get("database")
	if database == "" {
		database = r.Header.Get("X-ClickHouse-Database")
	}
	st := store.RawStatement{Query: p.Get("query"), Database: database, Params: params}
	if boundary, ok := isMultipart(r.Header.Get("Content-Type")); ok {
		f, err := readForm(body, boundary, h.cfg.MaxQueryBytes)
		if err != nil {
			writeErrorAs(w, rf, statusOf(err), err)
			return
		}
		if f.query != "" {
			st.Query = joinQuery(st.Query, f.query)
		}
		st.Params = mergeParams(st.Params, f.params)
		body = http.NoBody
	}
	if database != "" && database != h.database {
		writeErrorAs(w, rf, http.StatusForbidden, exception(81, fmt.Sprintf("serve-clickhouse serves the database %s only, not %s", h.database, database), "UNKNOWN_DATABASE"))
		return
	}
	st.Database = h.database
	eng := h.pools.of(role)
	maxExec := h.cfg.MaxExecutionTime
	for k, vs := range p {
		if strings.HasPrefix(k, "param_") || notSettings[k] || len(vs) == 0 {
			continue
		}
		v := vs[len(vs)-1]
		if k == "max_execution_time" {
			// Lowered, never lifted: a larger value or none (0) is the cap,
			// as Grafana's query timeout may well exceed it.
			if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 && f < maxExec.Seconds() {
				maxExec = time.Duration(f * float64(time.Second))
			}
			continue
		}
		if ref := h.checkSetting(r.Context(), eng, role, k, v); ref != nil {
			h.refuse(w, rf, ref)
			return
		}
		if clientSettings[k] {
			st.Setting(k, v)
		}
	}
	// Last, so that no setting before them can undo them: the role's
	// constants and the execution cap. A SETTINGS clause cannot change them
	// either: the gate admits one only for clientSettings.
	for _, f := range h.forced(role) {
		if f[0] == "max_execution_time" {
			f[1] = strconv.FormatFloat(math.Ceil(maxExec.Seconds()), 'f', 0, 64)
		}
		st.Setting(f[0], f[1])
	}
	queryID := p.Get("query_id")
	if queryID != "" {
		w.Header().Set("X-ClickHouse-Query-Id", queryID)
	}
	w.Header().Set("X-ClickHouse-Server-Display-Name", "spikehunt-embedded")

	// An INSERT at the head of the body takes the rest as its data, as
	// clickhouse-connect sends it (statement, newline, Native blocks).
	if st.Query == "" {
		br := bufio.NewReaderSize(body, insertHeadBytes)
		head, skip, err := bodyInsertHead(br)
		if err != nil {
			writeErrorAs(w, rf, statusOf(err), err)
			return
		}
		if head != "" {
			br.Discard(skip)
			st.Query = head
		}
		body = br
	}
	// An INSERT named in the URL takes the body as its data.
	if st.Query != "" {
		if ins, format, ok := splitInsert(st.Query); ok {
			if _, ref := h.admit(r.Context(), eng, st.Query, role, st.Params); ref != nil {
				h.refuse(w, rf, ref)
				return
			}
			st.Query = ins
			if err := h.run(r.Context(), func(ctx context.Context, st store.RawStatement) error { return eng.InsertRaw(ctx, st, format, body) }, st); err != nil {
				writeErrorAs(w, rf, statusOf(err), err)
				return
			}
			w.Header().Set("X-ClickHouse-Summary", "{}")
			return
		}
	}
	rest, err := io.ReadAll(io.LimitReader(body, h.cfg.MaxQueryBytes+1))
	if err != nil {
		writeErrorAs(w, rf, http.StatusBadRequest, err)
		return
	}
	if int64(len(rest)) > h.cfg.MaxQueryBytes {
		writeErrorAs(w, rf, http.StatusRequestEntityTooLarge, exception(62, fmt.Sprintf("query is longer than %d bytes: send data with the INSERT in the query parameter and the data in the body", h.cfg.MaxQueryBytes), "SYNTAX_ERROR"))
		return
	}
	st.Query = joinQuery(st.Query, string(rest))
	if strings.TrimSpace(st.Query) == "" {
		writeErrorAs(w, rf, http.StatusBadRequest, exception(62, "empty query", "SYNTAX_ERROR"))
		return
	}
	adm, ref := h.admit(r.Context(), eng, st.Query, role, st.Params)
	if ref != nil {
		h.refuse(w, rf, ref)
		return
	}
	if adm.kind == "InsertQuery" && strings.Contains(strings.TrimRight(st.Query, " \t\r\n;"), ";") {
		// The inline data is not what the parser printed: a ';' in it
		// could start a second statement.
		h.refuse(w, rf, refuse("insert_with_semicolon", 62, "SYNTAX_ERROR", "an INSERT with its data in the query text must not contain ';' (a second statement could follow it): put the INSERT … FORMAT in the query parameter and the data in the body"))
		return
	}
	format := p.Get("default_format")
	if format == "" {
		format = r.Header.Get("X-ClickHouse-Format")
	}
	if format == "" {
		format = "TabSeparated"
	}
	if adm.format != "" {
		format = adm.format
	} else if !outputFormats[format] {
		h.refuse(w, rf, denied("format", fmt.Sprintf("the output format %s is refused: ask for Native, RowBinary, TSV, CSV, JSON or the like", format)))
		return
	}
	revision, _ := strconv.Atoi(p.Get("client_protocol_version"))
	h.respond(w, r, eng, st, format, revision, rf)
}

// respond runs st and streams its output. The status line waits for the
// first bytes, so that an error the engine reports up front gets a 500.
func (h *Handler) respond(w http.ResponseWriter, r *http.Request, eng Engine, st store.RawStatement, format string, revision int, rf responseFormat) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := h.run(r.Context(), func(ctx context.Context, st store.RawStatement) error {
			if strings.EqualFold(format, "Native") && revision > 0 {
				return h.nativeAtRevision(ctx, eng, st, revision, pw)
			}
			return eng.QueryRaw(ctx, st, format, pw)
		}, st)
		pw.CloseWithError(err)
		done <- err
	}()
	br := bufio.NewReaderSize(pr, 64<<10)
	if _, err := br.Peek(1); err != nil && err != io.EOF {
		pr.CloseWithError(err)
		writeErrorAs(w, rf, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", contentType(format))
	w.Header().Set("X-ClickHouse-Format", format)
	out, closeOut := rf.wrap(w)
	defer closeOut()
	if rf.encoding != "" {
		h.compressed.WithLabelValues("response", rf.encoding).Inc()
	}
	if rf.blocks {
		h.compressed.WithLabelValues("response", "clickhouse_blocks").Inc()
	}
	if _, err := io.Copy(out, br); err != nil {
		// Headers are gone: report in-band, as ClickHouse does, and log.
		fmt.Fprintf(out, "\n%s\n", errorText(err))
		h.cfg.Logger.Warn("query failed mid-stream", "err", err)
		pr.CloseWithError(err)
	}
	<-done
}

// authorize names the request's role: ok when its user is one of the
// configured users. With no user configured (loopback only), every request
// is the ingest's: it reads and inserts, and never changes the schema.
func (h *Handler) authorize(r *http.Request) (Role, bool) {
	if !h.cfg.AuthRequired() {
		return RoleIngest, true
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		user, pass = r.Header.Get("X-ClickHouse-User"), r.Header.Get("X-ClickHouse-Key")
	}
	if user == "" {
		q := r.URL.Query()
		user, pass = q.Get("user"), q.Get("password")
	}
	// Every comparison is made, so the time taken names no user.
	rw := h.cfg.User != "" && matches(user, pass, h.cfg.User, h.cfg.Password)
	ro := h.cfg.ReadOnlyUser != "" && matches(user, pass, h.cfg.ReadOnlyUser, h.cfg.ReadOnlyPassword)
	mg := h.cfg.MigrateUser != "" && matches(user, pass, h.cfg.MigrateUser, h.cfg.MigratePassword)
	switch {
	case mg:
		return RoleMigrate, true
	case rw:
		return RoleIngest, true
	case ro:
		return RoleReadOnly, true
	}
	return 0, false
}

func matches(user, pass, wantUser, wantPass string) bool {
	return subtle.ConstantTimeCompare([]byte(user), []byte(wantUser))&
		subtle.ConstantTimeCompare([]byte(pass), []byte(wantPass)) == 1
}

var (
	insertFormat = regexp.MustCompile(`(?is)^\s*(INSERT\s+INTO\s+.*?)\s+FORMAT\s+([A-Za-z0-9_]+)\s*;?\s*$`)
	formatClause = regexp.MustCompile(`(?i)\bFORMAT\s+([A-Za-z0-9_]+)(\s+SETTINGS\s+.*)?\s*;?\s*$`)
)

// insertHeadBytes bounds the INSERT … FORMAT statement at the head of a
// body that carries its data after it.
const insertHeadBytes = 64 << 10

var (
	identifier = "(?:[A-Za-z_][A-Za-z0-9_]*|`(?:[^`\\\\]|\\\\.)*`|\"(?:[^\"\\\\]|\\\\.)*\")"
	// bodyInsert is the INSERT statement a body may begin with, followed
	// by its data: INSERT INTO [TABLE] [db.]table [(columns)] FORMAT name.
	// Only this shape is split off; anything else in the body is query
	// text, as before.
	bodyInsert = regexp.MustCompile(`(?is)^\s*INSERT\s+INTO\s+(?:TABLE\s+)?` + identifier + `(?:\s*\.\s*` + identifier + `)?\s*` +
		`(?:\(\s*` + identifier + `(?:\s*,\s*` + identifier + `)*\s*\))?\s*FORMAT\s+[A-Za-z0-9_]+`)
)

// bodyInsertHead finds an INSERT … FORMAT statement at the head of br
// without consuming it: the statement, and how many bytes to discard to
// reach its data. The data starts after the whitespace that follows the
// format's name, up to and including the first newline (the engine's own
// rule for data after a statement). "" when the body does not begin so.
func bodyInsertHead(br *bufio.Reader) (string, int, error) {
	buf, err := br.Peek(insertHeadBytes)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return "", 0, err
	}
	loc := bodyInsert.FindIndex(buf)
	if loc == nil {
		return "", 0, nil
	}
	i := loc[1]
	for i < len(buf) && strings.IndexByte(" \t\r\n\f\v", buf[i]) >= 0 {
		i++
		if buf[i-1] == '\n' {
			break
		}
	}
	return string(buf[:loc[1]]), i, nil
}

// splitInsert splits "INSERT INTO t (a, b) FORMAT Native" into the statement
// and its input format.
func splitInsert(q string) (stmt, format string, ok bool) {
	m := insertFormat.FindStringSubmatch(q)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// trailingFormat returns the output format a query names itself, if any.
func trailingFormat(q string) string {
	if m := formatClause.FindStringSubmatch(strings.TrimSpace(q)); m != nil {
		return m[1]
	}
	return ""
}

func contentType(format string) string {
	f := strings.ToLower(format)
	switch {
	case strings.HasPrefix(f, "json"):
		return "application/json; charset=UTF-8"
	case strings.HasPrefix(f, "csv"):
		return "text/csv; charset=UTF-8"
	case strings.HasPrefix(f, "tabseparated"), strings.HasPrefix(f, "tsv"), strings.HasPrefix(f, "pretty"):
		return "text/tab-separated-values; charset=UTF-8"
	default:
		return "application/octet-stream"
	}
}

func exception(code int, msg, name string) *store.Exception {
	return &store.Exception{Code: code, Name: name, Message: fmt.Sprintf("Code: %d. DB::Exception: %s. (%s)", code, msg, name)}
}

func errorText(err error) string {
	var ex *store.Exception
	if errors.As(err, &ex) {
		return ex.Message
	}
	return fmt.Sprintf("Code: 1002. DB::Exception: %v. (UNKNOWN_EXCEPTION)", err)
}

// writeError answers as ClickHouse does: the code in a header, the message
// in the body.
func writeError(w http.ResponseWriter, status int, err error) {
	setErrorHeaders(w, err)
	w.WriteHeader(status)
	io.WriteString(w, errorText(err)+"\n")
}

// writeErrorAs is writeError in the framing the request asked its
// response to come in: once a client has sent compress=1, ClickHouse writes
// even an exception as compressed blocks, and clickhouse-go (lz4 or zstd)
// decodes every answer so; a plain message reaches it as "data size should
// be 0 < … < 134217728" instead of the reason.
func writeErrorAs(w http.ResponseWriter, rf responseFormat, status int, err error) {
	if !rf.blocks {
		writeError(w, status, err)
		return
	}
	setErrorHeaders(w, err)
	out, closeOut := rf.wrap(w)
	w.WriteHeader(status)
	io.WriteString(out, errorText(err)+"\n")
	closeOut()
}

func setErrorHeaders(w http.ResponseWriter, err error) {
	code := 1002
	var ex *store.Exception
	if errors.As(err, &ex) && ex.Code != 0 {
		code = ex.Code
	}
	w.Header().Set("X-ClickHouse-Exception-Code", strconv.Itoa(code))
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
}

// joinQuery appends more query text, on a line of its own, as the engine's
// HTTP server joins the query parameter and the body.
func joinQuery(q, more string) string {
	switch {
	case q == "":
		return more
	case more == "":
		return q
	}
	return q + "\n" + more
}

// clientError is a request the client got wrong (its body, its form):
// answered 400, never counted as the engine's failure.
type clientError struct{ ex *store.Exception }

func (e *clientError) Error() string { return e.ex.Message }
func (e *clientError) Unwrap() error { return e.ex }

// statusOf is the HTTP status for err: 400 for the client's own bytes or
// a NOT_IMPLEMENTED, 500 for what the engine said.
func statusOf(err error) int {
	var ce *clientError
	var be *blockError
	var ex *store.Exception
	switch {
	case errors.As(err, &ce), errors.As(err, &be):
		return http.StatusBadRequest
	case errors.As(err, &ex) && ex.Code == 48:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// bodyReader turns a failure to read or decode the request body into the
// client's error, so that it is not reported as the engine's.
type bodyReader struct {
	r        io.Reader
	encoding string
}

func (b bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == nil || errors.Is(err, io.EOF) {
		return n, err
	}
	var ex *store.Exception
	if errors.As(err, &ex) {
		return n, &clientError{ex}
	}
	if b.encoding != "" {
		return n, &clientError{exception(codeCannotDecompress, fmt.Sprintf("cannot decode the request body's Content-Encoding %s: %v", b.encoding, err), "CANNOT_DECOMPRESS")}
	}
	return n, &clientError{exception(27, "read request body: "+err.Error(), "CANNOT_READ_FROM_ISTREAM")}
}

// responseFormat is how a response body is written: ClickHouse's
// compressed blocks (compress=1) inside an HTTP Content-Encoding.
type responseFormat struct {
	blocks   bool
	method   compress.Method
	encoding string
}

func (h *Handler) responseFormat(r *http.Request) (responseFormat, error) {
	p := r.URL.Query()
	rf := responseFormat{blocks: p.Get("compress") == "1", encoding: responseEncoding(r)}
	if rf.blocks {
		m, err := responseBlockMethod(p.Get("network_compression_method"))
		if err != nil {
			return rf, err
		}
		rf.method = m
	}
	return rf, nil
}

// wrap sets the response's Content-Encoding and returns the writer for
// its body and the function that ends it (before the handler returns).
func (rf responseFormat) wrap(w http.ResponseWriter) (io.Writer, func()) {
	var enc io.WriteCloser = nopWriteCloser{w}
	if rf.encoding != "" {
		w.Header().Set("Content-Encoding", rf.encoding)
		enc = encodeResponse(w, rf.encoding)
	}
	if !rf.blocks {
		return enc, func() { enc.Close() }
	}
	bw := newBlockWriter(enc, rf.method)
	return bw, func() {
		bw.Close()
		enc.Close()
	}
}
