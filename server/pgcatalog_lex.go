package server

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file reads the catalog queries of pgcatalog.go: a tokenizer for
// PostgreSQL's lexical syntax (enough of it for what clients send about the
// catalog) and the split of a SELECT into its select list, FROM tables and
// WHERE conditions. It never evaluates general SQL.

// ptok kinds.
const (
	pIdent  = 'i' // unquoted identifier or keyword, lower-cased
	pQIdent = 'q' // "quoted identifier", as written
	pString = 's' // string constant, unescaped
	pNumber = 'n'
	pParam  = 'p' // $n; text holds n
	pOp     = 'o' // operator or punctuation
)

type ptok struct {
	kind byte
	text string
}

func (t ptok) is(kind byte, text string) bool { return t.kind == kind && t.text == text }
func (t ptok) kw(word string) bool            { return t.kind == pIdent && t.text == word }
func (t ptok) op(s string) bool               { return t.kind == pOp && t.text == s }
func (t ptok) isName() bool                   { return t.kind == pIdent || t.kind == pQIdent }

// pgLex splits src into tokens; ok is false for text it cannot read
// (an unterminated string or comment), which is then left to the engine.
func pgLex(src string) ([]ptok, bool) {
	var out []ptok
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case strings.HasPrefix(src[i:], "--"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case strings.HasPrefix(src[i:], "/*"):
			// Block comments nest in PostgreSQL.
			for depth := 0; ; {
				switch {
				case i >= len(src):
					return nil, false
				case strings.HasPrefix(src[i:], "/*"):
					depth++
					i += 2
				case strings.HasPrefix(src[i:], "*/"):
					depth--
					i += 2
				default:
					i++
				}
				if depth == 0 {
					break
				}
			}
		case c == '\'' || ((c == 'e' || c == 'E') && i+1 < len(src) && src[i+1] == '\''):
			escapes := c != '\''
			if escapes {
				i++
			}
			s, n, ok := lexQuoted(src[i:], '\'', escapes)
			if !ok {
				return nil, false
			}
			out = append(out, ptok{pString, s})
			i += n
		case c == '"':
			s, n, ok := lexQuoted(src[i:], '"', false)
			if !ok {
				return nil, false
			}
			out = append(out, ptok{pQIdent, s})
			i += n
		case c == '$' && i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9':
			j := i + 1
			for j < len(src) && src[j] >= '0' && src[j] <= '9' {
				j++
			}
			out = append(out, ptok{pParam, src[i+1 : j]})
			i = j
		case c >= '0' && c <= '9' || (c == '.' && i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9'):
			j := i
			for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '.' ||
				src[j] == 'e' || src[j] == 'E' || ((src[j] == '+' || src[j] == '-') && (src[j-1] == 'e' || src[j-1] == 'E'))) {
				j++
			}
			out = append(out, ptok{pNumber, src[i:j]})
			i = j
		case c == '_' || c >= 0x80 || unicode.IsLetter(rune(c)):
			j := i
			for j < len(src) {
				r, size := utf8.DecodeRuneInString(src[j:])
				if r != '_' && r != '$' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
					break
				}
				j += size
			}
			if j == i { // a byte that is no letter: skip it rather than loop
				j = i + 1
			}
			out = append(out, ptok{pIdent, strings.ToLower(src[i:j])})
			i = j
		case strings.ContainsRune("(),;[].", rune(c)):
			out = append(out, ptok{pOp, string(c)})
			i++
		case c == ':' && i+1 < len(src) && src[i+1] == ':':
			out = append(out, ptok{pOp, "::"})
			i += 2
		default:
			j := i
			for j < len(src) && strings.IndexByte("+-*/<>=~!@#%^&|`?:", src[j]) >= 0 {
				j++
			}
			if j == i {
				j = i + 1
			}
			out = append(out, ptok{pOp, src[i:j]})
			i = j
		}
	}
	return out, true
}

// lexQuoted reads a quoted string starting at s[0] == q; a doubled quote
// stands for itself. It returns the content and the bytes consumed.
func lexQuoted(s string, q byte, backslashEscapes bool) (string, int, bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch {
		case backslashEscapes && s[i] == '\\' && i+1 < len(s):
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(s[i])
			}
		case s[i] != q:
			b.WriteByte(s[i])
		case i+1 < len(s) && s[i+1] == q:
			b.WriteByte(q)
			i++
		default:
			return b.String(), i + 1, true
		}
	}
	return "", 0, false
}

// fromTable is one table of a FROM clause.
type fromTable struct {
	schema, name, alias string
	// outer is set for the right-hand side of a LEFT (or RIGHT, FULL)
	// JOIN: a table with no matching rows does not empty the result.
	outer bool
	// values holds the rows of (VALUES (...), ...) AS alias(cols), each a
	// list of expressions; cols names their columns.
	values [][][]ptok
	cols   []string
}

// pgSelect is a SELECT cut into the parts the catalog answers look at.
type pgSelect struct {
	items   [][]ptok // the top-level select list
	from    []fromTable
	where   []ptok   // top-level WHERE condition, nil when none
	orderBy [][]ptok // ORDER BY keys, with their ASC/DESC
	nparams int
}

// splitSelect cuts toks into a pgSelect. ok is false when toks is not a
// plain SELECT (a WITH query, a trailing UNION, ...).
func splitSelect(toks []ptok) (*pgSelect, bool) {
	for len(toks) > 0 && toks[len(toks)-1].op(";") {
		toks = toks[:len(toks)-1]
	}
	if len(toks) == 0 || !toks[0].kw("select") {
		return nil, false
	}
	q := &pgSelect{}
	for _, t := range toks {
		if t.kind == pParam {
			n := 0
			for _, d := range t.text {
				n = n*10 + int(d-'0')
				if n > 1<<16 {
					break
				}
			}
			q.nparams = max(q.nparams, n)
		}
	}
	// Cut at top-level clause keywords.
	clauses := map[string][]ptok{}
	order := []string{"select"}
	cur, start, depth := "select", 1, 0
	for i := 1; i <= len(toks); i++ {
		if i < len(toks) {
			switch t := toks[i]; {
			case t.op("(") || t.op("["):
				depth++
				continue
			case t.op(")") || t.op("]"):
				depth--
				continue
			case depth != 0 || t.kind != pIdent:
				continue
			case t.text == "union" || t.text == "intersect" || t.text == "except":
				return nil, false
			case t.text == "from" || t.text == "where" || t.text == "group" || t.text == "having" ||
				t.text == "order" || t.text == "limit" || t.text == "offset" || t.text == "for":
			default:
				continue
			}
		}
		if _, dup := clauses[cur]; dup {
			return nil, false
		}
		clauses[cur] = toks[start:i]
		if i < len(toks) {
			cur, start = toks[i].text, i+1
			order = append(order, cur)
		}
	}
	sel := clauses["select"]
	if len(sel) > 0 && sel[0].kw("distinct") {
		sel = sel[1:]
	}
	q.items = splitTop(sel, ",")
	if f, ok := clauses["from"]; ok {
		if q.from, ok = parseFrom(f); !ok {
			return nil, false
		}
	}
	q.where = clauses["where"]
	if o, ok := clauses["order"]; ok && len(o) > 1 && o[0].kw("by") {
		q.orderBy = splitTop(o[1:], ",")
	}
	return q, true
}

// splitTop splits toks at sep outside parentheses.
func splitTop(toks []ptok, sep string) [][]ptok {
	var out [][]ptok
	depth, start := 0, 0
	for i, t := range toks {
		switch {
		case t.op("(") || t.op("["):
			depth++
		case t.op(")") || t.op("]"):
			depth--
		case depth == 0 && t.op(sep):
			out = append(out, toks[start:i])
			start = i + 1
		}
	}
	if start < len(toks) {
		out = append(out, toks[start:])
	}
	return out
}

// parseFrom reads the tables of a FROM clause: comma lists and JOINs of
// (schema-qualified) names with optional aliases. A subquery in FROM makes
// it fail.
func parseFrom(toks []ptok) ([]fromTable, bool) {
	var out []fromTable
	expect, outer := true, false
	depth := 0
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.op("(") && expect && i+1 < len(toks) && toks[i+1].kw("values"):
			ft, next, ok := parseValues(toks, i)
			if !ok {
				return nil, false
			}
			out = append(out, ft)
			i, expect, outer = next-1, false, false
			continue
		case t.op("("):
			if expect {
				return nil, false
			}
			depth++
			continue
		case t.op(")"):
			depth--
			continue
		case depth > 0:
			continue
		case t.op(","):
			expect, outer = true, false
			continue
		case t.kw("left") || t.kw("right") || t.kw("full"):
			outer = true
			continue
		case t.kw("join"):
			expect = true
			continue
		case !expect || !t.isName():
			continue
		}
		ft := fromTable{name: t.text, outer: outer}
		if i+2 < len(toks) && toks[i+1].op(".") && toks[i+2].isName() {
			ft.schema, ft.name = t.text, toks[i+2].text
			i += 2
		}
		if i+1 < len(toks) && toks[i+1].kw("as") {
			i++
		}
		if i+1 < len(toks) && toks[i+1].isName() && !isClauseWord(toks[i+1].text) {
			ft.alias = toks[i+1].text
			i++
		}
		out = append(out, ft)
		expect, outer = false, false
	}
	return out, true
}

// parseValues reads "(VALUES (a, b), ...) [AS] alias [(col, ...)]" starting
// at toks[i] == "(" and returns the index after it.
func parseValues(toks []ptok, i int) (fromTable, int, bool) {
	end, depth := -1, 0
	for j := i; j < len(toks); j++ {
		if toks[j].op("(") {
			depth++
		} else if toks[j].op(")") {
			depth--
			if depth == 0 {
				end = j
				break
			}
		}
	}
	if end < 0 {
		return fromTable{}, 0, false
	}
	ft := fromTable{name: "values"}
	for _, row := range splitTop(toks[i+2:end], ",") {
		if len(row) < 2 || !row[0].op("(") || !row[len(row)-1].op(")") {
			return fromTable{}, 0, false
		}
		ft.values = append(ft.values, splitTop(row[1:len(row)-1], ","))
	}
	j := end + 1
	if j < len(toks) && toks[j].kw("as") {
		j++
	}
	if j < len(toks) && toks[j].isName() && !isClauseWord(toks[j].text) {
		ft.alias = toks[j].text
		j++
	}
	if j < len(toks) && toks[j].op("(") {
		for j++; j < len(toks) && !toks[j].op(")"); j++ {
			if toks[j].isName() {
				ft.cols = append(ft.cols, toks[j].text)
			}
		}
		j++
	}
	for n := len(ft.cols); len(ft.values) > 0 && n < len(ft.values[0]); n++ {
		ft.cols = append(ft.cols, "column"+strconv.Itoa(n+1))
	}
	return ft, j, true
}

func isClauseWord(w string) bool {
	switch w {
	case "on", "using", "left", "right", "full", "inner", "outer", "cross", "join", "natural", "where":
		return true
	}
	return false
}
