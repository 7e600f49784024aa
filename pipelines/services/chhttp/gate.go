package chhttp

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"

	"github.com/spikehunt/spikehunt/internal/store"
)

// The gate: what the engine cannot refuse itself.
//
// The engine's grants (store's engine_config.go) refuse file(), url(),
// remote(), s3() and the rest as table functions and engines, for every
// statement. What escapes them: INTO OUTFILE and FROM INFILE (in the
// embedded engine the client code that shares its process writes and
// reads the file, no grant asked), the file() function (no grant asked
// either), and a text of several statements, all of which run. And the
// engine runs all statements as one user, so the read-only user's limits
// are applied here, per statement.
//
// Text filters are bypassable (comments, case, quoting, heredocs), so the
// gate asks the engine's own parser: formatQuerySingleLine() refuses a
// text of several statements and prints the one statement canonically,
// keywords upper-cased, comments gone. An INSERT's inline data is not part
// of what it prints; the data could hide a second statement after a ';',
// so an INSERT with a ';' in its text is refused: send its data in the body
// with the INSERT in the query parameter.

// fileFunctions reach a path or a host their arguments name, and the
// engine asks no grant for them: the file() function (the file() table
// function needs READ ON FILE; the function, in the embedded engine, reads
// any path), catboostEvaluate (loads a model from a path through a helper
// process) and disk(), a table's disk defined inline, which the engine
// creates (a local folder anywhere, a web or s3 endpoint) before the
// constraint on a table's disk refuses it. The formatter prints a call as
// the bare name and "(", quoting only a name that needs it.
var fileFunctions = regexp.MustCompile("(?i)(^|[^A-Za-z0-9_.])[`\"]?(file|catboostEvaluate|disk)[`\"]?\\s*\\(")

// sessionStatements change the state of the connection they run on, as
// the formatter begins them.
var sessionStatements = []string{"SET ", "USE ", "CREATE TEMPORARY TABLE ", "BEGIN TRANSACTION", "COMMIT", "ROLLBACK"}

// readOnlyStatements are the statements the read-only user may run, as the
// formatter begins them.
var readOnlyStatements = []string{"SELECT ", "WITH ", "SHOW ", "DESCRIBE ", "DESC ", "EXISTS ", "EXPLAIN ", "("}

// refusal is a statement the gate turned away; reason labels
// spikehunt_chhttp_refused_total ("" when the gate itself failed).
type refusal struct {
	reason string
	status int
	err    *store.Exception
}

// admit parses query with the engine and refuses what must not run.
func (h *Handler) admit(ctx context.Context, query string, readOnly bool) *refusal {
	var out bytes.Buffer
	err := h.eng.QueryRaw(ctx, store.RawStatement{Query: "SELECT formatQuerySingleLine(" + store.QuoteString(query) + ")"}, "RawBLOB", &out)
	if err != nil {
		var ex *store.Exception
		if errors.As(err, &ex) {
			// The parser's message names the query it was given, which is the
			// client's; the code (62, SYNTAX_ERROR) is what clients branch on.
			return &refusal{"unparsable", http.StatusBadRequest, ex}
		}
		return &refusal{"", http.StatusInternalServerError, exception(1002, "parse the query: "+err.Error(), "UNKNOWN_EXCEPTION")}
	}
	canon := strings.TrimSpace(out.String())
	switch {
	case strings.Contains(canon, "INTO OUTFILE") && (readOnly || !h.cfg.ExternalSources):
		return &refusal{"into_outfile", http.StatusForbidden, exception(497, "INTO OUTFILE is refused: it would write a file as the server's own user; read the result from the response", "ACCESS_DENIED")}
	case strings.Contains(canon, "FROM INFILE") && !h.cfg.ExternalSources:
		return &refusal{"from_infile", http.StatusForbidden, exception(497, "FROM INFILE is refused: it would read a file as the server's own user; send the data in the request body (serve-clickhouse --allow-external-sources permits it)", "ACCESS_DENIED")}
	case fileFunctions.MatchString(canon) && !h.cfg.ExternalSources:
		return &refusal{"file_function", http.StatusForbidden, exception(497, "the file(), catboostEvaluate() and disk() functions are refused: they would reach files or hosts as the server's own user (serve-clickhouse --allow-external-sources permits them)", "ACCESS_DENIED")}
	case hasAnyPrefix(canon, sessionStatements):
		// The engine's connections are pooled and shared by every client:
		// a SET, USE or temporary table would outlive the request and reach
		// the next statement on that connection, someone else's.
		verb := ""
		for _, p := range sessionStatements {
			if strings.HasPrefix(canon, p) {
				verb = strings.TrimSpace(p)
			}
		}
		return &refusal{"session_statement", http.StatusBadRequest, exception(48, "serve-clickhouse has no sessions, so "+verb+" would have no effect: pass settings as URL parameters (?max_threads=2), the database as ?database=, and use a subquery or WITH for a temporary table", "NOT_IMPLEMENTED")}
	case strings.HasPrefix(canon, "INSERT "):
		if readOnly {
			return &refusal{"read_only_write", http.StatusForbidden, exception(164, "the read-only user cannot INSERT", "READONLY")}
		}
		if strings.Contains(strings.TrimRight(query, " \t\r\n;"), ";") {
			return &refusal{"insert_with_semicolon", http.StatusBadRequest, exception(62, "an INSERT with its data in the query text must not contain ';' (a second statement could follow it): put the INSERT … FORMAT in the query parameter and the data in the body", "SYNTAX_ERROR")}
		}
	case readOnly && !hasAnyPrefix(canon, readOnlyStatements):
		verb, _, _ := strings.Cut(canon, " ")
		return &refusal{"read_only_statement", http.StatusForbidden, exception(164, "the read-only user may run only SELECT, WITH, SHOW, DESCRIBE, EXISTS and EXPLAIN, not "+verb, "READONLY")}
	}
	return nil
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
