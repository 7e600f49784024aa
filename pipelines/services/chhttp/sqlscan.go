package chhttp

import (
	"strings"
)

// A scanner over the engine's canonical text of a statement (what
// formatQuerySingleLine prints): string literals in single quotes with
// backslash escapes, identifiers quoted in backquotes or double quotes,
// keywords upper-cased, no comments. It finds what the engine's EXPLAIN AST
// does not print: SETTINGS clauses with their values, the FORMAT clause,
// INTO OUTFILE and FROM INFILE. It never decides alone: what it cannot read
// is refused.

type tokKind int

const (
	tokWord   tokKind = iota // keyword or bare identifier
	tokQuoted                // `identifier` or "identifier"
	tokString                // 'literal'
	tokNumber
	tokPunct
)

type token struct {
	kind  tokKind
	text  string // for tokString and tokQuoted: the unquoted value
	depth int    // parentheses and brackets around the token
	pos   int    // byte offset in the text
}

// scan splits canonical text into tokens; ok is false on an unterminated
// quote (which the engine's formatter never prints).
func scan(s string) ([]token, bool) {
	var out []token
	depth := 0
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '\'' || c == '`' || c == '"':
			var b strings.Builder
			j := i + 1
			closed := false
			for j < len(s) {
				if s[j] == '\\' && j+1 < len(s) {
					b.WriteByte(s[j+1])
					j += 2
					continue
				}
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c { // doubled quote
						b.WriteByte(c)
						j += 2
						continue
					}
					closed = true
					j++
					break
				}
				b.WriteByte(s[j])
				j++
			}
			if !closed {
				return nil, false
			}
			k := tokQuoted
			if c == '\'' {
				k = tokString
			}
			out = append(out, token{k, b.String(), depth, i})
			i = j
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			out = append(out, token{tokWord, s[i:j], depth, i})
			i = j
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i + 1
			for j < len(s) && (s[j] == '.' || s[j] == '_' || s[j] >= '0' && s[j] <= '9' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' ||
				(s[j] == '-' || s[j] == '+') && (s[j-1] == 'e' || s[j-1] == 'E')) {
				j++
			}
			out = append(out, token{tokNumber, s[i:j], depth, i})
			i = j
		default:
			// One byte, as it is: string(c) would be the UTF-8 of the
			// rune c, two bytes for a byte of a multi-byte character.
			if c == '(' || c == '[' {
				out = append(out, token{tokPunct, s[i : i+1], depth, i})
				depth++
			} else if c == ')' || c == ']' {
				depth--
				out = append(out, token{tokPunct, s[i : i+1], depth, i})
			} else {
				out = append(out, token{tokPunct, s[i : i+1], depth, i})
			}
			i++
		}
	}
	return out, true
}

// settingValue is one name = value of a SETTINGS clause.
type settingValue struct {
	name, value string
}

// settingsClauses returns every name = value in the text's SETTINGS
// clauses, at any depth. A SETTINGS word not followed by name = is an
// identifier (a column or alias named settings). ok is false for a value
// that is not a literal (a function call, an expression): refused.
func settingsClauses(toks []token) (out []settingValue, ok bool) {
	for i := 0; i < len(toks); i++ {
		if toks[i].kind != tokWord || !strings.EqualFold(toks[i].text, "SETTINGS") && !strings.EqualFold(toks[i].text, "SETTING") {
			continue
		}
		j := i + 1
		for {
			if j+1 >= len(toks) {
				break
			}
			name := toks[j]
			if name.kind != tokWord && name.kind != tokQuoted || toks[j+1].kind != tokPunct || toks[j+1].text != "=" {
				break
			}
			if j+2 >= len(toks) {
				return nil, false
			}
			v := toks[j+2]
			next := j + 3
			val := v.text
			switch {
			case v.kind == tokString, v.kind == tokNumber:
			case v.kind == tokWord && (strings.EqualFold(v.text, "true") || strings.EqualFold(v.text, "false") || strings.EqualFold(v.text, "NULL") || strings.EqualFold(v.text, "DEFAULT")):
			case v.kind == tokPunct && (v.text == "-" || v.text == "+") && next < len(toks) && toks[next].kind == tokNumber:
				val = v.text + toks[next].text
				next++
			default:
				return nil, false
			}
			// A value is one literal: what follows is a comma and the next
			// setting, or the clause has ended.
			out = append(out, settingValue{name.text, val})
			if next < len(toks) && toks[next].kind == tokPunct && toks[next].text == "," {
				j = next + 1
				continue
			}
			if next < len(toks) && toks[next].kind == tokPunct && toks[next].text != ")" {
				return nil, false
			}
			break
		}
	}
	return out, true
}

// hasWords reports whether the words appear one after the other (outside
// literals), case-insensitively.
func hasWords(toks []token, words ...string) bool {
	for i := 0; i+len(words) <= len(toks); i++ {
		match := true
		for k, w := range words {
			if toks[i+k].kind != tokWord || !strings.EqualFold(toks[i+k].text, w) {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// formatClause finds the statement's own FORMAT clause (outside any
// parentheses) and returns the format's name and the text without the
// clause, a space where it was, so that the tokens either side stay apart
// (two literals around it must not become one with a doubled quote). "" and the
// text unchanged when there is none; a FORMAT with an empty quoted name
// is none (the engine refuses it).
func formatClauseOf(text string, toks []token) (format, without string) {
	for i := len(toks) - 2; i >= 0; i-- {
		t := toks[i]
		if t.depth == 0 && t.kind == tokWord && t.text == "FORMAT" && (toks[i+1].kind == tokWord || toks[i+1].kind == tokQuoted) && toks[i+1].text != "" {
			end := toks[i+1].pos + len(toks[i+1].text)
			if toks[i+1].kind == tokQuoted {
				end = len(text)
				if i+2 < len(toks) {
					end = toks[i+2].pos
				}
			}
			return toks[i+1].text, text[:t.pos] + " " + text[end:]
		}
	}
	return "", text
}
