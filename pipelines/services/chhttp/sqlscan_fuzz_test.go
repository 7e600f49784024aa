package chhttp

import (
	"slices"
	"strings"
	"testing"
)

// The statements of the probes (probes_test.go) and of the gate's tests,
// as sent and as the engine's formatter prints them, seed the scanner's
// fuzzing.
var scanSeeds = []string{
	"INSERT INTO leak FORMAT Values",
	"INSERT INTO leak VALUES (file('/tmp/victim/secret'))",
	"INSERT INTO leak SETTINGS input_format_values_interpret_expressions = 1 FORMAT Values",
	"CREATE TABLE rdb (k UInt8, v String) ENGINE = EmbeddedRocksDB(0, '/tmp/victim/rocks') PRIMARY KEY k",
	"ATTACH TABLE att FROM 'tmp/victim/' (s String) ENGINE = TinyLog",
	"CREATE TABLE fl (line String) ENGINE = FileLog('tmp/victim/secret', 'LineAsString')",
	"SELECT * FROM system.one SETTINGS stream_like_engine_allow_direct_select = 1",
	"SELECT * FROM format(AvroConfluent,'a String',unhex('0000000001020361')) SETTINGS format_avro_schema_registry_url = 'http://127.0.0.1:1/'",
	"SELECT sleepEachRow(1) FROM numbers(7) SETTINGS max_block_size = 1, max_execution_time = 0",
	"SELECT query FROM system.processes",
	"SELECT 1 WHERE 'x' IN system.processes",
	"SHOW PROCESSLIST",
	"SELECT * FROM t INTO OUTFILE '/tmp/x' FORMAT CSV",
	"INSERT INTO t FROM INFILE '/etc/passwd' FORMAT LineAsString",
	"SELECT `settings` FROM t SETTINGS `max_threads` = -1, readonly = DEFAULT FORMAT `JSONEachRow`",
	"SELECT 'it''s', \"col\\\"umn\", 1.5e-3, .5, [1, (2)] FORMAT TSV",
	"SELECT x FROM (SELECT 1 AS x SETTINGS max_threads = 2) SETTINGS max_threads = 1",
	"SELECT 1 SETTINGS max_threads = plus(1, 1)",
	"SELECT 'unterminated",
	"SELECT 'a'FORMAT x'b'",
	"SELECT ')' FORMAT TSV",
	"FORMAT``",
	"SELECT 1 /* é */ FORMAT Native",
	"",
}

// The scanner reads text the engine printed, but that text carries the
// client's literals and identifiers, so it must hold on any bytes:
//   - it never panics, and holds at most a token and a token's text per
//     byte of input (bounded memory for bounded input);
//   - a word, number or punctuation token is its bytes of the input, in
//     order, and only whitespace lies between tokens that are neither
//     strings nor quoted identifiers;
//   - what it reads it reads the same again: the tokens, printed back
//     (literals re-quoted) and scanned, are the same tokens at the same
//     depths, with the same SETTINGS and FORMAT clauses;
//   - it refuses only an unterminated quote;
//   - every SETTINGS name = of the text is among what settingsClauses
//     reports (or it refuses the text), and each one it reports is a
//     name = literal of the text;
//   - the text without its FORMAT clause is the same tokens without the
//     FORMAT word and the format's name: the gate sends that text to the
//     engine's parser, so it must be the statement that runs, nothing more.
func FuzzScanSQL(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		toks, ok := scan(s)
		if !ok {
			if !strings.ContainsAny(s, "'`\"") {
				t.Fatalf("refused %q, which has no quote", s)
			}
			return
		}
		if len(toks) > len(s) {
			t.Fatalf("%d tokens from %d bytes", len(toks), len(s))
		}
		textBytes := 0
		for i, tk := range toks {
			textBytes += len(tk.text)
			if tk.pos < 0 || tk.pos >= len(s) || i > 0 && tk.pos <= toks[i-1].pos {
				t.Fatalf("token %d %q at %d: out of order (%v)", i, tk.text, tk.pos, toks)
			}
			if tk.kind == tokString || tk.kind == tokQuoted {
				if q := s[tk.pos]; q != '\'' && q != '`' && q != '"' || (q == '\'') != (tk.kind == tokString) {
					t.Fatalf("token %d (kind %d) starts with %q", i, tk.kind, q)
				}
				continue
			}
			end := tk.pos + len(tk.text)
			if end > len(s) || s[tk.pos:end] != tk.text {
				t.Fatalf("token %d %q is not the input's bytes at %d", i, tk.text, tk.pos)
			}
			next := len(s)
			if i+1 < len(toks) {
				next = toks[i+1].pos
			}
			if strings.Trim(s[end:next], " \t\r\n") != "" {
				t.Fatalf("after token %d %q: %q is neither a token nor whitespace", i, tk.text, s[end:next])
			}
		}
		if textBytes > len(s) {
			t.Fatalf("%d bytes of token text from %d bytes", textBytes, len(s))
		}
		if len(toks) > 0 && strings.Trim(s[:toks[0].pos], " \t\r\n") != "" {
			t.Fatalf("%q before the first token", s[:toks[0].pos])
		}

		again := printTokens(toks)
		toks2, ok := scan(again)
		if !ok || !sameTokens(toks, toks2) {
			t.Fatalf("%q printed back as %q scans as %v, want %v", s, again, toks2, toks)
		}

		settings, ok := settingsClauses(toks)
		settings2, ok2 := settingsClauses(toks2)
		if ok != ok2 || !slices.Equal(settings, settings2) {
			t.Fatalf("settings %v (%v), printed back %v (%v)", settings, ok, settings2, ok2)
		}
		if ok {
			for i := 0; i+2 < len(toks); i++ {
				if toks[i].kind == tokWord && (strings.EqualFold(toks[i].text, "SETTINGS") || strings.EqualFold(toks[i].text, "SETTING")) &&
					(toks[i+1].kind == tokWord || toks[i+1].kind == tokQuoted) && toks[i+2].kind == tokPunct && toks[i+2].text == "=" &&
					!slices.ContainsFunc(settings, func(v settingValue) bool { return v.name == toks[i+1].text }) {
					t.Fatalf("%q: the setting %q is not reported (%v)", s, toks[i+1].text, settings)
				}
			}
			for _, v := range settings {
				if !hasAssignment(toks, v) {
					t.Fatalf("%q: reported %v, which is no name = literal of the text", s, v)
				}
			}
		}

		format, without := formatClauseOf(s, toks)
		format2, _ := formatClauseOf(again, toks2)
		if format != format2 {
			t.Fatalf("format %q, printed back %q", format, format2)
		}
		if format == "" {
			if without != s {
				t.Fatalf("no format, but the text changed: %q", without)
			}
			return
		}
		rest, ok := scan(without)
		if !ok {
			t.Fatalf("%q without its format: %q does not scan", s, without)
		}
		// The clause is the last FORMAT word outside parentheses that a
		// name follows.
		at := -1
		for i := len(toks) - 2; i >= 0 && at < 0; i-- {
			if toks[i].kind == tokWord && toks[i].text == "FORMAT" && toks[i].depth == 0 && (toks[i+1].kind == tokWord || toks[i+1].kind == tokQuoted) && toks[i+1].text != "" {
				at = i
			}
		}
		if at < 0 || toks[at+1].text != format {
			t.Fatalf("%q: format %q, but its FORMAT clause is at token %d", s, format, at)
		}
		want := append(slices.Clip(toks[:at]), toks[at+2:]...)
		if len(want) != len(toks)-2 || !sameTokens(want, rest) {
			t.Fatalf("%q without its format %s: %q scans as %v, want %v", s, format, without, rest, want)
		}
	})
}

// printTokens prints tokens back as text, one space apart, literals and
// quoted identifiers re-quoted with backslash escapes.
func printTokens(toks []token) string {
	var b strings.Builder
	for i, tk := range toks {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch tk.kind {
		case tokString, tokQuoted:
			q := byte('\'')
			if tk.kind == tokQuoted {
				q = '`'
			}
			b.WriteByte(q)
			for j := 0; j < len(tk.text); j++ {
				if c := tk.text[j]; c == q || c == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(tk.text[j])
			}
			b.WriteByte(q)
		default:
			b.WriteString(tk.text)
		}
	}
	return b.String()
}

func sameTokens(a, b []token) bool {
	return slices.EqualFunc(a, b, func(x, y token) bool { return x.kind == y.kind && x.text == y.text && x.depth == y.depth })
}

// hasAssignment reports whether v is a name = literal of toks.
func hasAssignment(toks []token, v settingValue) bool {
	for i := 0; i+2 < len(toks); i++ {
		if toks[i].text != v.name || toks[i+1].kind != tokPunct || toks[i+1].text != "=" {
			continue
		}
		val := toks[i+2].text
		if (val == "-" || val == "+") && i+3 < len(toks) {
			val += toks[i+3].text
		}
		if val == v.value {
			return true
		}
	}
	return false
}
