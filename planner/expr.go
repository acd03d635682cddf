package planner

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/format"
	"github.com/pingcap/tidb/pkg/parser/mysql"
	"github.com/pingcap/tidb/pkg/parser/opcode"
	driver "github.com/pingcap/tidb/pkg/parser/test_driver"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// scope resolves names while compiling expressions. Before aggregation it is
// the input schema; after, the group keys, window bounds and aggregates.
type scope struct {
	src    string // statement text, for error positions
	input  types.Schema
	agg    *aggScope // nil: no aggregation in this query
	inAgg  bool      // compiling an aggregate's argument (input scope)
	noAggs string    // non-empty: aggregates are not allowed here (e.g. "WHERE")
	// eventTime is the input column of event time (the source's WATERMARK
	// column), -1 without one.
	eventTime int
	// tabs names the relation each input column comes from, for qualified
	// names (c.relname, pg_catalog.pg_class.relname); nil: one relation.
	tabs []tabRef
	// q is the query being planned: catalog functions, subqueries and the
	// enclosing query's scope (nil: a continuous query).
	q *qctx
}

// aggScope collects aggregates and maps post-aggregation names.
type aggScope struct {
	keys     []exec.Expr // over the input
	keyText  []string    // restored SQL of each key, to match select items
	keyNames []string
	window   *WindowSpec
	calls    []AggCall
	callText []string
	needsSeq bool // an aggregate reads SeqColumn
}

// restore prints an AST node back as SQL (lower-cased names), used to match
// select-list expressions against GROUP BY items.
func restore(n ast.Node) string {
	var b strings.Builder
	if err := n.Restore(format.NewRestoreCtx(format.RestoreStringSingleQuotes|format.RestoreNameDoubleQuotes|format.RestoreKeyWordLowercase|format.RestoreNameLowercase, &b)); err != nil {
		return fmt.Sprintf("%p", n)
	}
	return unquoteNames(b.String())
}

// unquoteNames drops the double quotes around plain lower-case names in
// restored SQL, as PostgreSQL prints them (max(price), not max("price")
// or MySQL's max(`price`)); string literals and names that need their
// quotes are left as they are.
func unquoteNames(s string) string {
	if !strings.Contains(s, `"`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch s[i] {
		case '\'':
			j := i + 1
			for j < len(s) {
				if s[j] == '\\' {
					j += 2
					continue
				}
				if s[j] == '\'' {
					if j+1 < len(s) && s[j+1] == '\'' {
						j += 2
						continue
					}
					break
				}
				j++
			}
			j = min(j+1, len(s))
			b.WriteString(s[i:j])
			i = j
		case '"':
			j := i + 1
			for j < len(s) && !(s[j] == '"' && (j+1 >= len(s) || s[j+1] != '"')) {
				if s[j] == '"' {
					j++
				}
				j++
			}
			name := s[i+1 : min(j, len(s))]
			if plainName(name) {
				b.WriteString(name)
			} else {
				b.WriteString(s[i:min(j+1, len(s))])
			}
			i = min(j+1, len(s))
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String()
}

// plainName: a name PostgreSQL prints without quotes.
func plainName(n string) bool {
	if n == "" || (n[0] >= '0' && n[0] <= '9') {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func (s *scope) errf(code, name, format string, args ...any) error {
	e := sql.Errorf(code, format, args...)
	if name != "" {
		e.Pos = sql.FindPos(s.src, name)
	}
	return e
}

// compile turns an AST expression into an evaluator expression. Types are
// checked here, so a type error is reported before a stream starts: 42883
// for an operator or function that does not exist for its argument types,
// 42804 for a mismatch (a non-boolean condition, CASE arms of different
// types), with PostgreSQL's wording.
func (s *scope) compile(n ast.ExprNode) (exec.Expr, error) {
	// After aggregation, an expression equal to a GROUP BY item reads that key.
	if s.agg != nil && !s.inAgg {
		txt := restore(n)
		for i, k := range s.agg.keyText {
			if k == txt {
				return &exec.ColRef{Idx: i, Name: s.agg.keyNames[i], T: s.agg.keys[i].Type()}, nil
			}
		}
	}
	switch x := n.(type) {
	case *ast.ParenthesesExpr:
		return s.compile(x.Expr)
	case *ast.ColumnNameExpr:
		return s.column(x)
	case *driver.ValueExpr:
		return literal(x)
	case *ast.BinaryOperationExpr:
		return s.binary(x)
	case *ast.UnaryOperationExpr:
		return s.unary(x)
	case *ast.IsNullExpr:
		e, err := s.compile(x.Expr)
		if err != nil {
			return nil, err
		}
		return &exec.IsNull{X: e, Negate: x.Not}, nil
	case *ast.IsTruthExpr:
		e, err := s.compile(x.Expr)
		if err != nil {
			return nil, err
		}
		what := "IS TRUE"
		if x.True == 0 {
			what = "IS FALSE"
		}
		if e, err = s.boolArg("argument of "+what, e); err != nil {
			return nil, err
		}
		var cmp exec.Expr = &exec.Compare{Op: "=", L: e, R: &exec.Literal{V: x.True != 0, T: types.Bool}}
		// x IS TRUE is never NULL: NULL IS TRUE is false.
		cmp = &exec.Call{Name: "COALESCE", Args: []exec.Expr{cmp, &exec.Literal{V: false, T: types.Bool}}, T: types.Bool}
		if x.Not {
			cmp = &exec.Not{X: cmp}
		}
		return cmp, nil
	case *ast.BetweenExpr:
		e, err := s.compile(x.Expr)
		if err != nil {
			return nil, err
		}
		lo, err := s.compile(x.Left)
		if err != nil {
			return nil, err
		}
		hi, err := s.compile(x.Right)
		if err != nil {
			return nil, err
		}
		a, err := s.compare(">=", e, lo)
		if err != nil {
			return nil, err
		}
		b, err := s.compare("<=", e, hi)
		if err != nil {
			return nil, err
		}
		var out exec.Expr = &exec.Logic{And: true, L: a, R: b}
		if x.Not {
			out = &exec.Not{X: out}
		}
		return out, nil
	case *ast.PatternInExpr:
		return s.inList(x)
	case *ast.PatternLikeOrIlikeExpr:
		return s.like(x)
	case *ast.CaseExpr:
		return s.caseExpr(x)
	case *ast.FuncCastExpr:
		e, err := s.compile(x.Expr)
		if err != nil {
			return nil, err
		}
		if rf, ok := e.(*pgTyped); ok && strings.HasPrefix(restore(x.Expr), "__reg") {
			// 'name'::regclass::text prints the name: resolve to the OID,
			// then back to the canonical name.
			if t, _ := castTarget(x); t == types.Text {
				if f, ok := rf.Expr.(*exec.RowFunc); ok {
					back := *f
					back.Args, back.T = []exec.Expr{rf}, types.Text
					return &back, nil
				}
			}
		}
		to, ok := castTarget(x)
		if !ok {
			return nil, s.errf(sql.CodeNotSupported, "", "CAST to %s is not supported: use TEXT, BIGINT, DOUBLE, BOOLEAN, TIMESTAMP or INTERVAL", x.Tp.String())
		}
		if !exec.CanCast(e.Type(), to) {
			return nil, s.errf("42846", "", "cannot cast type %s to %s", exec.PGName(e.Type()), exec.PGName(to))
		}
		return coerce(&exec.Cast{X: e, To: to})
	case *ast.AggregateFuncExpr:
		return s.aggregate(x)
	case *ast.FuncCallExpr:
		return s.call(x)
	case *ast.SubqueryExpr:
		return s.scalarSubquery(x)
	case *ast.ExistsSubqueryExpr:
		return s.existsSubquery(x)
	case *ast.CompareSubqueryExpr:
		return s.compareSubquery(x)
	case *ast.PatternRegexpExpr:
		return s.regexp(x)
	case *ast.WindowFuncExpr:
		return s.windowFunc(x)
	}
	return nil, s.errf(sql.CodeNotSupported, "", "expression %s is not supported", restore(n))
}

func lower(t types.Type) string { return strings.ToLower(t.String()) }

// castTarget reads back the type the sql package's rewrite gave CAST (see
// sql.CastBoolType): BOOLEAN travels as JSON, INTERVAL as TIME.
func castTarget(x *ast.FuncCastExpr) (types.Type, bool) {
	switch x.Tp.GetType() {
	case mysql.TypeLonglong, mysql.TypeLong, mysql.TypeShort, mysql.TypeTiny, mysql.TypeInt24:
		return types.Int, true
	case mysql.TypeDouble, mysql.TypeFloat, mysql.TypeNewDecimal:
		return types.Double, true
	case mysql.TypeVarString, mysql.TypeString, mysql.TypeVarchar, mysql.TypeBlob:
		return types.Text, true
	case mysql.TypeDatetime, mysql.TypeTimestamp:
		return types.Timestamp, true
	case mysql.TypeJSON:
		return types.Bool, true
	case mysql.TypeDuration:
		return types.Interval, true
	}
	return types.Unknown, false
}

// coerce folds a cast of a literal at plan time, so a bad literal is an
// error before the stream starts.
func coerce(c *exec.Cast) (exec.Expr, error) {
	if _, ok := c.X.(*exec.Literal); !ok {
		return c, nil
	}
	v, err := c.Eval(&exec.Batch{N: 1})
	if err != nil {
		return nil, err
	}
	val := v.Value(0)
	switch x := val.(type) {
	case interface{ UnixMilli() int64 }:
		val = x.UnixMilli()
	}
	return &exec.Literal{V: val, T: c.To}, nil
}

func (s *scope) column(x *ast.ColumnNameExpr) (exec.Expr, error) {
	name := x.Name.Name.O
	if s.agg != nil && !s.inAgg {
		for i, k := range s.agg.keyNames {
			if strings.EqualFold(k, name) {
				return &exec.ColRef{Idx: i, Name: k, T: s.agg.keys[i].Type()}, nil
			}
		}
		if i, err := s.find(x.Name); err == nil && i >= 0 {
			return nil, s.errf(sql.CodeGrouping, name, "column %q must appear in the GROUP BY clause or be used in an aggregate function", name)
		}
		if e, ok, err := s.outerColumn(x); ok || err != nil {
			return e, err
		}
		return nil, s.errf(sql.CodeUndefinedColumn, name, "column %q does not exist", name)
	}
	i, err := s.find(x.Name)
	if err != nil {
		return nil, err
	}
	if i < 0 {
		if e, ok, err := s.outerColumn(x); ok || err != nil {
			return e, err
		}
		if x.Name.Table.L == "" && niladic[x.Name.Name.L] {
			// current_catalog, session_user, ...: SQL's functions without
			// parentheses, when no column has the name.
			if e, ok, err := s.catalogCall(&ast.FuncCallExpr{FnName: x.Name.Name}); ok {
				return e, err
			}
		}
		return nil, s.errf(sql.CodeUndefinedColumn, name, "column %q does not exist", qualifiedName(x.Name)).(*sql.Error).
			WithHint("available columns: %s", s.input)
	}
	return &exec.ColRef{Idx: i, Name: s.input[i].Name, T: s.input[i].Type}, nil
}

// niladic are the SQL functions called without parentheses.
var niladic = map[string]bool{"current_catalog": true, "current_schema": true, "current_user": true,
	"session_user": true, "user": true, "current_role": true}

func literal(x *driver.ValueExpr) (exec.Expr, error) {
	switch v := x.GetValue().(type) {
	case nil:
		return &exec.Literal{T: types.Unknown}, nil
	case int64:
		return &exec.Literal{V: v, T: types.Int}, nil
	case uint64:
		if v > math.MaxInt64 {
			return &exec.Literal{V: float64(v), T: types.Double}, nil
		}
		return &exec.Literal{V: int64(v), T: types.Int}, nil
	case float64:
		return &exec.Literal{V: v, T: types.Double}, nil
	case float32:
		return &exec.Literal{V: float64(v), T: types.Double}, nil
	case string:
		return &exec.Literal{V: v, T: types.Text}, nil
	case []byte:
		return &exec.Literal{V: string(v), T: types.Text}, nil
	case fmt.Stringer: // decimal literals such as 10.5
		f, err := strconv.ParseFloat(v.String(), 64)
		if err != nil {
			return nil, sql.Errorf(sql.CodeSyntax, "cannot read number %s", v.String())
		}
		return &exec.Literal{V: f, T: types.Double}, nil
	}
	return nil, sql.Errorf(sql.CodeNotSupported, "literal %v is not supported", x.GetValue())
}

// unify makes two operands comparable: an untyped NULL or a text literal
// takes the other side's type (PostgreSQL's unknown-literal rule), BIGINT
// meets DOUBLE as DOUBLE.
func (s *scope) unify(l, r exec.Expr) (exec.Expr, exec.Expr, error) {
	lt, rt := l.Type(), r.Type()
	if lt == rt {
		if lt == types.Unknown { // NULL = NULL: both unknown, compared as text
			return &exec.Literal{T: types.Text}, &exec.Literal{T: types.Text}, nil
		}
		return l, r, nil
	}
	var err error
	switch {
	case lt == types.Unknown:
		return &exec.Literal{T: rt}, r, nil
	case rt == types.Unknown:
		return l, &exec.Literal{T: lt}, nil
	case lt.Numeric() && rt.Numeric():
		return l, r, nil
	case isTextLiteral(r):
		r, err = coerce(&exec.Cast{X: r, To: lt})
		return l, r, err
	case isArrayElement(r) && exec.CanCast(types.Text, lt):
		return l, &exec.Cast{X: r, To: lt}, nil
	case isArrayElement(l) && exec.CanCast(types.Text, rt):
		return &exec.Cast{X: l, To: rt}, r, nil
	case isTextLiteral(l):
		l, err = coerce(&exec.Cast{X: l, To: rt})
		return l, r, err
	}
	return nil, nil, s.errf(sql.CodeUndefinedFunc, "", "operator does not exist: %s = %s", exec.PGName(lt), exec.PGName(rt)).(*sql.Error).
		WithHint("cannot compare %s with %s; cast one side, e.g. x::text", lower(lt), lower(rt))
}

// isArrayElement: arr[i] is an element of an array carried as text; it
// takes the type it is compared with, as the element type would.
func isArrayElement(e exec.Expr) bool {
	f, ok := e.(*exec.RowFunc)
	return ok && f.Name == sql.SubscriptFunc && f.T == types.Text
}

func isTextLiteral(e exec.Expr) bool {
	l, ok := e.(*exec.Literal)
	return ok && l.T == types.Text
}

func (s *scope) compare(op string, l, r exec.Expr) (exec.Expr, error) {
	l, r, err := s.unify(l, r)
	if err != nil {
		return nil, err
	}
	return &exec.Compare{Op: op, L: l, R: r}, nil
}

// boolArg checks that e is a BOOLEAN (an untyped NULL becomes one); what
// names the place for the 42804 error, e.g. "argument of NOT".
func (s *scope) boolArg(what string, e exec.Expr) (exec.Expr, error) {
	switch e.Type() {
	case types.Bool:
		return e, nil
	case types.Unknown:
		return &exec.Literal{T: types.Bool}, nil
	}
	if isTextLiteral(e) { // 'true' AND x: an unknown-typed literal, as in PostgreSQL
		return coerce(&exec.Cast{X: e, To: types.Bool})
	}
	return nil, s.errf(sql.CodeDatatypeMismatch, "", "%s must be type boolean, not type %s", what, exec.PGName(e.Type()))
}

func (s *scope) binary(x *ast.BinaryOperationExpr) (exec.Expr, error) {
	l, err := s.compile(x.L)
	if err != nil {
		return nil, err
	}
	r, err := s.compile(x.R)
	if err != nil {
		return nil, err
	}
	switch x.Op {
	case opcode.EQ:
		return s.compare("=", l, r)
	case opcode.NE:
		return s.compare("<>", l, r)
	case opcode.LT:
		return s.compare("<", l, r)
	case opcode.LE:
		return s.compare("<=", l, r)
	case opcode.GT:
		return s.compare(">", l, r)
	case opcode.GE:
		return s.compare(">=", l, r)
	case opcode.LogicAnd, opcode.LogicOr:
		what := "argument of " + strings.ToUpper(x.Op.String())
		if l, err = s.boolArg(what, l); err != nil {
			return nil, err
		}
		if r, err = s.boolArg(what, r); err != nil {
			return nil, err
		}
		return &exec.Logic{And: x.Op == opcode.LogicAnd, L: l, R: r}, nil
	case opcode.Plus, opcode.Minus, opcode.Mul, opcode.Div, opcode.Mod, opcode.IntDiv:
		ops := map[opcode.Op]byte{opcode.Plus: '+', opcode.Minus: '-', opcode.Mul: '*', opcode.Div: '/', opcode.Mod: '%', opcode.IntDiv: '/'}
		return s.arith(ops[x.Op], l, r)
	case opcode.Or: // || (the sql package rewrites it to MySQL's |)
		return s.concatOp(l, r)
	case opcode.Xor: // ^ is exponentiation in PostgreSQL, with the same precedence as MySQL's XOR
		return s.resolveBuiltin("POWER", []exec.Expr{l, r})
	case opcode.NullEQ: // a IS NOT DISTINCT FROM b (the sql package rewrites it to <=>)
		return s.scalarCall(exec.NotDistinctFunc, []exec.Expr{l, r})
	}
	return nil, s.errf(sql.CodeNotSupported, "", "operator %s is not supported", x.Op)
}

// concatOp is a || b: text with anything (the other side printed as
// text); NULL if either side is NULL, unlike CONCAT().
func (s *scope) concatOp(l, r exec.Expr) (exec.Expr, error) {
	lt, rt := l.Type(), r.Type()
	if lt != types.Text && rt != types.Text && lt != types.Unknown && rt != types.Unknown {
		return nil, s.errf(sql.CodeUndefinedFunc, "", "operator does not exist: %s || %s", exec.PGName(lt), exec.PGName(rt)).(*sql.Error).
			WithHint("|| concatenates text; cast one side to text, e.g. x::text")
	}
	args := []exec.Expr{l, r}
	for i, a := range args {
		switch a.Type() {
		case types.Text:
		case types.Unknown:
			args[i] = &exec.Literal{T: types.Text}
		default:
			c, err := coerce(&exec.Cast{X: a, To: types.Text})
			if err != nil {
				return nil, err
			}
			args[i] = c
		}
	}
	return &exec.Call{Name: "||", Args: args, T: types.Text}, nil
}

// arith types an arithmetic operator. Numbers: BIGINT op BIGINT is BIGINT,
// with DOUBLE it is DOUBLE. Date/time: TIMESTAMP ± INTERVAL is a TIMESTAMP,
// TIMESTAMP - TIMESTAMP an INTERVAL, INTERVAL ± INTERVAL, INTERVAL * number
// and INTERVAL / number INTERVALs. An untyped NULL or a text literal takes
// the other side's type.
func (s *scope) arith(op byte, l, r exec.Expr) (exec.Expr, error) {
	lt, rt := l.Type(), r.Type()
	switch {
	case lt == types.Unknown && rt == types.Unknown:
		return &exec.Literal{T: types.Int}, nil
	case lt == types.Unknown:
		return s.arith(op, &exec.Literal{T: rt}, r)
	case rt == types.Unknown:
		return s.arith(op, l, &exec.Literal{T: lt})
	}
	pm := op == '+' || op == '-'
	switch {
	case lt == types.Timestamp && rt == types.Interval && pm:
		return &exec.Arith{Op: op, L: l, R: r, T: types.Timestamp}, nil
	case lt == types.Interval && rt == types.Timestamp && op == '+':
		return &exec.Arith{Op: op, L: r, R: l, T: types.Timestamp}, nil
	case lt == types.Timestamp && rt == types.Timestamp && op == '-':
		return &exec.Arith{Op: op, L: l, R: r, T: types.Interval}, nil
	case lt == types.Interval && rt == types.Interval && pm:
		return &exec.Arith{Op: op, L: l, R: r, T: types.Interval}, nil
	case lt == types.Interval && rt.Numeric() && (op == '*' || op == '/'):
		return &exec.Arith{Op: op, L: l, R: r, T: types.Interval}, nil
	case lt.Numeric() && rt == types.Interval && op == '*':
		return &exec.Arith{Op: op, L: r, R: l, T: types.Interval}, nil
	case lt.Numeric() && rt.Numeric():
		t := types.Int
		if lt == types.Double || rt == types.Double {
			t = types.Double
		}
		return &exec.Arith{Op: op, L: l, R: r, T: t}, nil
	case isTextLiteral(l) && rt != types.Text:
		l2, err := coerce(&exec.Cast{X: l, To: rt})
		if err != nil {
			return nil, err
		}
		return s.arith(op, l2, r)
	case isTextLiteral(r) && lt != types.Text:
		r2, err := coerce(&exec.Cast{X: r, To: lt})
		if err != nil {
			return nil, err
		}
		return s.arith(op, l, r2)
	}
	return nil, s.errf(sql.CodeUndefinedFunc, "", "operator does not exist: %s %c %s", exec.PGName(lt), op, exec.PGName(rt)).(*sql.Error).
		WithHint("arithmetic needs numbers, or a timestamp and an interval")
}

func (s *scope) unary(x *ast.UnaryOperationExpr) (exec.Expr, error) {
	if x.Op == opcode.Minus { // -9223372036854775808 is a BIGINT, though 9223372036854775808 is not
		if v, ok := x.V.(*driver.ValueExpr); ok {
			if u, ok := v.GetValue().(uint64); ok && u == 1<<63 {
				return &exec.Literal{V: int64(math.MinInt64), T: types.Int}, nil
			}
		}
	}
	e, err := s.compile(x.V)
	if err != nil {
		return nil, err
	}
	switch x.Op {
	case opcode.Not, opcode.Not2:
		if e, err = s.boolArg("argument of NOT", e); err != nil {
			return nil, err
		}
		return &exec.Not{X: e}, nil
	case opcode.Minus, opcode.Plus:
		t := e.Type()
		if t == types.Unknown {
			return &exec.Literal{T: types.Int}, nil
		}
		if !t.Numeric() && t != types.Interval {
			return nil, s.errf(sql.CodeUndefinedFunc, "", "operator does not exist: %s %s", x.Op, exec.PGName(t))
		}
		if x.Op == opcode.Plus {
			return e, nil
		}
		if l, ok := e.(*exec.Literal); ok { // fold -5 so it stays a literal
			switch v := l.V.(type) {
			case int64:
				if v != math.MinInt64 {
					return &exec.Literal{V: -v, T: l.T}, nil
				}
			case float64:
				return &exec.Literal{V: -v, T: l.T}, nil
			}
		}
		return &exec.Not{X: e, Neg: true}, nil
	}
	return nil, s.errf(sql.CodeNotSupported, "", "operator %s is not supported", x.Op)
}

// commonType resolves the type of CASE arms, COALESCE and NULLIF arguments
// and IN lists as PostgreSQL does: typed operands must agree (BIGINT and
// DOUBLE meet as DOUBLE), text literals and NULLs take that type (a bad
// literal is an error now). All text literals: TEXT; all NULL: Unknown.
// Operands are cast to the common type.
func (s *scope) commonType(what, code string, exprs []exec.Expr) (types.Type, []exec.Expr, error) {
	t := types.Unknown
	sawText := false
	for _, e := range exprs {
		et := e.Type()
		switch {
		case isTextLiteral(e):
			sawText = true
		case et == types.Unknown, et == t:
		case t == types.Unknown:
			t = et
		case t.Numeric() && et.Numeric():
			t = types.Double
		default:
			return 0, nil, s.errf(code, "", "%s types %s and %s cannot be matched", what, exec.PGName(t), exec.PGName(et))
		}
	}
	if t == types.Unknown {
		if !sawText {
			return types.Unknown, exprs, nil
		}
		t = types.Text
	}
	out := make([]exec.Expr, len(exprs))
	for i, e := range exprs {
		switch e.Type() {
		case t:
			out[i] = e
		case types.Unknown:
			out[i] = &exec.Literal{T: t}
		default:
			c, err := coerce(&exec.Cast{X: e, To: t})
			if err != nil {
				return 0, nil, err
			}
			out[i] = c
		}
	}
	return t, out, nil
}

// inList is x [NOT] IN (a, b, ...): x and the items share one type (a text
// literal on either side adapts: 'a' IN (col) compares as col's type).
func (s *scope) inList(x *ast.PatternInExpr) (exec.Expr, error) {
	if x.Sel != nil {
		return s.inSubquery(x)
	}
	e, err := s.compile(x.Expr)
	if err != nil {
		return nil, err
	}
	exprs := []exec.Expr{e}
	for _, item := range x.List {
		v, err := s.compile(item)
		if err != nil {
			return nil, err
		}
		exprs = append(exprs, v)
	}
	t, exprs, err := s.commonType("IN", sql.CodeUndefinedFunc, exprs)
	if err != nil {
		return nil, err
	}
	if t == types.Unknown {
		return &exec.Literal{T: types.Bool}, nil
	}
	return &exec.InList{X: exprs[0], List: exprs[1:], Not: x.Not}, nil
}

// like is x [NOT] LIKE / ILIKE pattern [ESCAPE c]; both sides text.
func (s *scope) like(x *ast.PatternLikeOrIlikeExpr) (exec.Expr, error) {
	e, err := s.compile(x.Expr)
	if err != nil {
		return nil, err
	}
	p, err := s.compile(x.Pattern)
	if err != nil {
		return nil, err
	}
	op := "~~"
	if !x.IsLike {
		op = "~~*"
	}
	if e.Type() == types.Unknown {
		e = &exec.Literal{T: types.Text}
	}
	if p.Type() == types.Unknown {
		p = &exec.Literal{T: types.Text}
	}
	if e.Type() != types.Text || p.Type() != types.Text {
		return nil, s.errf(sql.CodeUndefinedFunc, "", "operator does not exist: %s %s %s", exec.PGName(e.Type()), op, exec.PGName(p.Type())).(*sql.Error).
			WithHint("LIKE matches text; cast the value to text, e.g. x::text LIKE '1%%'")
	}
	return exec.NewLike(e, p, rune(x.Escape), x.Not, !x.IsLike)
}

// caseExpr compiles a searched or simple CASE; a simple CASE x WHEN v
// becomes WHEN x = v.
func (s *scope) caseExpr(x *ast.CaseExpr) (exec.Expr, error) {
	var operand exec.Expr
	if x.Value != nil {
		var err error
		if operand, err = s.compile(x.Value); err != nil {
			return nil, err
		}
	}
	c := &exec.Case{}
	results := make([]exec.Expr, 0, len(x.WhenClauses)+1)
	for _, w := range x.WhenClauses {
		cond, err := s.compile(w.Expr)
		if err != nil {
			return nil, err
		}
		if operand != nil {
			cond, err = s.compare("=", operand, cond)
		} else {
			cond, err = s.boolArg("argument of CASE/WHEN", cond)
		}
		if err != nil {
			return nil, err
		}
		r, err := s.compile(w.Result)
		if err != nil {
			return nil, err
		}
		c.Whens = append(c.Whens, exec.When{Cond: cond})
		results = append(results, r)
	}
	if x.ElseClause != nil {
		e, err := s.compile(x.ElseClause)
		if err != nil {
			return nil, err
		}
		results = append(results, e)
	}
	t, results, err := s.commonType("CASE", sql.CodeDatatypeMismatch, results)
	if err != nil {
		return nil, err
	}
	if t == types.Unknown { // every arm NULL: text, as in PostgreSQL
		t = types.Text
		for i := range results {
			results[i] = &exec.Literal{T: t}
		}
	}
	c.T = t
	for i := range c.Whens {
		c.Whens[i].Then = results[i]
	}
	if x.ElseClause != nil {
		c.Else = results[len(results)-1]
	}
	return c, nil
}

func (s *scope) call(x *ast.FuncCallExpr) (exec.Expr, error) {
	name := strings.ToUpper(x.FnName.O)
	if x.FnName.L == ast.TimestampLiteral || x.FnName.L == ast.DateLiteral {
		name = "TIMESTAMPLITERAL"
	}
	if x.FnName.L == sql.DivFunc {
		name = "DIV"
	}
	switch name {
	case strings.ToUpper(sql.IntervalFunc):
		ms, err := intArg(x, 0)
		if err != nil {
			return nil, err
		}
		return &exec.Literal{V: ms, T: types.Interval}, nil
	case strings.ToUpper(sql.BoolFunc):
		n, err := intArg(x, 0)
		if err != nil {
			return nil, err
		}
		return &exec.Literal{V: n != 0, T: types.Bool}, nil
	case "TIMESTAMPLITERAL":
		if len(x.Args) == 1 {
			if v, ok := x.Args[0].(*driver.ValueExpr); ok {
				if str, ok := v.GetValue().(string); ok {
					ms, err := exec.ParseTimestamp(str)
					if err != nil {
						return nil, s.errf("22007", "", "invalid input syntax for type timestamp: %q", str)
					}
					return &exec.Literal{V: ms, T: types.Timestamp}, nil
				}
			}
		}
		return nil, s.errf(sql.CodeSyntax, "", "TIMESTAMP literal needs a quoted value")
	case "TUMBLE_START", "TUMBLE_END", "HOP_START", "HOP_END", "SESSION_START", "SESSION_END":
		return s.windowBound(name, x)
	case "TUMBLE", "HOP", strings.ToUpper(sql.SessionFunc):
		return nil, s.errf(sql.CodeSyntax, strings.ToLower(name), "%s(...) belongs in GROUP BY; use %s_START(...) or %s_END(...) in the select list", name, name, name)
	case "NOW", "CURRENT_TIMESTAMP", "LOCALTIMESTAMP":
		if s.q != nil && len(x.Args) == 0 {
			// A bounded query: the statement's start, one value for all rows.
			return &exec.Literal{V: s.q.now().UnixMilli(), T: types.Timestamp}, nil
		}
		if s.q != nil {
			return nil, s.errf(sql.CodeUndefinedFunc, "", "function %s takes no arguments here", strings.ToLower(name))
		}
		return nil, s.errf(sql.CodeNotSupported, "", "%s() is not supported in a continuous query: a stream's output must not depend on when its rows are processed", strings.ToLower(name)).(*sql.Error).
			WithHint("use the event-time column (or timestamp = 'kafka' on the source); now() answers in a bounded SELECT")
	case "RAND", "RANDOM":
		if s.q != nil && len(x.Args) == 0 {
			return &exec.Call{Name: "RANDOM", T: types.Double}, nil
		}
		if s.q != nil {
			return nil, s.errf(sql.CodeUndefinedFunc, "", "function %s takes no arguments here", strings.ToLower(name))
		}
		return nil, s.errf(sql.CodeNotSupported, "", "%s() is not supported in a continuous query: a stream's output must be the same when a restart replays its input", strings.ToLower(name))
	case "TRIM":
		return s.trimCall(x)
	}
	if an := strings.TrimPrefix(name, "__"); agg.IsAggregate(an) {
		return s.aggCall(x, an, x.FnName.O, x.Args, false, false)
	}
	least, most, ok := exec.Arity(name)
	if !ok || x.Schema.L == "pg_catalog" {
		if e, handled, err := s.catalogCall(x); handled {
			return e, err
		}
	}
	if why, unsupported := unsupportedFuncs[x.FnName.L]; unsupported && !ok {
		e := s.errf(sql.CodeNotSupported, x.FnName.L, "function %s is not supported: %s", x.FnName.L, why).(*sql.Error)
		if x.FnName.L == "age" {
			e.HintMsg = "subtract the timestamps (a - b) for an interval in days and time"
		}
		return nil, e
	}
	if !ok {
		e := s.errf(sql.CodeUndefinedFunc, strings.ToLower(x.FnName.O), "function %s does not exist", strings.ToLower(x.FnName.O)).(*sql.Error)
		if c := sql.Closest(x.FnName.O, append(agg.Names(), exec.FuncNames()...)); c != "" {
			e.HintMsg = "did you mean " + c + "?"
		}
		return nil, e
	}
	if len(x.Args) < least || (most >= 0 && len(x.Args) > most) {
		want := strconv.Itoa(least)
		switch {
		case most < 0:
			want = "at least " + want
		case most != least:
			want += " to " + strconv.Itoa(most)
		}
		return nil, s.errf(sql.CodeUndefinedFunc, strings.ToLower(x.FnName.O), "function %s takes %s argument(s), got %d", strings.ToLower(name), want, len(x.Args))
	}
	args := make([]exec.Expr, len(x.Args))
	for i, a := range x.Args {
		e, err := s.compile(a)
		if err != nil {
			return nil, err
		}
		args[i] = e
	}
	return s.scalarCall(name, args)
}

// trimCall is TRIM([BOTH | LEADING | TRAILING] [chars] FROM s) and
// TRIM(s): the TiDB parser gives (s), (s, chars) or (s, chars, direction).
func (s *scope) trimCall(x *ast.FuncCallExpr) (exec.Expr, error) {
	name := "BTRIM"
	n := len(x.Args)
	if n == 3 {
		if d, ok := x.Args[2].(*ast.TrimDirectionExpr); ok {
			switch d.Direction {
			case ast.TrimLeading:
				name = "LTRIM"
			case ast.TrimTrailing:
				name = "RTRIM"
			}
		}
		n = 2
	}
	if n < 1 || n > 2 {
		return nil, s.errf(sql.CodeUndefinedFunc, "trim", "function trim takes 1 or 2 arguments, got %d", n)
	}
	args := make([]exec.Expr, n)
	for i := range args {
		e, err := s.compile(x.Args[i])
		if err != nil {
			return nil, err
		}
		args[i] = e
	}
	return s.scalarCall(name, args)
}

// scalarCall types a call of one of exec's scalar functions.
func (s *scope) scalarCall(name string, args []exec.Expr) (exec.Expr, error) {
	text, num := types.Text, types.Double
	var err error
	switch name {
	case "COALESCE", "NULLIF":
		code := sql.CodeDatatypeMismatch
		if name == "NULLIF" {
			code = sql.CodeUndefinedFunc
		}
		t, args, err := s.commonType(name, code, args)
		if err != nil {
			return nil, err
		}
		if t == types.Unknown {
			t = types.Text
			for i := range args {
				args[i] = &exec.Literal{T: t}
			}
		}
		return &exec.Call{Name: name, Args: args, T: t}, nil
	case "CONCAT":
		return &exec.Call{Name: name, Args: args, T: types.Text}, nil
	case "GREATEST", "LEAST", exec.DistinctFunc, exec.NotDistinctFunc:
		// One common type, as CASE and COALESCE resolve theirs: greatest(1, 2.5)
		// is a DOUBLE, greatest(1, 'x') fails on 'x'.
		t, args, err := s.commonType(name, sql.CodeDatatypeMismatch, args)
		if err != nil {
			if name == exec.NotDistinctFunc || name == exec.DistinctFunc {
				lt, rt := args[0].Type(), args[1].Type()
				return nil, s.errf(sql.CodeUndefinedFunc, "", "operator does not exist: %s %s %s", exec.PGName(lt), strings.ToLower(name), exec.PGName(rt))
			}
			return nil, err
		}
		if t == types.Unknown {
			t = types.Text
			for i := range args {
				args[i] = &exec.Literal{T: t}
			}
		}
		rt := t
		if name == exec.NotDistinctFunc || name == exec.DistinctFunc {
			rt = types.Bool
		}
		return &exec.Call{Name: name, Args: args, T: rt}, nil
	case "ENCODE":
		// encode takes bytea: a literal (read as bytea input) or decode()'s
		// result, never a text column, as in PostgreSQL.
		if a := args[0]; a.Type() != types.Unknown && !isTextLiteral(a) && pgOID(a, nil) != exec.OIDBytea {
			return nil, s.noFunc(name, args)
		}
	case "LOWER", "UPPER", "BTRIM", "LTRIM", "RTRIM", "REPLACE":
		args, err = s.argsAs(name, args, text, text, text)
		return &exec.Call{Name: name, Args: args, T: types.Text}, err
	case "LENGTH", "CHAR_LENGTH", "CHARACTER_LENGTH", "OCTET_LENGTH", "STRPOS", "POSITION":
		args, err = s.argsAs(name, args, text, text)
		return &exec.Call{Name: name, Args: args, T: types.Int}, err
	case "SUBSTRING", "SUBSTR":
		args, err = s.argsAs(name, args, text, types.Int, types.Int)
		return &exec.Call{Name: name, Args: args, T: types.Text}, err
	case "ABS", "FLOOR", "CEIL", "CEILING", "ROUND":
		t := args[0].Type()
		switch {
		case t.Numeric():
		case t == types.Unknown, isTextLiteral(args[0]):
			t = num
		default:
			return nil, s.noFunc(name, args)
		}
		args, err = s.argsAs(name, args, t, types.Int)
		return &exec.Call{Name: name, Args: args, T: t}, err
	}
	return s.resolveBuiltin(name, args)
}

// resolveBuiltin types a call of one of exec's library functions: it picks
// the overload the arguments fit best, as PostgreSQL's function resolution
// does for these (an exact match, then one reached by BIGINT widening to
// DOUBLE PRECISION or a text literal read as the parameter's type; NULL
// fits anything), and casts the arguments to it. Nothing fits: 42883.
func (s *scope) resolveBuiltin(name string, args []exec.Expr) (exec.Expr, error) {
	sigs, ok := exec.Overloads(name)
	if !ok {
		return nil, s.errf(sql.CodeUndefinedFunc, "", "function %s does not exist", strings.ToLower(name))
	}
	best, bestCost := -1, math.MaxInt
	for k, g := range sigs {
		if cost, fits := fitCost(g, args); fits && cost < bestCost {
			best, bestCost = k, cost
		}
	}
	if best < 0 {
		return nil, s.noFunc(name, args)
	}
	g := sigs[best]
	out := make([]exec.Expr, len(args))
	for i, a := range args {
		want := paramType(g, i)
		switch {
		case want == types.Unknown, a.Type() == want: // "any", or exact
			out[i] = a
		case a.Type() == types.Unknown:
			out[i] = &exec.Literal{T: want}
		default:
			c, err := coerce(&exec.Cast{X: a, To: want})
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
	}
	var e exec.Expr = &exec.Call{Name: name, Args: out, T: g.Ret}
	if g.RetOID != 0 {
		e = &pgTyped{Expr: e, oid: g.RetOID}
	}
	return e, nil
}

// paramType is the type overload g wants for argument i.
func paramType(g exec.Sig, i int) types.Type {
	if i >= len(g.Args) {
		return g.Args[len(g.Args)-1] // variadic
	}
	return g.Args[i]
}

// fitCost reports whether args fit overload g, and how many conversions
// it takes.
func fitCost(g exec.Sig, args []exec.Expr) (int, bool) {
	if len(args) != len(g.Args) && !(g.Variadic && len(args) >= len(g.Args)-1) {
		return 0, false
	}
	cost := 0
	for i, a := range args {
		want, got := paramType(g, i), a.Type()
		switch {
		case want == types.Unknown, got == want, got == types.Unknown:
		case got == types.Int && want == types.Double:
			cost++
		case isTextLiteral(a) && exec.CanCast(types.Text, want):
			cost += 2
		default:
			return 0, false
		}
	}
	return cost, true
}

// unsupportedFuncs are PostgreSQL functions the engine does not have yet,
// with the reason: a clearer answer than "does not exist" and a hint at a
// near name.
var unsupportedFuncs = map[string]string{
	"age":              "its interval counts months and years, which INTERVAL here does not carry yet",
	"justify_days":     "INTERVAL here carries no months yet",
	"justify_hours":    "INTERVAL here carries days and time only",
	"justify_interval": "INTERVAL here carries no months yet",
	"make_interval":    "INTERVAL here carries no months yet",
	"to_date":          "there is no DATE type yet",
	"make_date":        "there is no DATE type yet",
	"regexp_matches":   "set-returning functions are not supported in a select list",
}

// argsAs casts args to the types want (a NULL or a text literal adapts,
// BIGINT widens to DOUBLE); anything else is 42883, as in PostgreSQL.
func (s *scope) argsAs(name string, args []exec.Expr, want ...types.Type) ([]exec.Expr, error) {
	out := make([]exec.Expr, len(args))
	for i, a := range args {
		t := want[min(i, len(want)-1)]
		switch {
		case a.Type() == t:
			out[i] = a
		case a.Type() == types.Unknown:
			out[i] = &exec.Literal{T: t}
		case isTextLiteral(a), a.Type() == types.Int && t == types.Double:
			c, err := coerce(&exec.Cast{X: a, To: t})
			if err != nil {
				return nil, err
			}
			out[i] = c
		default:
			return nil, s.noFunc(name, args)
		}
	}
	return out, nil
}

func (s *scope) noFunc(name string, args []exec.Expr) error {
	ts := make([]string, len(args))
	for i, a := range args {
		ts[i] = exec.PGName(a.Type())
	}
	fn := strings.ToLower(name)
	return s.errf(sql.CodeUndefinedFunc, fn, "function %s(%s) does not exist", fn, strings.Join(ts, ", ")).(*sql.Error).
		WithHint("no function matches the argument types; add explicit casts, e.g. x::text")
}

func intArg(x *ast.FuncCallExpr, i int) (int64, error) {
	if i < len(x.Args) {
		if v, ok := x.Args[i].(*driver.ValueExpr); ok {
			switch n := v.GetValue().(type) {
			case int64:
				return n, nil
			case uint64:
				return int64(n), nil
			}
		}
	}
	return 0, sql.Errorf(sql.CodeSyntax, "expected an integer argument to %s", x.FnName.O)
}

// windowBound compiles TUMBLE_START/END: it must match the query's window.
func (s *scope) windowBound(name string, x *ast.FuncCallExpr) (exec.Expr, error) {
	if s.agg == nil || s.agg.window == nil || s.inAgg {
		return nil, s.errf(sql.CodeGrouping, strings.ToLower(name), "%s needs a matching window in GROUP BY", name)
	}
	w := s.agg.window
	kind := name[:strings.Index(name, "_")]
	if kind != w.Kind().String() {
		return nil, s.errf(sql.CodeGrouping, strings.ToLower(name), "%s does not match the GROUP BY window %s", name, w.Kind())
	}
	if len(x.Args) < 2 {
		return nil, s.errf(sql.CodeSyntax, strings.ToLower(name), "%s takes the same arguments as %s in GROUP BY", name, w.Kind())
	}
	col, ok := x.Args[0].(*ast.ColumnNameExpr)
	size, err := intArg(innerCall(x.Args[len(x.Args)-1]), 0)
	if !ok || err != nil || !strings.EqualFold(col.Name.Name.O, w.TimeCol) || size != w.SizeMs {
		return nil, s.errf(sql.CodeGrouping, strings.ToLower(name), "%s must repeat the arguments of %s(%s, ...) in GROUP BY", name, w.Kind(), w.TimeCol)
	}
	idx := len(s.agg.keys)
	if strings.HasSuffix(name, "_END") {
		return &exec.ColRef{Idx: idx + 1, Name: "window_end", T: types.Timestamp}, nil
	}
	return &exec.ColRef{Idx: idx, Name: "window_start", T: types.Timestamp}, nil
}

func innerCall(n ast.ExprNode) *ast.FuncCallExpr {
	if c, ok := n.(*ast.FuncCallExpr); ok {
		return c
	}
	return &ast.FuncCallExpr{}
}

// aggregate registers an aggregate call (COUNT, SUM, ... which the TiDB
// parser knows as aggregates) and returns a reference to its result column
// after aggregation.
func (s *scope) aggregate(x *ast.AggregateFuncExpr) (exec.Expr, error) {
	name := strings.ToUpper(x.F)
	star := false
	if name == "COUNT" && len(x.Args) == 1 {
		if v, ok := x.Args[0].(*driver.ValueExpr); ok && v.GetValue() != nil {
			star = true
		}
	}
	return s.aggCall(x, name, x.F, x.Args, x.Distinct, star)
}

// aggCall registers one aggregate call; node is the call as parsed (for its
// text), args what the user wrote inside the parentheses.
func (s *scope) aggCall(node ast.ExprNode, name, written string, args []ast.ExprNode, distinct, star bool) (exec.Expr, error) {
	written = strings.ToLower(strings.TrimPrefix(written, "__"))
	if s.noAggs != "" {
		return nil, s.errf(sql.CodeGrouping, written, "aggregate functions are not allowed in %s", s.noAggs)
	}
	if s.agg == nil || s.inAgg {
		return nil, s.errf(sql.CodeGrouping, written, "aggregate %s cannot be nested or used here", strings.ToUpper(written))
	}
	txt := restore(node)
	for i, t := range s.agg.callText {
		if t == txt {
			return s.aggRef(i), nil
		}
	}
	info, ok := agg.Lookup(name)
	if !ok {
		return nil, s.errf(sql.CodeUndefinedFunc, written, "function %s does not exist", written)
	}
	inner := &scope{src: s.src, input: s.input, inAgg: true, eventTime: s.eventTime, tabs: s.tabs, q: s.q}
	call := AggCall{Spec: agg.Spec{Name: info.Name, Distinct: distinct, Star: star}, Text: txt}
	if !star {
		for i, a := range args {
			if slices.Contains(info.Consts, i) {
				want := types.Double
				if strings.HasPrefix(info.Name, "STRING_AGG") { // its constant is the delimiter
					want = types.Text
				}
				v, err := Constant(a, want, s.src)
				if err != nil {
					return nil, s.errf(sql.CodeInvalidParameter, written, "argument %d of %s must be a constant: %v", i+1, written, err)
				}
				call.Spec.Params = append(call.Spec.Params, v)
				continue
			}
			e, err := inner.compile(a)
			if err != nil {
				return nil, err
			}
			call.Args = append(call.Args, e)
			call.Spec.ArgTypes = append(call.Spec.ArgTypes, e.Type())
		}
	}
	if info.NeedsOrder {
		// "First" and "last" are by event time, ties by input position.
		tIdx := s.eventTime
		if s.agg.window != nil {
			tIdx = s.agg.window.TimeIdx
		}
		if tIdx < 0 {
			return nil, s.errf(sql.CodeNotSupported, written, "%s needs event time: declare WATERMARK FOR <column> on the source, or group by a window", strings.ToUpper(written))
		}
		seq := &exec.ColRef{Idx: len(s.input), Name: SeqColumn, T: types.Int}
		call.Args = append(call.Args, &exec.ColRef{Idx: tIdx, Name: s.input[tIdx].Name, T: s.input[tIdx].Type}, seq)
		call.Spec.ArgTypes = append(call.Spec.ArgTypes, s.input[tIdx].Type, types.Int)
		s.agg.needsSeq = true
	}
	f, err := agg.New(call.Spec)
	if err != nil {
		code := sql.CodeUndefinedFunc
		switch {
		case errors.Is(err, agg.ErrParam):
			code = sql.CodeInvalidParameter
		case errors.Is(err, agg.ErrNotSupported):
			code = sql.CodeNotSupported
		}
		return nil, s.errf(code, written, "%v", err)
	}
	call.Type = f.ResultType()
	s.agg.calls = append(s.agg.calls, call)
	s.agg.callText = append(s.agg.callText, txt)
	return s.aggRef(len(s.agg.calls) - 1), nil
}

// SeqColumn names the virtual input column the runner appends after the
// source's columns when an aggregate needs it (FIRST_VALUE, LAST_VALUE):
// each row's position in the input, (offset << 10) | partition, which
// breaks ties between rows of equal event time.
const SeqColumn = "__seq"

func (s *scope) aggRef(i int) exec.Expr {
	base := len(s.agg.keys)
	if s.agg.window != nil {
		base += 2
	}
	c := s.agg.calls[i]
	return &exec.ColRef{Idx: base + i, Name: strings.ToLower(c.Spec.Name), T: c.Type}
}

// Constant evaluates a constant expression (an INSERT value) as type t, with
// the same coercions a comparison would apply.
func Constant(n ast.ExprNode, t types.Type, src string) (any, error) {
	s := &scope{src: src, noAggs: "VALUES"}
	e, err := s.compile(n)
	if err != nil {
		return nil, err
	}
	et := e.Type()
	switch {
	case et == types.Unknown:
		return nil, nil
	case et == t:
	case et.Numeric() && t.Numeric(), et == types.Text:
		e = &exec.Cast{X: e, To: t}
	case t == types.Text:
		e = &exec.Cast{X: e, To: t}
	default:
		return nil, sql.Errorf(sql.CodeDatatypeMismatch, "value %s is %s, the column is %s", restore(n), lower(et), lower(t))
	}
	v, err := e.Eval(&exec.Batch{N: 1})
	if err != nil {
		return nil, err
	}
	return v.Value(0), nil
}
