package sql

import (
	"sort"
	"strconv"
	"strings"
)

// castTypes maps the type names CAST(x AS t) and x::t accept to what the
// TiDB parser's (MySQL) CAST accepts. BOOLEAN and INTERVAL have no MySQL
// cast target: they travel as JSON and TIME, names that are otherwise
// refused here, so the planner reads them back unambiguously. Length and
// precision modifiers (VARCHAR(20), NUMERIC(10,2)) are accepted and ignored.
var castTypes = map[string]string{
	"TEXT": "CHAR", "VARCHAR": "CHAR", "STRING": "CHAR", "CHAR": "CHAR", "CHARACTER": "CHAR", "CHARACTER VARYING": "CHAR",
	"BIGINT": "SIGNED", "INT": "SIGNED", "INTEGER": "SIGNED", "INT8": "SIGNED", "INT4": "SIGNED", "INT2": "SIGNED",
	"SMALLINT": "SIGNED", "LONG": "SIGNED",
	"DOUBLE": "DOUBLE", "DOUBLE PRECISION": "DOUBLE", "REAL": "DOUBLE", "FLOAT": "DOUBLE", "FLOAT8": "DOUBLE",
	"FLOAT4": "DOUBLE", "NUMERIC": "DOUBLE", "DECIMAL": "DOUBLE",
	"BOOLEAN": "JSON", "BOOL": "JSON",
	"TIMESTAMP": "DATETIME", "DATETIME": "DATETIME",
	"INTERVAL": "TIME",
}

// CastBoolType and CastIntervalType are the MySQL cast targets BOOLEAN and
// INTERVAL are carried as (see castTypes).
const (
	CastBoolType     = "JSON"
	CastIntervalType = "TIME"
)

// aggRenames maps aggregate names the TiDB parser would misread to names it
// passes through as plain function calls.
var aggRenames = map[string]string{
	"VARIANCE": "VAR_SAMP", "STDDEV": "STDDEV_SAMP", "FIRST_VALUE": "__first_value", "LAST_VALUE": "__last_value",
}

// pgTypes are PostgreSQL type names that exist but are not supported here:
// refused with 0A000 rather than "does not exist".
var pgTypes = map[string]bool{
	"DATE": true, "TIME": true, "TIMESTAMPTZ": true, "TIMETZ": true, "JSON": true, "JSONB": true, "BYTEA": true,
	"UUID": true, "MONEY": true, "INET": true, "CIDR": true, "XML": true, "BIT": true, "VARBIT": true,
	"TIMESTAMP WITH TIME ZONE": true, "SERIAL": true, "BIGSERIAL": true,
}

// notFuncName lists keywords that may stand before "(" without naming a
// function, so that "WHERE (a + b)::text" casts only the parenthesis; they
// are neither operands nor type names of ::.
var notFuncName = map[string]bool{
	"AND": true, "OR": true, "NOT": true, "IN": true, "WHERE": true, "SELECT": true, "ON": true, "BY": true,
	"HAVING": true, "WHEN": true, "THEN": true, "ELSE": true, "CASE": true, "AS": true, "IS": true,
	"BETWEEN": true, "LIKE": true, "ILIKE": true, "FROM": true, "VALUES": true, "EXISTS": true, "DISTINCT": true,
	"ALL": true, "ANY": true, "SOME": true, "LIMIT": true, "OFFSET": true, "ESCAPE": true, "WITH": true,
	"SET": true, "INTO": true, "USING": true, "JOIN": true, "UNION": true, "FOR": true, "RETURN": true,
	"LEADING": true, "TRAILING": true, "BOTH": true, "OVER": true, "FILTER": true, "XOR": true, "DIV": true,
	"MOD": true, "ASC": true, "DESC": true, "END": true,
}

// rewrite is a SELECT/INSERT body rewritten for the TiDB parser, with a map
// from byte offsets in the rewritten text back to the original, so syntax
// errors point at what the user typed.
type rewrite struct {
	text  string
	orig  string
	base  int // byte offset of the body inside the whole statement
	edits []edit
}

type edit struct{ newStart, newEnd, origStart, origEnd int }

// origOffset maps an offset in r.text to an offset in the whole statement.
func (r *rewrite) origOffset(off int) int {
	delta := 0
	for _, e := range r.edits {
		if off < e.newStart {
			break
		}
		if off < e.newEnd {
			return r.base + e.origStart
		}
		delta = e.origEnd - e.newEnd
	}
	return r.base + off + delta
}

// change replaces src[start:end] (byte offsets in the whole statement) with
// repl; start == end is an insertion.
type change struct {
	start, end int
	repl       string
	seq        int
}

// rewriteBody rewrites src[start:] (tokens toks, already lexed from src) for
// the TiDB parser:
//
//	INTERVAL '1' MINUTE         → __ivl(60000)
//	TRUE, FALSE                 → __bool(1), __bool(0)
//	SESSION(                    → __session(
//	CAST(x AS BOOLEAN)          → CAST(x AS JSON)   (see castTypes)
//	x::bigint, (a + b)::text    → CAST(x AS SIGNED), CAST((a + b) AS CHAR)
//	a || b                      → a | b
//
// || becomes |, MySQL's bitwise OR, because that operator sits where
// PostgreSQL puts || (below + and -, above comparisons), while MySQL's own
// PIPES_AS_CONCAT binds tighter than * and cannot be told apart from a
// CONCAT() call, whose NULL handling differs. A | the user wrote is refused.
func rewriteBody(src string, toks []Token, start int) (*rewrite, error) {
	first := sort.Search(len(toks), func(k int) bool { return toks[k].Start >= start })
	var changes []change
	emit := func(s, e int, repl string) {
		changes = append(changes, change{start: s, end: e, repl: repl, seq: len(changes)})
	}
	// atoms maps the index of the last token of a rewritten operand (an
	// INTERVAL literal, a :: cast) to the index of its first token, so that a
	// following :: applies to all of it.
	atoms := map[int]int{}
	var castDepth []int // paren depths at which a CAST( is open
	var castTok []int   // the CAST token of each
	var opener []int    // built at the first ::
	depth := 0
	subst := map[int]string{} // replacements of brackets closed later (pgsyntax.go)
	fromDepth := -1           // paren depth of the FROM clause being read, -1: none
	for i := first; i < len(toks); i++ {
		t := toks[i]
		_, substituted := subst[i]
		switch {
		case substituted: // replaced below; no other rewrite applies
		case t.Is("FROM"):
			fromDepth = depth
		case depth == fromDepth && (t.Is("WHERE") || t.Is("GROUP") || t.Is("HAVING") || t.Is("ORDER") ||
			t.Is("LIMIT") || t.Is("UNION") || t.Is("OFFSET")):
			fromDepth = -1
		case depth == fromDepth && t.Kind == TokIdent && i > first && i+1 < len(toks) &&
			(toks[i-1].Is("FROM") || toks[i-1].Is("JOIN") || toks[i-1].Is(",")):
			// A function in FROM (generate_series(...) s): the parser has no
			// table functions (see tableFunc).
			k := i
			for k+2 < len(toks) && toks[k+1].Is(".") {
				k += 2
			}
			if k+1 < len(toks) && toks[k+1].Is("(") {
				if rp := matching(toks, k+1); rp > 0 {
					tableFunc(toks, k, rp, t.Start, subst, emit)
					i = k
					continue
				}
			}
		case t.Kind == TokIdent && i > first && toks[i-1].Is("AS") && !notFuncName[strings.ToUpper(t.Text)] &&
			len(castDepth) == 0:
			// An unquoted alias folds to lower case, as PostgreSQL folds
			// every unquoted name (AS TABLE_CAT is column table_cat); quoted,
			// it may be a word MySQL reserves (AS keys).
			emit(t.Start, t.End, `"`+strings.ToLower(t.Text)+`"`)
			continue
		case t.Kind == TokIdent && i > first && toks[i-1].Is(".") && (i+1 >= len(toks) || !toks[i+1].Is("(")) &&
			!t.Is("*"):
			// A qualified column name: quoted, it may be a word MySQL
			// reserves (result.keys).
			emit(t.Start, t.End, `"`+strings.ToLower(t.Text)+`"`)
			continue
		}
		paren := t.Is("(") || t.Is(")")
		if r, ok := subst[i]; ok {
			emit(t.Start, t.End, r)
			if !paren {
				continue
			}
		} else if !paren {
			last, handled, err := pgRewrite(src, toks, i, first, atoms, subst, emit)
			if err != nil {
				return nil, err
			}
			if handled {
				i = last
				continue
			}
		}
		switch {
		case t.Is("("):
			depth++
			if i > first && toks[i-1].Is("CAST") {
				castDepth = append(castDepth, depth)
				castTok = append(castTok, i-1)
			}
			if i+1 < len(toks) && toks[i+1].Is("VALUES") {
				if err := valuesTable(src, toks, i, emit); err != nil {
					return nil, err
				}
				i++ // VALUES
			}
		case t.Is(")"):
			if n := len(castDepth); n > 0 && castDepth[n-1] == depth {
				castDepth, castTok = castDepth[:n-1], castTok[:n-1]
			}
			depth--
		case t.Is("AS") && len(castDepth) > 0 && castDepth[len(castDepth)-1] == depth:
			repl, end, err := castType(src, toks, i+1)
			if err != nil {
				return nil, err
			}
			if strings.HasPrefix(repl, "__") { // CAST(x AS regclass) → __regclass(x)
				c := toks[castTok[len(castTok)-1]]
				emit(c.Start, c.End, repl)
				emit(t.Start, toks[end].End, "")
				i = end
				continue
			}
			emit(toks[i+1].Start, toks[end].End, repl)
			i = end
		case t.Is("::"):
			if opener == nil {
				opener = openers(toks, first)
			}
			ps, err := primaryStartOf(src, toks, i, first, atoms, opener)
			if err != nil {
				return nil, err
			}
			repl, end, err := castType(src, toks, i+1)
			if err != nil {
				return nil, err
			}
			if strings.HasPrefix(repl, "__") { // a cast the planner does as a function (pgFuncCasts)
				emit(toks[ps].Start, toks[ps].Start, repl+"(")
				emit(t.Start, toks[end].End, ")")
				atoms[end] = ps
				i = end
				continue
			} else {
				emit(toks[ps].Start, toks[ps].Start, "CAST(")
				emit(t.Start, toks[end].End, " AS "+repl+")")
			}
			atoms[end] = ps
			i = end
		case t.Is("||"):
			emit(t.Start, t.End, "|")
		case t.Is("|"):
			return nil, Errorf(CodeUndefinedFunc, "operator does not exist: |").
				WithHint("bitwise operators are not supported; || concatenates text").WithPos(charPos(src, t.Start))
		case t.Is("INTERVAL"):
			ms, next, err := parseInterval(src, toks, i)
			if err != nil {
				return nil, err
			}
			emit(t.Start, toks[next-1].End, IntervalFunc+"("+strconv.FormatInt(ms, 10)+")")
			atoms[next-1] = i
			i = next - 1
		case t.Is("SESSION") && i+1 < len(toks) && toks[i+1].Is("("):
			emit(t.Start, t.End, SessionFunc)
		case i+1 < len(toks) && toks[i+1].Is("(") && aggRenames[strings.ToUpper(src[t.Start:t.End])] != "" &&
			!(i > first && toks[i-1].Is(".")):
			// PostgreSQL's VARIANCE and STDDEV are the sample forms (the TiDB
			// parser would read them as MySQL's population forms), and
			// FIRST_VALUE/LAST_VALUE are aggregates here, not only window
			// functions the parser refuses without OVER.
			emit(t.Start, t.End, aggRenames[strings.ToUpper(src[t.Start:t.End])])
		case (t.Is("TRUE") || t.Is("FALSE")) && !(i > first && (toks[i-1].Is("IS") || toks[i-1].Is("NOT"))):
			// The TiDB parser reads TRUE as the integer 1; keep it boolean.
			v := "1"
			if t.Is("FALSE") {
				v = "0"
			}
			emit(t.Start, t.End, BoolFunc+"("+v+")")
		}
	}
	// Insertions sort before a replacement at the same offset: CAST( goes in
	// front of a rewritten TRUE or INTERVAL, not after it.
	sort.SliceStable(changes, func(a, b int) bool {
		ca, cb := changes[a], changes[b]
		if ca.start != cb.start {
			return ca.start < cb.start
		}
		insA, insB := ca.start == ca.end, cb.start == cb.end
		if insA && insB {
			// Two openings at one place: the later one wraps the earlier
			// (x::regtype::text is CAST(__regtype(x) AS CHAR)).
			return ca.seq > cb.seq
		}
		return insA && !insB
	})
	r := &rewrite{orig: src, base: start}
	var b strings.Builder
	copied := start // next original byte not yet copied
	for _, c := range changes {
		if c.start < copied {
			return nil, syntaxAt(src, c.start, "cannot read this expression")
		}
		b.WriteString(src[copied:c.start])
		ns := b.Len()
		b.WriteString(c.repl)
		r.edits = append(r.edits, edit{newStart: ns, newEnd: b.Len(), origStart: c.start - start, origEnd: c.end - start})
		copied = c.end
	}
	b.WriteString(src[copied:])
	r.text = b.String()
	return r, nil
}

// primaryStart finds the first token of the operand of the :: at toks[i]:
// a name (possibly qualified), a literal, a parenthesis, a function call, a
// CASE ... END, or an operand already rewritten (atoms).
//
// opener maps the index of each ")" and END to that of its "(" or CASE
// (-1: none), computed once per statement: scanning back from every ::
// made "((x::int)::int)..." quadratic.
func primaryStartOf(src string, toks []Token, i, first int, atoms map[int]int, opener []int) (int, error) {
	j := i - 1
	if j < first {
		return 0, syntaxAt(src, toks[i].Start, "nothing to cast before ::")
	}
	if s, ok := atoms[j]; ok {
		return s, nil
	}
	t := toks[j]
	switch {
	case t.Is(")"):
		k := opener[j]
		if k < first {
			return 0, syntaxAt(src, t.Start, "unbalanced parenthesis before ::")
		}
		if k-1 >= first && toks[k-1].Kind == TokIdent && !notFuncName[strings.ToUpper(toks[k-1].Text)] {
			return k - 1, nil // a function call
		}
		return k, nil
	case t.Is("END"):
		if k := opener[j]; k >= first {
			return k, nil
		}
		return 0, syntaxAt(src, t.Start, "END without CASE before ::")
	case t.Kind == TokString:
		if j-1 >= first && (toks[j-1].Is("TIMESTAMP") || toks[j-1].Is("DATE")) {
			return j - 1, nil // a typed literal
		}
		return j, nil
	case t.Kind == TokNumber, t.Kind == TokParam:
		return j, nil
	case t.Kind == TokQIdent, t.Kind == TokIdent && !notFuncName[strings.ToUpper(t.Text)]:
		k := j
		for k-2 >= first && toks[k-1].Is(".") && (toks[k-2].Kind == TokIdent || toks[k-2].Kind == TokQIdent) {
			k -= 2
		}
		return k, nil
	}
	return 0, syntaxAt(src, toks[i].Start, "cannot apply :: to %q", t.Text)
}

// primaryStart is primaryStartOf for a single lookup.
func primaryStart(src string, toks []Token, i, first int, atoms map[int]int) (int, error) {
	return primaryStartOf(src, toks, i, first, atoms, openers(toks, first))
}

// openers returns, for each ")" and END of toks[first:], the index of the
// "(" or CASE it closes, -1 when it closes none; other entries are -1.
func openers(toks []Token, first int) []int {
	out := make([]int, len(toks))
	var parens, cases []int
	for k := range toks {
		out[k] = -1
		if k < first {
			continue
		}
		switch t := toks[k]; {
		case t.Is("("):
			parens = append(parens, k)
		case t.Is(")") && len(parens) > 0:
			out[k] = parens[len(parens)-1]
			parens = parens[:len(parens)-1]
		case t.Is("CASE"):
			cases = append(cases, k)
		case t.Is("END") && len(cases) > 0:
			out[k] = cases[len(cases)-1]
			cases = cases[:len(cases)-1]
		}
	}
	return out
}

// castType reads the type name starting at toks[k] and returns its MySQL
// cast target and the index of its last token (modifiers included).
func castType(src string, toks []Token, k int) (string, int, error) {
	if k >= len(toks) || (toks[k].Kind != TokIdent && toks[k].Kind != TokQIdent) ||
		(toks[k].Kind == TokIdent && notFuncName[strings.ToUpper(toks[k].Text)]) {
		off := len(src)
		if k < len(toks) {
			off = toks[k].Start
		}
		return "", k, syntaxAt(src, off, "expected a type name (TEXT, BIGINT, DOUBLE, BOOLEAN, TIMESTAMP or INTERVAL)")
	}
	if toks[k].Is("pg_catalog") && k+2 < len(toks) && toks[k+1].Is(".") { // pg_catalog.int8
		k += 2
	}
	t := toks[k]
	name := strings.ToUpper(t.Text)
	end := k
	words := func(ws ...string) bool {
		for n, w := range ws {
			if end+1+n >= len(toks) || !toks[end+1+n].Is(w) {
				return false
			}
		}
		end += len(ws)
		return true
	}
	switch name {
	case "DOUBLE":
		if words("PRECISION") {
			name = "DOUBLE PRECISION"
		}
	case "CHARACTER":
		if words("VARYING") {
			name = "CHARACTER VARYING"
		}
	}
	// Modifiers: VARCHAR(20), NUMERIC(10, 2), TIMESTAMP(3).
	if end+1 < len(toks) && toks[end+1].Is("(") {
		m := end + 2
		for m < len(toks) && (toks[m].Kind == TokNumber || toks[m].Is(",")) {
			m++
		}
		if m >= len(toks) || !toks[m].Is(")") {
			return "", k, syntaxAt(src, toks[end+1].Start, "type modifiers must be numbers, as in VARCHAR(20)")
		}
		end = m
	}
	if end+2 < len(toks) && toks[end+1].Is("[") && toks[end+2].Is("]") { // int2[]: arrays travel as text
		return ArrayCastFunc, end + 2, nil
	}
	if t.Kind == TokQIdent && t.Text == "char" { // "char", PostgreSQL's one-byte type
		name = "CHAR"
	}
	if f, ok := pgFuncCasts[name]; ok {
		return f, end, nil
	}
	if name == "NAME" {
		name = "TEXT"
	}
	if name == "TIMESTAMP" {
		switch {
		case words("WITHOUT", "TIME", "ZONE"):
		case words("WITH", "TIME", "ZONE"):
			name = "TIMESTAMP WITH TIME ZONE"
		}
	}
	repl, ok := castTypes[name]
	if !ok {
		if pgTypes[name] {
			return "", k, Errorf(CodeNotSupported, "type %s is not supported", strings.ToLower(name)).
				WithHint("cast to TEXT, BIGINT, DOUBLE, BOOLEAN, TIMESTAMP or INTERVAL").WithPos(charPos(src, t.Start))
		}
		return "", k, Errorf("42704", "type %q does not exist", t.Text).
			WithHint("cast to TEXT, BIGINT, DOUBLE, BOOLEAN, TIMESTAMP or INTERVAL").WithPos(charPos(src, t.Start))
	}
	return repl, end, nil
}
