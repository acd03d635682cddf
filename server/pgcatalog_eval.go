package server

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/turbinesql/turbinesql/pgwire"
)

// The expression evaluator of catalog queries. Expressions are compiled
// over one vtable's rows: column references, constants, $n, comparisons,
// regular expressions (~, OPERATOR(pg_catalog.~)), LIKE, IN, IS NULL,
// AND/OR/NOT, simple and searched CASE, casts (ignored, except ::regclass
// of a name) and the functions of (*evaluator).call. Anything else
// (subqueries, arrays, unknown functions or columns) evaluates to
// unknown: NULL in a select list, and no filter at all in WHERE, so a
// condition the evaluator cannot judge never hides a row.

// unknownT is the value of an expression the evaluator cannot compute.
type unknownT struct{}

var unknown any = unknownT{}

type getter func(row map[string]any) any

func column(name string) getter { return func(row map[string]any) any { return row[name] } }

func constant(v any) getter { return func(map[string]any) any { return v } }

// node is a compiled expression and its result type.
type node struct {
	oid uint32
	get getter
}

var unknownNode = node{pgwire.OIDText, constant(unknown)}

// evaluator compiles expressions for one query.
type evaluator struct {
	s      *session
	params []pgwire.Param
	// strict makes anything not understood fail the query (failed is
	// set) rather than be unknown: used where the engine would otherwise
	// answer (SELECT without FROM).
	strict bool
	failed bool

	tbl     *vtable
	main    fromTable
	aliases map[string]string // alias (or table name) → table name
}

// joinCols maps a column of a table joined to the main one to the key in
// the main table's rows that holds it (pg_namespace n: n.oid is the row's
// namespace OID, n.nspname its namespace name).
var joinCols = map[string]map[string]string{
	"pg_namespace":   {"oid": "nsp_oid", "nspname": "nspname"},
	"pg_class":       {"oid": "rel_oid", "relname": "relname", "relkind": "relkind", "relnamespace": "nsp_oid"},
	"pg_type":        {"oid": "type_oid", "typname": "typname"},
	"pg_am":          {"oid": "relam", "amname": "amname"},
	"pg_description": {"description": "description", "objoid": "rel_oid"},
}

func (ev *evaluator) bind(tbl *vtable, from []fromTable, main fromTable) {
	ev.tbl, ev.main = tbl, main
	ev.aliases = map[string]string{}
	for _, ft := range from {
		ev.aliases[ft.name] = ft.name
		if ft.alias != "" {
			ev.aliases[ft.alias] = ft.name
		}
	}
}

// resolve finds the row key of a column reference.
func (ev *evaluator) resolve(qual, col string) (string, bool) {
	if ev.tbl == nil {
		return "", false
	}
	if qual == "" {
		if _, ok := ev.tbl.cols[col]; ok {
			return col, true
		}
		for _, t := range ev.aliases {
			if key, ok := joinCols[t][col]; ok && t != ev.main.name {
				if _, ok := ev.tbl.cols[key]; ok {
					return key, true
				}
			}
		}
		return "", false
	}
	t, ok := ev.aliases[qual]
	if !ok {
		return "", false
	}
	if qual == ev.main.alias || (ev.main.alias == "" && qual == ev.main.name) {
		_, ok := ev.tbl.cols[col]
		return col, ok
	}
	key, ok := joinCols[t][col]
	if !ok {
		return "", false
	}
	_, ok = ev.tbl.cols[key]
	return key, ok
}

// project evaluates the select list over the bound table's rows.
func (ev *evaluator) project(q *pgSelect) *pgwire.Result {
	var cols []pgwire.Column
	var gets []getter
	for _, item := range q.items {
		if len(item) == 1 && item[0].op("*") || len(item) == 3 && item[2].op("*") {
			for _, name := range sortedCols(ev.tbl) {
				cols = append(cols, pgwire.Column{Name: name, OID: ev.tbl.cols[name]})
				gets = append(gets, column(name))
			}
			continue
		}
		expr, name := splitAlias(item)
		if name == "" {
			name = defaultName(expr)
		}
		n := ev.compile(expr)
		cols = append(cols, pgwire.Column{Name: name, OID: n.oid})
		gets = append(gets, n.get)
	}
	res := &pgwire.Result{Columns: cols}
	for _, row := range ev.tbl.rows {
		out := make([]any, len(gets))
		for i, g := range gets {
			if v := g(row); v != unknown {
				out[i] = v
			}
		}
		res.Rows = append(res.Rows, out)
	}
	ev.sort(q.orderBy, res, ev.tbl.rows)
	res.Tag = "SELECT " + strconv.Itoa(len(res.Rows))
	return res
}

// sort orders res.Rows (made from the table rows src, in the same order)
// by ORDER BY keys: output column positions or names, or expressions
// over the table's rows. NULLs sort last, as in PostgreSQL.
func (ev *evaluator) sort(keys [][]ptok, res *pgwire.Result, src []map[string]any) {
	if len(keys) == 0 || len(res.Rows) < 2 {
		return
	}
	type key struct {
		get  func(i int) any
		desc bool
	}
	var ks []key
	for _, k := range keys {
		desc := false
		for len(k) > 0 {
			last := k[len(k)-1]
			switch {
			case last.kw("asc"):
				k = k[:len(k)-1]
			case last.kw("desc"):
				desc, k = true, k[:len(k)-1]
			case len(k) >= 2 && k[len(k)-2].kw("nulls"):
				k = k[:len(k)-2]
			default:
				goto parsed
			}
		}
	parsed:
		col := -1
		if len(k) == 1 && k[0].kind == pNumber {
			if n, err := strconv.Atoi(k[0].text); err == nil && n >= 1 && n <= len(res.Columns) {
				col = n - 1
			}
		} else if len(k) == 1 && k[0].isName() {
			for i, c := range res.Columns {
				if c.Name == k[0].text || k[0].kind == pIdent && strings.EqualFold(c.Name, k[0].text) {
					col = i
					break
				}
			}
		}
		if col >= 0 {
			ks = append(ks, key{func(i int) any { return res.Rows[i][col] }, desc})
			continue
		}
		strict := ev.strict
		ev.strict = false
		n := ev.compile(k)
		ev.strict = strict
		ks = append(ks, key{func(i int) any { return n.get(src[i]) }, desc})
	}
	// Sort a permutation: the keys read rows by their original index.
	perm := make([]int, len(res.Rows))
	for i := range perm {
		perm[i] = i
	}
	slices.SortStableFunc(perm, func(a, b int) int {
		for _, k := range ks {
			c := orderAny(k.get(a), k.get(b))
			if k.desc {
				c = -c
			}
			if c != 0 {
				return c
			}
		}
		return 0
	})
	rows := make([][]any, len(perm))
	for i, p := range perm {
		rows[i] = res.Rows[p]
	}
	res.Rows = rows
}

// orderAny compares two values for ORDER BY: NULL (and unknown) last,
// numbers numerically, the rest as text.
func orderAny(a, b any) int {
	an, bn := a == nil || a == unknown, b == nil || b == unknown
	switch {
	case an && bn:
		return 0
	case an:
		return 1
	case bn:
		return -1
	}
	if c, ok := orderValues(a, b); ok {
		return c
	}
	return strings.Compare(textOf(a), textOf(b))
}

// filter keeps the rows for which where is true or unknown.
func (ev *evaluator) filter(where []ptok) {
	if where == nil || len(ev.tbl.rows) == 0 {
		return
	}
	strict := ev.strict
	ev.strict = false
	cond := ev.compile(where)
	ev.strict = strict
	var out []map[string]any
	for _, row := range ev.tbl.rows {
		if v := cond.get(row); v == true || v == unknown {
			out = append(out, row)
		}
	}
	ev.tbl.rows = out
}

// sortedCols lists a vtable's columns for SELECT *: PostgreSQL's order is
// not kept here, so alphabetical.
func sortedCols(tbl *vtable) []string {
	names := make([]string, 0, len(tbl.cols))
	for n := range tbl.cols {
		if !internalCols[n] {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// internalCols are the row keys that stand for joined tables' columns or
// function results rather than columns of the table itself.
var internalCols = map[string]bool{
	"rel_oid": true, "nsp_oid": true, "type_oid": true, "description": true, "viewdef": true,
}

// splitAlias separates "expr [AS] alias".
func splitAlias(item []ptok) ([]ptok, string) {
	n := len(item)
	if n >= 3 && item[n-2].kw("as") && item[n-1].isName() {
		return item[:n-2], item[n-1].text
	}
	if n >= 2 && item[n-1].isName() && !item[n-1].kw("end") {
		prev := item[n-2]
		if prev.op(")") || prev.kind == pString || prev.kind == pNumber ||
			prev.isName() && !prev.kw("case") && !prev.kw("then") && !prev.kw("else") && !prev.kw("when") &&
				!prev.kw("is") && !prev.kw("not") && !prev.kw("and") && !prev.kw("or") && !prev.kw("collate") {
			return item[:n-1], item[n-1].text
		}
	}
	return item, ""
}

// defaultName is PostgreSQL's name for an unnamed column: the column or
// function name, "case", or "?column?".
func defaultName(expr []ptok) string {
	expr = stripCasts(expr)
	switch {
	case len(expr) == 0:
		return "?column?"
	case expr[0].kw("case"):
		return "case"
	case len(expr) == 1 && (expr[0].kw("null") || expr[0].kw("true") || expr[0].kw("false")):
		return "?column?"
	case len(expr) == 1 && expr[0].isName():
		return expr[0].text
	case len(expr) == 3 && expr[0].isName() && expr[1].op(".") && expr[2].isName():
		return expr[2].text
	}
	for i := 0; i+1 < len(expr); i++ {
		if expr[i].isName() && expr[i+1].op("(") {
			return expr[i].text
		}
	}
	return "?column?"
}

// stripCasts removes trailing ::type casts (and a trailing COLLATE).
func stripCasts(expr []ptok) []ptok {
	for {
		n := len(expr)
		switch {
		case n >= 2 && expr[n-2].op("::") && expr[n-1].isName():
			expr = expr[:n-2]
		case n >= 4 && expr[n-4].op("::") && expr[n-3].isName() && expr[n-2].op(".") && expr[n-1].isName():
			expr = expr[:n-4]
		case n >= 2 && expr[n-2].kw("collate") && expr[n-1].isName():
			expr = expr[:n-2]
		case n >= 4 && expr[n-4].kw("collate") && expr[n-2].op("."):
			expr = expr[:n-4]
		default:
			return expr
		}
	}
}

// compile compiles a whole expression; trailing tokens it cannot read make
// it unknown.
func (ev *evaluator) compile(toks []ptok) node {
	p := &exprParser{ev: ev, toks: toks}
	n := p.or()
	if p.i != len(toks) {
		ev.fail()
		return unknownNode
	}
	return n
}

func (ev *evaluator) fail() {
	if ev.strict {
		ev.failed = true
	}
}

// exprParser is a precedence-climbing parser producing nodes.
type exprParser struct {
	ev   *evaluator
	toks []ptok
	i    int
}

func (p *exprParser) peek() ptok {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ptok{}
}

func (p *exprParser) peekAt(k int) ptok {
	if p.i+k < len(p.toks) {
		return p.toks[p.i+k]
	}
	return ptok{}
}

// skipGroup skips a parenthesised (or bracketed) group starting at the
// current token and returns its inner tokens.
func (p *exprParser) skipGroup() []ptok {
	start, depth := p.i, 0
	for ; p.i < len(p.toks); p.i++ {
		t := p.toks[p.i]
		if t.op("(") || t.op("[") {
			depth++
		} else if t.op(")") || t.op("]") {
			depth--
			if depth == 0 {
				p.i++
				return p.toks[start+1 : p.i-1]
			}
		}
	}
	return p.toks[start+1:]
}

func (p *exprParser) or() node {
	left := p.and()
	for p.peek().kw("or") {
		p.i++
		l, r := left, p.and()
		left = node{pgwire.OIDBool, func(row map[string]any) any {
			a, b := l.get(row), r.get(row)
			switch {
			case a == true || b == true:
				return true
			case a == false && b == false:
				return false
			case a == unknown || b == unknown:
				return unknown
			}
			return nil
		}}
	}
	return left
}

func (p *exprParser) and() node {
	left := p.not()
	for p.peek().kw("and") {
		p.i++
		l, r := left, p.not()
		left = node{pgwire.OIDBool, func(row map[string]any) any {
			a, b := l.get(row), r.get(row)
			switch {
			case a == false || b == false:
				return false
			case a == true && b == true:
				return true
			case a == unknown || b == unknown:
				return unknown
			}
			return nil
		}}
	}
	return left
}

func (p *exprParser) not() node {
	if p.peek().kw("not") {
		p.i++
		n := p.not()
		return node{pgwire.OIDBool, func(row map[string]any) any {
			if b, ok := n.get(row).(bool); ok {
				return !b
			}
			return n.get(row)
		}}
	}
	return p.comparison()
}

// comparison parses operand [op operand], where op is a comparison,
// regular-expression match, LIKE, IN or IS.
func (p *exprParser) comparison() node {
	left := p.concat()
	t := p.peek()
	var op string
	switch {
	case t.kind == pOp && isCompareOp(t.text):
		op = t.text
		p.i++
	case t.kw("operator") && p.peekAt(1).op("("):
		p.i++
		inner := p.skipGroup()
		if len(inner) == 0 {
			return p.unknown()
		}
		op = inner[len(inner)-1].text
		if !isCompareOp(op) {
			return p.unknown()
		}
	case t.kw("like") || t.kw("ilike"):
		op = t.text
		p.i++
	case t.kw("not") && (p.peekAt(1).kw("like") || p.peekAt(1).kw("ilike") || p.peekAt(1).kw("in")):
		op = "not " + p.peekAt(1).text
		p.i += 2
	case t.kw("in"):
		op = "in"
		p.i++
	case t.kw("is"):
		p.i++
		neg := false
		if p.peek().kw("not") {
			neg = true
			p.i++
		}
		w := p.peek()
		p.i++
		var test func(any) bool
		switch {
		case w.kw("null"):
			test = func(v any) bool { return v == nil }
		case w.kw("true"):
			test = func(v any) bool { return v == true }
		case w.kw("false"):
			test = func(v any) bool { return v == false }
		default:
			return p.unknown()
		}
		return node{pgwire.OIDBool, func(row map[string]any) any {
			v := left.get(row)
			if v == unknown {
				return unknown
			}
			return test(v) != neg
		}}
	default:
		return left
	}
	if op == "in" || op == "not in" {
		return p.in(left, op == "in")
	}
	if (op == "=" || op == "<>" || op == "!=") && (p.peek().kw("any") || p.peek().kw("all")) {
		// x = ANY(current_schemas(true)): the schemas on the search path.
		p.i++
		inner := p.skipGroup()
		for _, t := range inner {
			if t.kw("current_schemas") {
				set := []string{"pg_catalog", "public"}
				return node{pgwire.OIDBool, func(row map[string]any) any {
					v := left.get(row)
					if v == unknown || v == nil {
						return v
					}
					return slices.Contains(set, textOf(v)) == (op == "=")
				}}
			}
		}
		return p.unknown()
	}
	right := p.concat()
	return compare(left, op, right)
}

func isCompareOp(s string) bool {
	switch s {
	case "=", "<>", "!=", "<", ">", "<=", ">=", "~", "!~", "~*", "!~*", "~~", "!~~", "~~*", "!~~*":
		return true
	}
	return false
}

func (p *exprParser) in(left node, want bool) node {
	if !p.peek().op("(") {
		return p.unknown()
	}
	inner := p.skipGroup()
	if len(inner) > 0 && inner[0].kw("select") {
		return p.unknown()
	}
	var items []node
	for _, e := range splitTop(inner, ",") {
		items = append(items, p.ev.compile(e))
	}
	return node{pgwire.OIDBool, func(row map[string]any) any {
		v := left.get(row)
		if v == unknown || v == nil {
			return v
		}
		for _, it := range items {
			w := it.get(row)
			if w == unknown {
				return unknown
			}
			if w != nil && sameValue(v, w) {
				return want
			}
		}
		return !want
	}}
}

// compare builds a binary comparison; a NULL operand gives NULL and an
// unknown one unknown.
func compare(left node, op string, right node) node {
	var re func(row map[string]any) (*regexp.Regexp, bool)
	isRegexp := op == "~" || op == "!~" || op == "~*" || op == "!~*"
	isLike := strings.HasSuffix(op, "like") || strings.Contains(op, "~~")
	if isRegexp || isLike {
		cache := map[string]*regexp.Regexp{}
		re = func(row map[string]any) (*regexp.Regexp, bool) {
			v := right.get(row)
			if v == nil || v == unknown {
				return nil, false
			}
			pat := textOf(v)
			if r, ok := cache[pat]; ok {
				return r, r != nil
			}
			var r *regexp.Regexp
			var err error
			if isRegexp {
				if strings.HasSuffix(op, "*") {
					pat = "(?i)" + pat
				}
				r, err = regexp.Compile(pat)
			} else {
				r, err = likeRegexp(pat, strings.Contains(op, "ilike") || strings.HasSuffix(op, "*"))
			}
			if err != nil {
				r = nil
			}
			cache[pat] = r
			return r, r != nil
		}
	}
	return node{pgwire.OIDBool, func(row map[string]any) any {
		a, b := left.get(row), right.get(row)
		if a == unknown || b == unknown {
			return unknown
		}
		if a == nil || b == nil {
			return nil
		}
		switch op {
		case "=":
			return sameValue(a, b)
		case "<>", "!=":
			return !sameValue(a, b)
		case "<", ">", "<=", ">=":
			c, ok := orderValues(a, b)
			if !ok {
				return unknown
			}
			switch op {
			case "<":
				return c < 0
			case ">":
				return c > 0
			case "<=":
				return c <= 0
			}
			return c >= 0
		}
		r, ok := re(row)
		if !ok {
			return unknown
		}
		negate := strings.HasPrefix(op, "!") || strings.HasPrefix(op, "not")
		return r.MatchString(textOf(a)) != negate
	}}
}

// concat parses operand [|| operand ...].
func (p *exprParser) concat() node {
	left := p.postfix()
	for p.peek().op("||") {
		p.i++
		l, r := left, p.postfix()
		left = node{pgwire.OIDText, func(row map[string]any) any {
			a, b := l.get(row), r.get(row)
			if a == unknown || b == unknown {
				return unknown
			}
			if a == nil || b == nil {
				return nil
			}
			return textOf(a) + textOf(b)
		}}
	}
	return left
}

// postfix parses a primary followed by casts, COLLATE and subscripts.
func (p *exprParser) postfix() node {
	n := p.primary()
	for {
		switch t := p.peek(); {
		case t.op("::"):
			p.i++
			typ := p.typeName()
			n = p.ev.cast(n, typ)
		case t.kw("collate"):
			p.i++
			p.typeName()
		case t.op("["):
			p.skipGroup()
			n = p.unknown()
		default:
			return n
		}
	}
}

// typeName reads a possibly qualified type name with an optional [] and
// returns its last part.
func (p *exprParser) typeName() string {
	name := ""
	if p.peek().isName() {
		name = p.peek().text
		p.i++
	}
	for p.peek().op(".") && p.peekAt(1).isName() {
		name = p.peekAt(1).text
		p.i += 2
	}
	if p.peek().op("[") {
		p.skipGroup()
		name += "[]"
	}
	return name
}

func (p *exprParser) unknown() node {
	p.ev.fail()
	return unknownNode
}

func (p *exprParser) primary() node {
	t := p.peek()
	switch {
	case t.kind == 0:
		return p.unknown()
	case t.op("("):
		if p.peekAt(1).kw("select") {
			p.skipGroup()
			return p.unknown()
		}
		inner := p.skipGroup()
		parts := splitTop(inner, ",")
		if len(parts) != 1 {
			return p.unknown()
		}
		return p.ev.compile(inner)
	case t.op("-") && p.peekAt(1).kind == pNumber:
		p.i += 2
		v, oid, _ := p.ev.literal([]ptok{t, p.toks[p.i-1]})
		return node{oid, constant(v)}
	case t.kind == pString || t.kind == pNumber || t.kind == pParam:
		p.i++
		v, oid, _ := p.ev.literal([]ptok{t})
		return node{oid, constant(v)}
	case t.kw("true") || t.kw("false") || t.kw("null"):
		p.i++
		v, oid, _ := p.ev.literal([]ptok{t})
		return node{oid, constant(v)}
	case t.kw("case"):
		return p.caseExpr()
	case t.kw("exists") || t.kw("array"):
		p.i++
		p.skipGroup()
		return p.unknown()
	case t.isName():
		// [schema.]name( args ) is a call; a.b and b are columns.
		var parts []string
		for {
			parts = append(parts, p.peek().text)
			p.i++
			if !p.peek().op(".") || !p.peekAt(1).isName() {
				break
			}
			p.i++
		}
		if p.peek().op("(") {
			args := splitTop(p.skipGroup(), ",")
			return p.ev.call(parts[len(parts)-1], args)
		}
		if len(parts) == 1 {
			if n, ok := p.ev.sqlFunction(parts[0]); ok {
				return n
			}
		}
		qual := ""
		if len(parts) == 2 {
			qual = parts[0]
		}
		if key, ok := p.ev.resolve(qual, parts[len(parts)-1]); ok {
			return node{p.ev.tbl.cols[key], column(key)}
		}
		return p.unknown()
	}
	p.i++
	return p.unknown()
}

// caseExpr parses CASE [subject] WHEN ... THEN ... [ELSE ...] END.
func (p *exprParser) caseExpr() node {
	p.i++ // CASE
	var subject *node
	if !p.peek().kw("when") {
		s := p.or()
		subject = &s
	}
	type arm struct{ when, then node }
	var arms []arm
	elseNode := node{pgwire.OIDText, constant(nil)}
	for p.peek().kw("when") {
		p.i++
		w := p.or()
		if !p.peek().kw("then") {
			return p.unknown()
		}
		p.i++
		arms = append(arms, arm{w, p.or()})
	}
	if p.peek().kw("else") {
		p.i++
		elseNode = p.or()
	}
	if !p.peek().kw("end") || len(arms) == 0 {
		return p.unknown()
	}
	p.i++
	oid := arms[0].then.oid
	return node{oid, func(row map[string]any) any {
		var sv any
		if subject != nil {
			if sv = subject.get(row); sv == unknown {
				return unknown
			}
		}
		for _, a := range arms {
			w := a.when.get(row)
			if w == unknown {
				return unknown
			}
			if subject == nil && w == true || subject != nil && sv != nil && w != nil && sameValue(sv, w) {
				return a.then.get(row)
			}
		}
		return elseNode.get(row)
	}}
}

// cast applies ::typ: ::regclass turns a relation name into its OID and
// an OID column into the relation's name; other casts keep the value.
func (ev *evaluator) cast(n node, typ string) node {
	switch typ {
	case "regclass":
		return node{pgwire.OIDText, func(row map[string]any) any {
			v := n.get(row)
			switch x := v.(type) {
			case string:
				if oid, err := strconv.ParseInt(x, 10, 64); err == nil {
					return oid
				}
				return relOID(strings.TrimPrefix(x, "public."))
			case int64:
				if r, ok := ev.s.relByOID(x); ok {
					return r.Name
				}
			}
			return v
		}}
	case "regtype":
		// 'int8'::regtype is the type's OID; an OID column cast to
		// regtype prints as the type's name.
		return node{pgwire.OIDText, func(row map[string]any) any {
			v := n.get(row)
			switch x := v.(type) {
			case string:
				if oid, err := strconv.ParseInt(x, 10, 64); err == nil {
					return oid
				}
				name := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(x)), "pg_catalog.")
				for _, t := range pgTypes {
					if t.name == name || t.display == name {
						return t.oid
					}
				}
				return int64(-1) // no such type: matches nothing
			case int64:
				if d := typeDisplay(x); d != nil {
					return d
				}
			}
			return v
		}}
	case "text", "varchar", "name", "char", "bpchar":
		return node{pgwire.OIDText, n.get}
	case "oid", "int2", "int4", "int8", "regproc", "regnamespace":
		return node{n.oid, n.get}
	case "bool":
		return node{pgwire.OIDBool, n.get}
	}
	return n
}

// literal reads a constant: string, number, TRUE/FALSE/NULL or $n.
func (ev *evaluator) literal(e []ptok) (any, uint32, bool) {
	neg := false
	if len(e) == 2 && e[0].op("-") && e[1].kind == pNumber {
		neg, e = true, e[1:]
	}
	if len(e) != 1 {
		return nil, 0, false
	}
	t := e[0]
	switch t.kind {
	case pString:
		return t.text, pgwire.OIDText, true
	case pNumber:
		if i, err := strconv.ParseInt(t.text, 10, 64); err == nil {
			if neg {
				i = -i
			}
			if i >= math.MinInt32 && i <= math.MaxInt32 {
				return i, pgwire.OIDInt4, true
			}
			return i, pgwire.OIDInt8, true
		}
		if f, err := strconv.ParseFloat(t.text, 64); err == nil {
			if neg {
				f = -f
			}
			return f, pgwire.OIDFloat8, true
		}
	case pParam:
		i, err := strconv.Atoi(t.text)
		if err != nil || i < 1 || i > len(ev.params) || ev.params[i-1].Value == nil {
			return nil, pgwire.OIDText, true
		}
		return string(ev.params[i-1].Value), pgwire.OIDText, true
	case pIdent:
		switch t.text {
		case "true":
			return true, pgwire.OIDBool, true
		case "false":
			return false, pgwire.OIDBool, true
		case "null":
			return nil, pgwire.OIDText, true
		}
	}
	return nil, 0, false
}

// sqlFunction answers the SQL-standard functions written without
// parentheses.
func (ev *evaluator) sqlFunction(name string) (node, bool) {
	switch name {
	case "current_user", "session_user", "user", "current_role":
		return node{pgwire.OIDName, constant(ev.s.user)}, true
	case "current_catalog":
		return node{pgwire.OIDName, constant(ev.s.database)}, true
	case "current_schema":
		return node{pgwire.OIDName, constant("public")}, true
	}
	return node{}, false
}

// call evaluates the functions clients call in catalog queries. Other
// functions are unknown.
func (ev *evaluator) call(name string, args [][]ptok) node {
	s := ev.s
	arg := func(i int) node {
		if i >= len(args) {
			return node{pgwire.OIDText, constant(nil)}
		}
		return ev.compile(args[i])
	}
	switch name {
	case "version":
		return node{pgwire.OIDText, constant("PostgreSQL " + pgwire.ServerVersion + ", TurbineSQL streaming SQL engine")}
	case "current_database":
		return node{pgwire.OIDName, constant(s.database)}
	case "current_schema":
		return node{pgwire.OIDName, constant("public")}
	case "current_user", "session_user":
		return node{pgwire.OIDName, constant(s.user)}
	case "current_setting":
		a := arg(0)
		return node{pgwire.OIDText, func(row map[string]any) any {
			v, _ := s.setting(textOf(a.get(row)))
			return v
		}}
	case "to_regtype", "to_regclass":
		// psycopg's TypeInfo.fetch: WHERE t.oid = to_regtype($1).
		return ev.cast(arg(0), strings.TrimPrefix(name, "to_"))
	case "pg_backend_pid":
		return node{pgwire.OIDInt4, constant(int64(0))}
	case "pg_get_userbyid":
		return node{pgwire.OIDName, constant(s.user)}
	case "pg_table_is_visible", "pg_type_is_visible", "has_table_privilege", "has_schema_privilege",
		"pg_relation_is_publishable":
		if name == "pg_relation_is_publishable" {
			return node{pgwire.OIDBool, constant(false)}
		}
		return node{pgwire.OIDBool, constant(true)}
	case "format_type":
		a := arg(0)
		return node{pgwire.OIDText, func(row map[string]any) any {
			oid, err := strconv.ParseInt(textOf(a.get(row)), 10, 64)
			if err != nil {
				return nil
			}
			return typeDisplay(oid)
		}}
	case "obj_description":
		if _, ok := ev.tbl.cols["description"]; ok {
			return node{pgwire.OIDText, column("description")}
		}
		return node{pgwire.OIDText, constant(nil)}
	case "pg_get_viewdef":
		a := arg(0)
		return node{pgwire.OIDText, func(row map[string]any) any {
			oid, err := strconv.ParseInt(textOf(a.get(row)), 10, 64)
			if err != nil {
				return nil
			}
			if r, ok := s.relByOID(oid); ok {
				return viewDef(r)
			}
			return nil
		}}
	case "pg_get_expr", "pg_size_pretty", "pg_table_size", "pg_relation_size", "pg_total_relation_size",
		"col_description", "shobj_description", "array_to_string", "pg_get_indexdef", "pg_get_constraintdef",
		"pg_get_triggerdef", "pg_get_statisticsobjdef_columns", "pg_encoding_to_char":
		if name == "pg_encoding_to_char" {
			return node{pgwire.OIDName, constant("UTF8")}
		}
		// Nothing to say about these here.
		return node{pgwire.OIDText, constant(nil)}
	}
	ev.fail()
	return unknownNode
}

// sameValue compares two non-NULL values: numerically when both read as
// numbers, as booleans when one is, as text otherwise.
func sameValue(a, b any) bool {
	if x, ok := a.(bool); ok {
		y, ok := boolOf(b)
		return ok && x == y
	}
	if y, ok := b.(bool); ok {
		x, ok := boolOf(a)
		return ok && x == y
	}
	if c, ok := orderValues(a, b); ok {
		return c == 0
	}
	return textOf(a) == textOf(b)
}

// orderValues orders two values that both read as numbers.
func orderValues(a, b any) (int, bool) {
	x, err1 := strconv.ParseFloat(textOf(a), 64)
	y, err2 := strconv.ParseFloat(textOf(b), 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	switch {
	case x < y:
		return -1, true
	case x > y:
		return 1, true
	}
	return 0, true
}

func boolOf(v any) (bool, bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "t", "true", "yes", "on", "1":
			return true, true
		case "f", "false", "no", "off", "0":
			return false, true
		}
	}
	return false, false
}

func textOf(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		if x {
			return "t"
		}
		return "f"
	}
	return ""
}

// likeRegexp turns a LIKE pattern (backslash escapes) into a regexp.
func likeRegexp(pat string, fold bool) (*regexp.Regexp, error) {
	var b strings.Builder
	if fold {
		b.WriteString("(?i)")
	}
	b.WriteString("(?s)^")
	for i := 0; i < len(pat); i++ {
		switch c := pat[i]; {
		case c == '\\' && i+1 < len(pat):
			i++
			b.WriteString(regexp.QuoteMeta(pat[i : i+1]))
		case c == '%':
			b.WriteString(".*")
		case c == '_':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(pat[i : i+1]))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}
