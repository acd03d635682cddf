package sql

import (
	"strconv"
	"strings"
)

// PostgreSQL syntax the TiDB parser cannot read, rewritten once here for
// every query into function calls the planner knows (all named with a
// leading "__"):
//
//	E'a\nb'                       → 'a<newline>b'
//	a OPERATOR(pg_catalog.~) b    → a REGEXP b          (also !~, ~*, !~*)
//	a ~ b, a !~ b                 → a REGEXP b, a NOT REGEXP b
//	a ~* b                        → a REGEXP __ci(b)
//	x COLLATE pg_catalog.default  → x
//	ARRAY[a, b]                   → __array(a, b)
//	ARRAY(SELECT ...)             → __arraysub((SELECT ...))
//	x = ANY(ARRAY[a, b])          → x IN (a, b)          (<> ALL: NOT IN)
//	x op ANY(arr), x op ALL(arr)  → __any('op', x, (arr)), __all('op', x, (arr))
//	arr[i]                        → __subscript(arr, i)
//	(composite).field             → __field((composite), 'field')
//	x LIKE a || '%'               → x LIKE (a || '%')   (MySQL's LIKE takes a simple pattern)
//	array_agg(x ORDER BY k)       → __array_agg_by(x, k)     (also string_agg(x, sep ORDER BY k))
//	x::regclass, x::oid, ...      → __regclass(x), __oid(x), ... (pgFuncCasts)
//	(VALUES (1, 'a'), (2, 'b')) s(n, t)
//	                              → (SELECT 1 AS "n", 'a' AS "t" UNION ALL SELECT 2, 'b') s
//	ORDER BY x DESC NULLS LAST    → ORDER BY __nulls_last(x) DESC  (also NULLS FIRST)
//	EXTRACT(epoch FROM x)         → date_part('epoch', x)
//	OVERLAY(s PLACING r FROM n FOR k) → overlay(s, r, n, k)
//	a IS NOT DISTINCT FROM b      → a <=> b
//	a IS DISTINCT FROM b          → NOT a <=> b
//	div(a, b)                     → __div(a, b)
//
// Arrays are not a column type: an array value is carried as its
// PostgreSQL text form ('{a,b}'), which is what clients print.

// Function names of the rewrites above.
const (
	ArrayFunc     = "__array"
	ArraySubFunc  = "__arraysub"
	AnyFunc       = "__any"
	AllFunc       = "__all"
	SubscriptFunc = "__subscript"
	CIFunc        = "__ci"
	ArrayCastFunc = "__array_cast"
	// TableFuncPrefix marks a function called in FROM (tableFunc).
	TableFuncPrefix = "__tablefunc_"
	FieldFunc       = "__field"
	// NullsFirstFunc and NullsLastFunc wrap an ORDER BY item that says
	// NULLS FIRST or NULLS LAST; the planner unwraps them (never called).
	NullsFirstFunc = "__nulls_first"
	NullsLastFunc  = "__nulls_last"
	// DivFunc is PostgreSQL's div(a, b), which MySQL's DIV operator hides.
	DivFunc = "__div"
)

// pgFuncCasts are the casts to PostgreSQL's object-identifier and array
// types: a function of the planner each, because their result depends on
// the catalog (regclass) or has no engine type (arrays).
var pgFuncCasts = map[string]string{
	"REGCLASS": "__regclass", "REGTYPE": "__regtype", "REGPROC": "__regproc", "REGPROCEDURE": "__regproc",
	"REGNAMESPACE": "__regnamespace", "REGROLE": "__regrole", "OID": "__oid",
	"INT2VECTOR": ArrayCastFunc, "OIDVECTOR": ArrayCastFunc,
}

// matching returns the index of the token closing the bracket at toks[i]
// ("(" or "["), or -1.
func matching(toks []Token, i int) int {
	open, closeTok := toks[i].Text, ")"
	if open == "[" {
		closeTok = "]"
	}
	d := 0
	for k := i; k < len(toks); k++ {
		switch {
		case toks[k].Is(open):
			d++
		case toks[k].Is(closeTok):
			d--
			if d == 0 {
				return k
			}
		}
	}
	return -1
}

// orderItemStart finds the first token of the ORDER BY item whose
// expression ends at toks[end]: the token after the "BY" or "," that
// precedes it outside any bracket.
func orderItemStart(src string, toks []Token, end, first int) (int, error) {
	depth := 0
	for k := end; k > first; k-- {
		switch {
		case toks[k].Is(")") || toks[k].Is("]"):
			depth++
		case toks[k].Is("(") || toks[k].Is("["):
			depth--
		}
		if depth < 0 {
			break
		}
		if depth == 0 && (toks[k-1].Is("BY") || toks[k-1].Is(",")) {
			return k, nil
		}
	}
	return 0, syntaxAt(src, toks[end].Start, "NULLS FIRST/LAST outside an ORDER BY")
}

// regexOp reads a regular-expression match operator starting at toks[i]:
// ~, !~, ~*, !~* (its tokens must touch). n is how many tokens it spans.
func regexOp(toks []Token, i int) (not, ci bool, n int, ok bool) {
	k := i
	if toks[k].Is("!") {
		if k+1 >= len(toks) || !toks[k+1].Is("~") || toks[k+1].Start != toks[k].End {
			return false, false, 0, false
		}
		not = true
		k++
	}
	if !toks[k].Is("~") {
		return false, false, 0, false
	}
	if k+1 < len(toks) && toks[k+1].Is("*") && toks[k+1].Start == toks[k].End {
		ci = true
		k++
	}
	return not, ci, k - i + 1, true
}

var comparisonOps = map[string]bool{"=": true, "<>": true, "!=": true, "<": true, "<=": true, ">": true, ">=": true}

// pgRewrite handles the token at toks[i] if it starts one of the rewrites
// above, returning the index of the last token it consumed. subst records
// replacements for closing brackets met later in the walk.
func pgRewrite(src string, toks []Token, i, first int, atoms map[int]int, subst map[int]string,
	emit func(s, e int, repl string)) (last int, handled bool, err error) {
	t := toks[i]
	switch {
	case t.Kind == TokString && (src[t.Start] == 'E' || src[t.Start] == 'e'):
		emit(t.Start, t.End, quoteString(t.Text))
		return i, true, nil

	case t.Is("NULLS") && i > first && i+1 < len(toks) && (toks[i+1].Is("FIRST") || toks[i+1].Is("LAST")):
		// ORDER BY item [ASC | DESC] NULLS FIRST | LAST: the TiDB parser
		// (MySQL) has no NULLS clause, so the item's expression is wrapped
		// in a marker function the planner reads back.
		end := i - 1 // last token of the expression
		if toks[end].Is("ASC") || toks[end].Is("DESC") {
			end--
		}
		start, err := orderItemStart(src, toks, end, first)
		if err != nil {
			return i, false, err
		}
		fn := NullsLastFunc
		if toks[i+1].Is("FIRST") {
			fn = NullsFirstFunc
		}
		emit(toks[start].Start, toks[start].Start, fn+"(")
		emit(toks[end].End, toks[end].End, ")")
		emit(toks[end].End, toks[i+1].End, src[toks[end].End:toks[i].Start])
		return i + 1, true, nil

	case t.Is("OPERATOR") && i+1 < len(toks) && toks[i+1].Is("("):
		rp := matching(toks, i+1)
		if rp < 0 {
			return i, false, syntaxAt(src, t.Start, "unbalanced OPERATOR(")
		}
		k := i + 2
		if k+1 < rp && toks[k+1].Is(".") { // schema-qualified: pg_catalog.~
			k += 2
		}
		var op strings.Builder
		for ; k < rp; k++ {
			op.WriteString(toks[k].Text)
		}
		o := op.String()
		var repl string
		switch {
		case o == "~":
			repl = " REGEXP "
		case o == "!~":
			repl = " NOT REGEXP "
		case comparisonOps[o]:
			repl = " " + o + " "
		default:
			return i, false, Errorf(CodeNotSupported, "operator OPERATOR(%s) is not supported", src[toks[i+2].Start:toks[rp-1].End]).
				WithPos(charPos(src, t.Start))
		}
		emit(t.Start, toks[rp].End, repl)
		return rp, true, nil

	case t.Is("~") || t.Is("!"):
		not, ci, n, ok := regexOp(toks, i)
		if !ok {
			return i, false, nil
		}
		repl := " REGEXP "
		if not {
			repl = " NOT REGEXP "
		}
		end := i + n - 1
		emit(t.Start, toks[end].End, repl)
		if ci {
			k := end + 1
			if k >= len(toks) || (toks[k].Kind != TokString && toks[k].Kind != TokParam && toks[k].Kind != TokIdent && toks[k].Kind != TokQIdent) {
				return i, false, Errorf(CodeNotSupported, "~* needs a literal, parameter or column as its pattern").WithPos(charPos(src, t.Start))
			}
			last := k
			for last+2 < len(toks) && toks[last+1].Is(".") {
				last += 2
			}
			emit(toks[k].Start, toks[k].Start, CIFunc+"(")
			emit(toks[last].End, toks[last].End, ")")
		}
		return end, true, nil

	case t.Is("LIKE") || t.Is("ILIKE"):
		d, concat, last := 0, false, -1
	scan:
		for k := i + 1; k < len(toks); k++ {
			switch u := toks[k]; {
			case u.Is("(") || u.Is("["):
				d++
			case u.Is(")") || u.Is("]"):
				if d == 0 {
					break scan
				}
				d--
			case d == 0 && (u.Is("AND") || u.Is("OR") || u.Is("ESCAPE") || u.Is("THEN") || u.Is("WHEN") ||
				u.Is("ELSE") || u.Is("END") || u.Is(",") || u.Is("ORDER") || u.Is("GROUP") || u.Is("LIMIT") ||
				u.Is(";") || u.Is("UNION") || u.Is("HAVING") || u.Is("AS") || comparisonOps[u.Text]):
				break scan
			case d == 0 && u.Is("||"):
				concat = true
			}
			last = k
		}
		if concat && last > i {
			// The parenthesis goes with the LIKE (a replacement), so it stays
			// outside a CAST( the pattern's first operand may get.
			emit(t.Start, t.End, strings.ToUpper(t.Text)+" (")
			emit(toks[last].End, toks[last].End, ")")
			return i, true, nil
		}
		return i, false, nil

	case (t.Is("ARRAY_AGG") || t.Is("STRING_AGG")) && i+1 < len(toks) && toks[i+1].Is("("):
		rp := matching(toks, i+1)
		if rp < 0 {
			return i, false, nil
		}
		d := 0
		for k := i + 2; k < rp; k++ {
			switch {
			case toks[k].Is("(") || toks[k].Is("["):
				d++
			case toks[k].Is(")") || toks[k].Is("]"):
				d--
			case d == 0 && toks[k].Is("ORDER") && k+1 < rp && toks[k+1].Is("BY"):
				if toks[rp-1].Is("DESC") {
					return i, false, Errorf(CodeNotSupported, "%s(... ORDER BY ... DESC) is not supported", strings.ToLower(t.Text)).
						WithPos(charPos(src, toks[rp-1].Start))
				}
				emit(t.Start, t.End, "__"+strings.ToLower(t.Text)+"_by")
				emit(toks[k].Start, toks[k+1].End, ",")
				if toks[rp-1].Is("ASC") {
					subst[rp-1] = ""
				}
				return i, true, nil
			}
		}

	case t.Is("FULL") && i+1 < len(toks) && (toks[i+1].Is("JOIN") || toks[i+1].Is("OUTER")),
		t.Is("LATERAL"),
		t.Is("DISTINCT") && i+1 < len(toks) && toks[i+1].Is("ON"):
		what := strings.ToUpper(t.Text)
		switch {
		case t.Is("FULL"):
			what = "FULL JOIN"
		case t.Is("DISTINCT"):
			what = "DISTINCT ON"
		}
		return i, false, Errorf(CodeNotSupported, "%s is not supported", what).WithPos(charPos(src, t.Start))

	case t.Is("COLLATE"):
		k := i + 1
		if k < len(toks) && (toks[k].Kind == TokIdent || toks[k].Kind == TokQIdent) {
			for k+2 < len(toks) && toks[k+1].Is(".") {
				k += 2
			}
			emit(t.Start, toks[k].End, "")
			return k, true, nil
		}

	case t.Is("ARRAY") && i+1 < len(toks) && (toks[i+1].Is("[") || toks[i+1].Is("(")):
		rb := matching(toks, i+1)
		if rb < 0 {
			return i, false, syntaxAt(src, t.Start, "unbalanced ARRAY")
		}
		if toks[i+1].Is("[") {
			emit(t.Start, toks[i+1].End, ArrayFunc+"(")
			subst[rb] = ")"
			return i + 1, true, nil
		}
		// ARRAY(SELECT ...): the "(" stays for the walk's depth count.
		emit(t.Start, t.End, ArraySubFunc+"(")
		subst[rb] = "))"
		return i, true, nil

	case comparisonOps[t.Text] && t.Kind == TokPunct && i+2 < len(toks) &&
		(toks[i+1].Is("ANY") || toks[i+1].Is("SOME") || toks[i+1].Is("ALL")) && toks[i+2].Is("("):
		rp := matching(toks, i+2)
		if rp < 0 || i+3 >= len(toks) || toks[i+3].Is("SELECT") {
			return i, false, nil // a subquery: the parser reads x op ANY (SELECT ...)
		}
		all := toks[i+1].Is("ALL")
		op := t.Text
		if op == "!=" {
			op = "<>"
		}
		if toks[i+3].Is("ARRAY") && i+4 < len(toks) && toks[i+4].Is("[") {
			if rb := matching(toks, i+4); rb == rp-1 && ((op == "=" && !all) || (op == "<>" && all)) {
				in := " IN "
				if all {
					in = " NOT IN "
				}
				emit(t.Start, toks[i+1].End, in)
				subst[i+3], subst[i+4], subst[rb] = "", "", ""
				return i + 1, true, nil
			}
		}
		ps, err := primaryStart(src, toks, i, first, atoms)
		if err != nil {
			return i, false, err
		}
		fn := AnyFunc
		if all {
			fn = AllFunc
		}
		emit(toks[ps].Start, toks[ps].Start, fn+"('"+op+"', ")
		emit(t.Start, toks[i+1].End, ", ")
		subst[rp] = "))"
		return i + 1, true, nil

	case t.Is(".") && i > first && toks[i-1].Is(")") && i+1 < len(toks) &&
		(toks[i+1].Kind == TokIdent || toks[i+1].Kind == TokQIdent):
		open := -1
		for k, d := i-1, 0; k >= first; k-- {
			if toks[k].Is(")") {
				d++
			} else if toks[k].Is("(") {
				d--
				if d == 0 {
					open = k
					break
				}
			}
		}
		if open < 0 || (open > first && toks[open-1].Kind == TokIdent && !notFuncName[strings.ToUpper(toks[open-1].Text)]) {
			return i, false, nil // f(x).y is not a field access
		}
		field := toks[i+1].Text
		if toks[i+1].Kind == TokIdent {
			field = strings.ToLower(field)
		}
		emit(toks[open].Start, toks[open].Start, FieldFunc+"(")
		emit(t.Start, toks[i+1].End, ", "+quoteString(field)+")")
		atoms[i+1] = open
		return i + 1, true, nil

	case t.Is("[") && i > first:
		rb := matching(toks, i)
		if rb < 0 {
			return i, false, syntaxAt(src, t.Start, "unbalanced [")
		}
		ps, err := primaryStart(src, toks, i, first, atoms)
		if err != nil {
			return i, false, err
		}
		emit(toks[ps].Start, toks[ps].Start, SubscriptFunc+"(")
		emit(t.Start, t.End, ", ")
		subst[rb] = ")"
		atoms[rb] = ps
		return i, true, nil

	case t.Is("EXTRACT") && i+3 < len(toks) && toks[i+1].Is("(") && toks[i+3].Is("FROM") &&
		(toks[i+2].Kind == TokIdent || toks[i+2].Kind == TokQIdent || toks[i+2].Kind == TokString):
		// EXTRACT(field FROM x) → date_part('field', x): the TiDB parser knows
		// MySQL's units only (no EPOCH, DOW, DOY, ISODOW, ...).
		// The "(" stays for the walk's depth count.
		emit(t.Start, t.End, "date_part")
		subst[i+2], subst[i+3] = quoteString(strings.ToLower(toks[i+2].Text)), ","
		return i, true, nil

	case t.Is("DIV") && i+1 < len(toks) && toks[i+1].Is("("):
		// div(a, b) is a function in PostgreSQL, MySQL's DIV an operator.
		emit(t.Start, t.End, DivFunc)
		return i, true, nil

	case t.Is("OVERLAY") && i+1 < len(toks) && toks[i+1].Is("("):
		// OVERLAY(s PLACING r FROM n [FOR k]) → overlay(s, r, n [, k]).
		rp := matching(toks, i+1)
		if rp < 0 {
			return i, false, syntaxAt(src, t.Start, "unbalanced OVERLAY(")
		}
		d := 0
		for k := i + 2; k < rp; k++ {
			switch u := toks[k]; {
			case u.Is("(") || u.Is("["):
				d++
			case u.Is(")") || u.Is("]"):
				d--
			case d == 0 && (u.Is("PLACING") || u.Is("FROM") || u.Is("FOR")):
				subst[k] = ","
			}
		}
		return i, false, nil

	case t.Is("IS") && i+2 < len(toks) && toks[i+1].Is("DISTINCT") && toks[i+2].Is("FROM"),
		t.Is("IS") && i+3 < len(toks) && toks[i+1].Is("NOT") && toks[i+2].Is("DISTINCT") && toks[i+3].Is("FROM"):
		// a IS NOT DISTINCT FROM b → a <=> b (MySQL's NULL-safe equality, at
		// the precedence of =); a IS DISTINCT FROM b → NOT a <=> b, NOT
		// binding looser than <=> and tighter than AND.
		if toks[i+1].Is("NOT") {
			emit(t.Start, toks[i+3].End, " <=> ")
			return i + 3, true, nil
		}
		emit(toks[operandStart(toks, i, first)].Start, toks[operandStart(toks, i, first)].Start, "NOT ")
		emit(t.Start, toks[i+2].End, " <=> ")
		return i + 2, true, nil

	case t.Is("(") && i+1 < len(toks) && toks[i+1].Is("VALUES"):
		return i, true, valuesTable(src, toks, i, emit)
	}
	return i, false, nil
}

// operandStart finds the first token of the comparison operand that ends
// just before toks[i]: back to the nearest AND, OR, NOT, comma, opening
// bracket or clause keyword outside brackets.
func operandStart(toks []Token, i, first int) int {
	depth := 0
	for k := i - 1; k >= first; k-- {
		u := toks[k]
		switch {
		case u.Is(")") || u.Is("]") || u.Is("END"):
			depth++
			continue
		case u.Is("(") || u.Is("[") || u.Is("CASE"):
			if depth == 0 {
				return k + 1
			}
			depth--
			continue
		}
		if depth == 0 && (u.Is("AND") || u.Is("OR") || u.Is("NOT") || u.Is("XOR") || u.Is(",") || u.Is("SELECT") ||
			u.Is("WHERE") || u.Is("WHEN") || u.Is("THEN") || u.Is("ELSE") || u.Is("ON") || u.Is("HAVING") ||
			u.Is("BY") || u.Is("IS") || u.Is("LIKE") || u.Is("ILIKE") || u.Is("IN") || comparisonOps[u.Text]) {
			return k + 1
		}
	}
	return first
}

// valuesTable rewrites a VALUES list in FROM, (VALUES (..), ..) alias(cols),
// into a UNION ALL of SELECTs naming the columns; the walk goes on inside it
// (only the brackets and commas that frame the rows are replaced).
func valuesTable(src string, toks []Token, i int, emit func(s, e int, repl string)) error {
	rp := matching(toks, i)
	if rp < 0 {
		return syntaxAt(src, toks[i].Start, "unbalanced (VALUES")
	}
	type row struct {
		open, close int
		ends        []int // last token of each element
	}
	var rows []row
	k := i + 2
	for k < rp {
		if !toks[k].Is("(") {
			return syntaxAt(src, toks[k].Start, "expected ( starting a VALUES row")
		}
		c := matching(toks, k)
		if c < 0 || c > rp {
			return syntaxAt(src, toks[k].Start, "unbalanced VALUES row")
		}
		r := row{open: k, close: c}
		d := 0
		for m := k + 1; m < c; m++ {
			switch {
			case toks[m].Is("(") || toks[m].Is("["):
				d++
			case toks[m].Is(")") || toks[m].Is("]"):
				d--
			case d == 0 && toks[m].Is(","):
				r.ends = append(r.ends, m-1)
			}
		}
		r.ends = append(r.ends, c-1)
		rows = append(rows, r)
		k = c + 1
		if k < rp && !toks[k].Is(",") {
			return syntaxAt(src, toks[k].Start, "expected , between VALUES rows")
		}
		k++
	}
	if len(rows) == 0 {
		return syntaxAt(src, toks[i].Start, "VALUES needs a row")
	}
	// Column names: alias(a, b, ...) after the list, else column1, column2, ...
	names := make([]string, len(rows[0].ends))
	for n := range names {
		names[n] = "column" + strconv.Itoa(n+1)
	}
	a := rp + 1
	if a < len(toks) && toks[a].Is("AS") {
		a++
	}
	if a+1 < len(toks) && (toks[a].Kind == TokIdent || toks[a].Kind == TokQIdent) && toks[a+1].Is("(") {
		cl := matching(toks, a+1)
		if cl < 0 {
			return syntaxAt(src, toks[a+1].Start, "unbalanced column list")
		}
		n := 0
		for m := a + 2; m < cl; m++ {
			if toks[m].Is(",") {
				continue
			}
			if n < len(names) {
				names[n] = toks[m].Text
				if toks[m].Kind == TokIdent {
					names[n] = strings.ToLower(names[n])
				}
			}
			n++
		}
		emit(toks[a+1].Start, toks[cl].End, "")
	}
	emit(toks[i+1].Start, toks[rows[0].open].End, "SELECT ")
	for r, rw := range rows {
		if len(rw.ends) != len(names) {
			return Errorf(CodeSyntax, "VALUES lists must all be the same length").WithPos(charPos(src, toks[rw.open].Start))
		}
		if r == 0 {
			for n, e := range rw.ends {
				emit(toks[e].End, toks[e].End, ` AS "`+strings.ReplaceAll(names[n], `"`, `""`)+`"`)
			}
		}
		if r+1 < len(rows) {
			emit(toks[rw.close].Start, toks[rows[r+1].open].End, " UNION ALL SELECT ")
		} else {
			emit(toks[rw.close].Start, toks[rw.close].End, "")
		}
	}
	return nil
}

// tableFunc rewrites a function in FROM, name(args) [AS] alias[(col)], the
// name's last token at toks[k] and its closing parenthesis at toks[rp],
// into a derived table the planner recognises:
//
//	generate_series(1, 3) AS s(r)  →  (SELECT __tablefunc_generate_series(1, 3) AS "r") s
//
// The arguments stay in place, for the walk to rewrite.
func tableFunc(toks []Token, k, rp, start int, subst map[int]string, emit func(s, e int, repl string)) {
	name := strings.ToLower(toks[k].Text)
	alias, col := name, name
	a := rp + 1
	if a < len(toks) && toks[a].Is("AS") {
		a++
	}
	if a < len(toks) && (toks[a].Kind == TokQIdent || (toks[a].Kind == TokIdent && !notFuncName[strings.ToUpper(toks[a].Text)] &&
		!toks[a].Is("JOIN") && !toks[a].Is("LEFT") && !toks[a].Is("RIGHT") && !toks[a].Is("INNER") &&
		!toks[a].Is("CROSS") && !toks[a].Is("FULL") && !toks[a].Is("NATURAL") && !toks[a].Is("GROUP") &&
		!toks[a].Is("ORDER") && !toks[a].Is("LIMIT") && !toks[a].Is("WHERE"))) {
		alias, col = toks[a].Text, toks[a].Text
		if toks[a].Kind == TokIdent {
			alias, col = strings.ToLower(alias), strings.ToLower(col)
		}
		// The alias tokens are dropped as the walk meets them (subst), so
		// that no other rewrite touches them.
		last := a
		if a+2 < len(toks) && toks[a+1].Is("(") && toks[a+2].Kind != TokPunct {
			if cl := matching(toks, a+1); cl == a+3 {
				col = toks[a+2].Text
				if toks[a+2].Kind == TokIdent {
					col = strings.ToLower(col)
				}
				last = cl
			}
		}
		for m := rp + 1; m <= last; m++ {
			subst[m] = ""
		}
	}
	emit(start, toks[k].End, "(SELECT "+TableFuncPrefix+name)
	subst[rp] = `) AS "` + strings.ReplaceAll(col, `"`, `""`) + `") "` + strings.ReplaceAll(alias, `"`, `""`) + `" `
}
