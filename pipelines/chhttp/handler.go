// Package chhttp serves the ClickHouse HTTP interface over the embedded
// engine, so that Grafana, clickhouse-go and any other ClickHouse client can
// open a store that lives inside a spikehunt process.
//
// What it implements of the interface: the query in the `query` parameter or
// the body (or both, concatenated), `default_format` and a FORMAT clause,
// `database`, `query_id`, settings as URL parameters, INSERT with its data in
// the body in any input format (Native included), gzip response and request
// bodies, errors the way ClickHouse reports them (HTTP 500 with
// X-ClickHouse-Exception-Code and the message in the body), `/ping`, and
// basic, header and URL-parameter authentication of a read-write and a
// read-only user. Every statement is bounded by max_execution_time and
// passes the gate (gate.go) first.
//
// What it does not: ClickHouse block compression (`compress=1`,
// `decompress=1`), sessions (`session_id` is accepted and ignored: every
// statement starts from the store's defaults), external tables.
//
// Native output and client_protocol_version: the engine writes Native at
// protocol revision 0. A client that sends client_protocol_version (as
// clickhouse-go does) expects block info and per-column serialization flags,
// so the handler re-encodes each block at the client's revision.
package chhttp

import (
	"bufio"
	"compress/gzip"
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
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/pipelines/store"
)

// Engine is what the handler needs of a store: the embedded backend.
type Engine interface {
	QueryRaw(ctx context.Context, st store.RawStatement, format string, w io.Writer) error
	InsertRaw(ctx context.Context, st store.RawStatement, format string, data io.Reader) error
}

// Handler is an http.Handler speaking the ClickHouse HTTP interface.
type Handler struct {
	eng     Engine
	cfg     Config
	refused *prometheus.CounterVec
}

// New returns a handler over eng; zero fields of cfg take DefaultConfig's
// values. Check cfg with Validate first.
func New(eng Engine, cfg Config) *Handler {
	return &Handler{eng: eng, cfg: cfg.withDefaults(), refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spikehunt_chhttp_refused_total",
		Help: "Statements the gate refused, by reason: into_outfile, from_infile, file_function, session_statement, read_only_write, read_only_statement, insert_with_semicolon, unparsable (several statements or a syntax error).",
	}, []string{"reason"})}
}

// Register adds the handler's metrics to reg.
func (h *Handler) Register(reg prometheus.Registerer) error {
	return reg.Register(h.refused)
}

// refuse answers a statement the gate turned away and counts it.
func (h *Handler) refuse(w http.ResponseWriter, ref *refusal) {
	if ref.reason != "" {
		h.refused.WithLabelValues(ref.reason).Inc()
	}
	writeError(w, ref.status, ref.err)
}

// URL parameters that are part of the interface rather than settings.
var notSettings = map[string]bool{
	"query": true, "database": true, "default_format": true, "user": true, "password": true,
	"query_id": true, "session_id": true, "session_timeout": true, "session_check": true,
	"compress": true, "decompress": true, "client_protocol_version": true, "buffer_size": true,
	"wait_end_of_query": true, "enable_http_compression": true, "http_zlib_compression_level": true,
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
	readOnly, ok := h.authorize(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Basic realm="spikehunt"`)
		writeError(w, http.StatusUnauthorized, &store.Exception{Code: store.CodeAuthFailed,
			Message: "Code: 516. DB::Exception: Authentication failed: password is incorrect, or there is no user with such name. (AUTHENTICATION_FAILED)"})
		return
	}
	p := r.URL.Query()
	if p.Get("compress") == "1" || p.Get("decompress") == "1" {
		writeError(w, http.StatusBadRequest, &store.Exception{Code: 48, Message: "Code: 48. DB::Exception: serve-clickhouse does not implement ClickHouse block compression (compress=1/decompress=1); use HTTP gzip or no compression. (NOT_IMPLEMENTED)"})
		return
	}
	body := io.Reader(r.Body)
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, exception(27, "request body is not valid gzip: "+err.Error(), "CANNOT_PARSE_INPUT"))
			return
		}
		defer zr.Close()
		body = zr
	}
	st := store.RawStatement{Query: p.Get("query"), Database: p.Get("database")}
	maxExec := h.cfg.MaxExecutionTime
	for k, vs := range p {
		if strings.HasPrefix(k, "param_") {
			writeError(w, http.StatusBadRequest, exception(48, "query parameters ("+k+") are not supported by serve-clickhouse; inline the values", "NOT_IMPLEMENTED"))
			return
		}
		if notSettings[k] || len(vs) == 0 {
			continue
		}
		if readOnly && k == "readonly" {
			writeError(w, http.StatusForbidden, exception(164, "the read-only user cannot change readonly", "READONLY"))
			return
		}
		if k == "max_execution_time" {
			if v, err := strconv.ParseFloat(vs[len(vs)-1], 64); err == nil && v > 0 && v < maxExec.Seconds() {
				maxExec = time.Duration(v * float64(time.Second))
			}
			continue
		}
		st.Setting(k, vs[len(vs)-1])
	}
	// The engine stops the statement there; serve-clickhouse's write
	// timeout is set from the same bound.
	st.Setting("max_execution_time", strconv.FormatFloat(math.Ceil(maxExec.Seconds()), 'f', 0, 64))
	if readOnly {
		// Last, so that no setting before it can undo it; readonly = 2 (not
		// 1) lets Grafana set its own max_execution_time and the like, which
		// the engine's constraints keep from naming files.
		st.Setting("readonly", "2")
	}
	queryID := p.Get("query_id")
	if queryID != "" {
		w.Header().Set("X-ClickHouse-Query-Id", queryID)
	}
	w.Header().Set("X-ClickHouse-Server-Display-Name", "spikehunt-embedded")

	// An INSERT named in the URL takes the body as its data.
	if st.Query != "" {
		if ins, format, ok := splitInsert(st.Query); ok {
			if ref := h.admit(r.Context(), st.Query, readOnly); ref != nil {
				h.refuse(w, ref)
				return
			}
			st.Query = ins
			if err := h.eng.InsertRaw(r.Context(), st, format, body); err != nil {
				writeError(w, http.StatusInternalServerError, err)
				return
			}
			w.Header().Set("X-ClickHouse-Summary", "{}")
			return
		}
	}
	rest, err := io.ReadAll(io.LimitReader(body, h.cfg.MaxQueryBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, exception(27, "read request body: "+err.Error(), "CANNOT_READ_FROM_ISTREAM"))
		return
	}
	if int64(len(rest)) > h.cfg.MaxQueryBytes {
		writeError(w, http.StatusRequestEntityTooLarge, exception(62, fmt.Sprintf("query is longer than %d bytes: send data with the INSERT in the query parameter and the data in the body", h.cfg.MaxQueryBytes), "SYNTAX_ERROR"))
		return
	}
	switch {
	case st.Query == "":
		st.Query = string(rest)
	case len(rest) > 0:
		st.Query += "\n" + string(rest)
	}
	if strings.TrimSpace(st.Query) == "" {
		writeError(w, http.StatusBadRequest, exception(62, "empty query", "SYNTAX_ERROR"))
		return
	}
	if ref := h.admit(r.Context(), st.Query, readOnly); ref != nil {
		h.refuse(w, ref)
		return
	}
	format := p.Get("default_format")
	if format == "" {
		format = "TabSeparated"
	}
	if f := trailingFormat(st.Query); f != "" {
		format = f
	}
	revision, _ := strconv.Atoi(p.Get("client_protocol_version"))
	h.respond(w, r, st, format, revision)
}

// respond runs st and streams its output. The status line waits for the
// first bytes, so that an error the engine reports up front gets a 500.
func (h *Handler) respond(w http.ResponseWriter, r *http.Request, st store.RawStatement, format string, revision int) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		var err error
		if strings.EqualFold(format, "Native") && revision > 0 {
			err = h.nativeAtRevision(r.Context(), st, revision, pw)
		} else {
			err = h.eng.QueryRaw(r.Context(), st, format, pw)
		}
		pw.CloseWithError(err)
		done <- err
	}()
	br := bufio.NewReaderSize(pr, 64<<10)
	if _, err := br.Peek(1); err != nil && err != io.EOF {
		pr.CloseWithError(err)
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", contentType(format))
	w.Header().Set("X-ClickHouse-Format", format)
	out := io.Writer(w)
	if p := r.URL.Query().Get("enable_http_compression"); p == "1" && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		defer zw.Close()
		out = zw
	}
	if _, err := io.Copy(out, br); err != nil {
		// Headers are gone: report in-band, as ClickHouse does, and log.
		fmt.Fprintf(out, "\n%s\n", errorText(err))
		h.cfg.Logger.Warn("query failed mid-stream", "err", err)
		pr.CloseWithError(err)
	}
	<-done
}

// authorize names the request's user: ok when it is one of the configured
// users (or none is configured), readOnly when it is the read-only one.
func (h *Handler) authorize(r *http.Request) (readOnly, ok bool) {
	if !h.cfg.AuthRequired() {
		return false, true
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		user, pass = r.Header.Get("X-ClickHouse-User"), r.Header.Get("X-ClickHouse-Key")
	}
	if user == "" {
		q := r.URL.Query()
		user, pass = q.Get("user"), q.Get("password")
	}
	rw := h.cfg.User != "" && matches(user, pass, h.cfg.User, h.cfg.Password)
	ro := h.cfg.ReadOnlyUser != "" && matches(user, pass, h.cfg.ReadOnlyUser, h.cfg.ReadOnlyPassword)
	return ro, rw || ro
}

func matches(user, pass, wantUser, wantPass string) bool {
	return subtle.ConstantTimeCompare([]byte(user), []byte(wantUser))&
		subtle.ConstantTimeCompare([]byte(pass), []byte(wantPass)) == 1
}

var (
	insertFormat = regexp.MustCompile(`(?is)^\s*(INSERT\s+INTO\s+.*?)\s+FORMAT\s+([A-Za-z0-9_]+)\s*;?\s*$`)
	formatClause = regexp.MustCompile(`(?i)\bFORMAT\s+([A-Za-z0-9_]+)(\s+SETTINGS\s+.*)?\s*;?\s*$`)
)

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
	code := 1002
	var ex *store.Exception
	if errors.As(err, &ex) && ex.Code != 0 {
		code = ex.Code
	}
	w.Header().Set("X-ClickHouse-Exception-Code", strconv.Itoa(code))
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.WriteHeader(status)
	io.WriteString(w, errorText(err)+"\n")
}
