package chhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/spikehunt/spikehunt/internal/store"
)

// The gate: what is not explicitly allowed is refused.
//
// It asks the engine's own parser, never a text filter (comments, case,
// quoting and heredocs defeat those): formatQuerySingleLine() refuses a
// text of several statements and prints the one statement canonically,
// keywords upper-cased, comments gone; EXPLAIN AST of that text is the
// engine's tree of it. The gate walks the tree and admits the statement
// only if its kind, every table it reads, every table function, table
// engine and format it names, and every setting it changes are on the
// role's allowlist (allowlist.go). An INSERT's inline data is not part of
// either; it is kept data by the settings the handler forces on every
// statement (no expressions in Values) and by the list of input formats.

// refusal is a statement the gate turned away; reason labels
// spikehunt_chhttp_refused_total ("" when the gate itself failed).
type refusal struct {
	reason string
	status int
	err    *store.Exception
}

func refuse(reason string, code int, name, msg string) *refusal {
	status := http.StatusForbidden
	if code == 48 || code == 62 {
		status = http.StatusBadRequest
	}
	return &refusal{reason, status, exception(code, msg, name)}
}

func denied(reason, msg string) *refusal { return refuse(reason, 497, "ACCESS_DENIED", msg) }

// admission is what the gate learnt of an admitted statement.
type admission struct {
	kind   string // the root of its tree: SelectWithUnionQuery, InsertQuery, …
	format string // its own FORMAT clause, if any
}

// admit parses query with the engine (on eng, the role's pool) and refuses
// what role may not run.
func (h *Handler) admit(ctx context.Context, eng Engine, query string, role Role, params []store.QueryParam) (*admission, *refusal) {
	canon, ref := h.engineText(ctx, eng, "SELECT formatQuerySingleLine("+store.QuoteString(query)+")", nil)
	if ref != nil {
		return nil, ref
	}
	canon = strings.TrimSpace(canon)
	toks, ok := scan(canon)
	if !ok {
		return nil, refuse("unparsable", 62, "SYNTAX_ERROR", "cannot read the statement")
	}
	switch {
	case h.cfg.ExternalSources:
		// serve-clickhouse --allow-external-sources: every client may reach
		// what the process can; the roles and settings still hold.
	case hasWords(toks, "INTO", "OUTFILE"):
		return nil, denied("into_outfile", "INTO OUTFILE is refused: no statement may name a path; read the result from the response")
	case hasWords(toks, "FROM", "INFILE"):
		return nil, denied("from_infile", "FROM INFILE is refused: no statement may name a path; send the data in the request body")
	}
	if len(toks) > 0 && toks[0].kind == tokWord {
		switch strings.ToUpper(toks[0].text) {
		case "SET", "USE", "BEGIN", "COMMIT", "ROLLBACK":
			// The engine's connections are pooled and shared: a SET or USE
			// would reach the next statement on that connection.
			return nil, refuse("session_statement", 48, "NOT_IMPLEMENTED", "serve-clickhouse has no sessions, so "+strings.ToUpper(toks[0].text)+" would have no effect: pass settings as URL parameters (?max_threads=2) and the database as ?database=")
		}
	}
	if hasWords(toks, "CREATE", "DICTIONARY") || hasWords(toks, "CREATE", "OR", "REPLACE", "DICTIONARY") || hasWords(toks, "DICTIONARY") && hasWords(toks, "SOURCE") {
		return nil, denied("statement", "dictionaries are refused: a dictionary's source reaches files, hosts and other tables")
	}
	if hasWords(toks, "CREATE", "TEMPORARY") {
		return nil, refuse("session_statement", 48, "NOT_IMPLEMENTED", "serve-clickhouse has no sessions, so a temporary table would have no effect: use a subquery or WITH")
	}
	settings, ok := settingsClauses(toks)
	if !ok {
		return nil, denied("setting", "a SETTINGS clause's values must be literals")
	}
	format, text := formatClauseOf(canon, toks)
	if strings.HasPrefix(canon, "INSERT ") {
		text = canon // the parser wants an INSERT's FORMAT, and it is the INSERT's
	}
	ast, ref := h.engineText(ctx, eng, "EXPLAIN AST "+text, params)
	if ref != nil {
		return nil, ref
	}
	tree := parseAST(ast)
	if len(tree) == 0 {
		return nil, refuse("unparsable", 62, "SYNTAX_ERROR", "the engine printed no tree for the statement")
	}
	kind := tree[0].kind
	isDDL := kind == "CreateQuery" || kind == "AlterQuery"
	for _, s := range settings {
		if isDDL && role >= RoleMigrate {
			// A table's own settings (MergeTree's); its disk and storage
			// policy are constant in the engine's profile.
			if strings.Contains(strings.ToLower(s.name), "disk") || strings.Contains(strings.ToLower(s.name), "storage_policy") {
				return nil, denied("setting", "a table's disk and storage policy are fixed")
			}
			continue
		}
		if ref := h.checkSetting(ctx, eng, role, s.name, s.value); ref != nil {
			return nil, ref
		}
	}
	if ref := h.checkTree(tree, role); ref != nil {
		return nil, ref
	}
	if format != "" {
		if kind == "InsertQuery" {
			if !inputFormats[format] {
				return nil, denied("format", fmt.Sprintf("the input format %s is refused (it names files, hosts or schemas, or is not one serve-clickhouse reads): send Native, RowBinary, TSV, CSV, JSONEachRow, Values, Parquet or the like", format))
			}
		} else if !outputFormats[format] {
			return nil, denied("format", fmt.Sprintf("the output format %s is refused: ask for Native, RowBinary, TSV, CSV, JSON or the like", format))
		}
	}
	return &admission{kind: kind, format: format}, nil
}

// engineText runs q on eng and returns its output as text, or the refusal
// the engine's error becomes.
func (h *Handler) engineText(ctx context.Context, eng Engine, q string, params []store.QueryParam) (string, *refusal) {
	var out bytes.Buffer
	err := eng.QueryRaw(ctx, store.RawStatement{Query: q, Database: h.database, Params: params}, "TSVRaw", &out)
	if err != nil {
		var ex *store.Exception
		if errors.As(err, &ex) {
			// The parser's message names the query it was given, which is the
			// client's; the code (62, SYNTAX_ERROR) is what clients branch on.
			return "", &refusal{"unparsable", http.StatusBadRequest, ex}
		}
		return "", &refusal{"", http.StatusInternalServerError, exception(1002, "parse the query: "+err.Error(), "UNKNOWN_EXCEPTION")}
	}
	return out.String(), nil
}

// astNode is one line of EXPLAIN AST: its kind, the rest of its line
// (a name, an alias) and its parent's index (-1 for the root).
type astNode struct {
	kind, rest string
	depth      int
	parent     int
}

// parseAST reads EXPLAIN AST's indented lines.
func parseAST(s string) []astNode {
	var out []astNode
	var stack []int // index of the last node at each depth
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		d := len(line) - len(strings.TrimLeft(line, " "))
		body := strings.TrimSpace(line)
		if i := strings.LastIndex(body, " (children "); i >= 0 && strings.HasSuffix(body, ")") {
			body = body[:i]
		}
		kind, rest, _ := strings.Cut(body, " ")
		// "Columns definition" and "Storage definition" are one kind each.
		if kind == "Columns" || kind == "Storage" {
			if r, ok := strings.CutPrefix(rest, "definition"); ok {
				kind, rest = kind+" definition", strings.TrimSpace(r)
			}
		}
		rest = strings.TrimSpace(rest)
		if i := strings.Index(rest, " (alias "); i >= 0 {
			rest = rest[:i]
		}
		if d > len(stack) {
			d = len(stack)
		}
		stack = stack[:d]
		parent := -1
		if d > 0 {
			parent = stack[d-1]
		}
		out = append(out, astNode{kind: kind, rest: rest, depth: d, parent: parent})
		stack = append(stack, len(out)-1)
	}
	return out
}

func (h *Handler) checkTree(tree []astNode, role Role) *refusal {
	root := 0
	for tree[root].kind == "Explain" {
		// EXPLAIN … of a statement: the statement is what counts.
		next := -1
		for i := root + 1; i < len(tree); i++ {
			if tree[i].parent == root {
				next = i
				break
			}
		}
		if next < 0 {
			break
		}
		root = next
	}
	kind := tree[root].kind
	least, ok := statementKinds[kind]
	switch {
	case !ok || kind == "Explain":
		return denied("statement", fmt.Sprintf("%s is not a statement serve-clickhouse runs (it runs SELECT, SHOW, DESCRIBE, EXISTS, EXPLAIN, INSERT, DELETE, and for the migrate user CREATE, ALTER, DROP, RENAME, OPTIMIZE)", strings.TrimSuffix(kind, "Query")))
	case role < least:
		return denied("role", fmt.Sprintf("the %s user cannot run %s", role, strings.TrimSuffix(kind, "Query")))
	}
	for i, n := range tree {
		parentKind := ""
		if n.parent >= 0 {
			parentKind = tree[n.parent].kind
		}
		switch n.kind {
		case "TableIdentifier":
			if ref := h.checkTable(n.rest); ref != nil {
				return ref
			}
		case "Identifier":
			// A table named where an expression goes (x IN system.processes),
			// or the target of INSERT, SHOW CREATE, EXISTS, DROP …
			db, _, qualified := strings.Cut(n.rest, ".")
			if qualified && h.isDatabase(db) {
				if ref := h.checkTable(n.rest); ref != nil {
					return ref
				}
			}
		case "Function":
			name := n.rest
			switch {
			case h.cfg.ExternalSources:
			case parentKind == "Storage definition" && firstChild(tree, i):
				if !tableEngines[name] {
					return denied("table_engine", fmt.Sprintf("the table engine %s is refused: only the MergeTree family and views (no engine may name a path, a host or a format)", name))
				}
			case parentKind == "TableExpression" || parentKind == "InsertQuery" || parentKind == "CreateQuery":
				if r, ok := tableFunctions[name]; !ok || role < r {
					return denied("table_function", fmt.Sprintf("the table function %s is refused: it reaches files, hosts, other tables or formats of its own (allowed: numbers, zeros, values, generate_series, null, generateRandom, and input for INSERT)", name))
				}
			case deniedFunction(name):
				return denied("function", fmt.Sprintf("the function %s is refused: it reaches files, hosts or tables by name", name))
			}
		}
	}
	return nil
}

// firstChild: tree[i] is its parent's first child (a Storage definition's
// first is its engine; its ORDER BY tuple() comes later).
func firstChild(tree []astNode, i int) bool {
	return i > 0 && tree[i].parent == i-1
}

// isDatabase: the first part of a qualified name that names a database a
// statement could read from other than through FROM.
func (h *Handler) isDatabase(name string) bool {
	n := strings.ToLower(strings.Trim(name, "`\""))
	return n == "system" || n == "information_schema" || n == strings.ToLower(h.database) || n == "default"
}

// checkTable admits a table in the store's database (or unqualified: the
// store's database is every connection's) or an allowed system table.
func (h *Handler) checkTable(name string) *refusal {
	db, table, qualified := strings.Cut(name, ".")
	if !qualified {
		return nil
	}
	db = strings.Trim(db, "`\"")
	table = strings.Trim(table, "`\"")
	switch {
	case db == h.database:
		return nil
	case strings.EqualFold(db, "system") && systemTables[strings.ToLower(table)]:
		return nil
	case strings.EqualFold(db, "system"):
		return denied("system_table", fmt.Sprintf("system.%s is refused: the store serves its own database and system.databases, tables, columns, parts, merges, settings, functions and the like", table))
	}
	return denied("database", fmt.Sprintf("the database %s is refused: serve-clickhouse serves the database %s only", db, h.database))
}

// checkSetting admits a setting a client sets: one of clientSettings, or
// any other at the value it already has. max_execution_time may be
// lowered, never lifted.
func (h *Handler) checkSetting(ctx context.Context, eng Engine, role Role, name, value string) *refusal {
	if name == "max_execution_time" {
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || v <= 0 || v > h.cfg.MaxExecutionTime.Seconds() {
			return denied("setting", fmt.Sprintf("max_execution_time = %s is refused: it may be lowered below the server's %v, not lifted or turned off", value, h.cfg.MaxExecutionTime))
		}
		return nil
	}
	if clientSettings[name] {
		return nil
	}
	def, known := h.settingDefault(ctx, eng, name)
	for _, f := range h.forced(role) {
		if f[0] == name {
			def, known = f[1], true
		}
	}
	if known && sameSettingValue(def, value) {
		return nil
	}
	return denied("setting", fmt.Sprintf("the setting %s is constant on serve-clickhouse (%q): it is not one a client may change", name, def))
}

func sameSettingValue(a, b string) bool {
	norm := func(s string) string {
		s = strings.ToLower(strings.TrimSpace(s))
		switch s {
		case "true":
			return "1"
		case "false":
			return "0"
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
		return s
	}
	return norm(a) == norm(b)
}
