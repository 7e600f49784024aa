package chhttp

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/spikehunt/spikehunt/pipelines/store"
)

// The gate: what the engine cannot refuse itself.
//
// The engine's grants (store's engine_config.go) refuse file(), url(),
// remote(), s3() and the rest, for every statement. Three things escape
// them, because in the embedded engine they run in the client code that
// shares its process: INTO OUTFILE and FROM INFILE (the process writes and
// reads the file itself, no grant asked) and a text of several statements,
// all of which run. And the engine runs all statements as one user, so the
// read-only user's limits are applied here, per statement.
//
// Text filters are bypassable (comments, case, quoting, heredocs), so the
// gate asks the engine's own parser: formatQuerySingleLine() refuses a
// text of several statements and prints the one statement canonically,
// keywords upper-cased, comments gone. An INSERT's inline data is not part
// of what it prints; the data could hide a second statement after a ';',
// so an INSERT with a ';' in its text is refused: send its data in the body
// with the INSERT in the query parameter.

// readOnlyStatements are the statements the read-only user may run, as the
// formatter begins them.
var readOnlyStatements = []string{"SELECT ", "WITH ", "SHOW ", "DESCRIBE ", "DESC ", "EXISTS ", "EXPLAIN ", "("}

// refusal is a statement the gate turned away.
type refusal struct {
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
			return &refusal{http.StatusBadRequest, ex}
		}
		return &refusal{http.StatusInternalServerError, exception(1002, "parse the query: "+err.Error(), "UNKNOWN_EXCEPTION")}
	}
	canon := strings.TrimSpace(out.String())
	switch {
	case strings.Contains(canon, "INTO OUTFILE"), strings.Contains(canon, "FROM INFILE"):
		return &refusal{http.StatusForbidden, exception(497, "INTO OUTFILE and FROM INFILE are refused: they would read or write files as the server's own user; read the result from the response, send data in the request body", "ACCESS_DENIED")}
	case strings.HasPrefix(canon, "INSERT "):
		if readOnly {
			return &refusal{http.StatusForbidden, exception(164, "the read-only user cannot INSERT", "READONLY")}
		}
		if strings.Contains(strings.TrimRight(query, " \t\r\n;"), ";") {
			return &refusal{http.StatusBadRequest, exception(62, "an INSERT with its data in the query text must not contain ';' (a second statement could follow it): put the INSERT … FORMAT in the query parameter and the data in the body", "SYNTAX_ERROR")}
		}
	case readOnly && !hasAnyPrefix(canon, readOnlyStatements):
		verb, _, _ := strings.Cut(canon, " ")
		return &refusal{http.StatusForbidden, exception(164, "the read-only user may run only SELECT, WITH, SHOW, DESCRIBE, EXISTS and EXPLAIN, not "+verb, "READONLY")}
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
