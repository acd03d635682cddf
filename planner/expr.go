package planner

import (
	"fmt"
	"math"
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
}

// aggScope collects aggregates and maps post-aggregation names.
type aggScope struct {
	keys     []exec.Expr // over the input
	keyText  []string    // restored SQL of each key, to match select items
	keyNames []string
	window   *WindowSpec
	calls    []AggCall
	callText []string
}

// restore prints an AST node back as SQL (lower-cased names), used to match
// select-list expressions against GROUP BY items.
func restore(n ast.Node) string {
	var b strings.Builder
	if err := n.Restore(format.NewRestoreCtx(format.RestoreStringSingleQuotes|format.RestoreNameBackQuotes|format.RestoreKeyWordLowercase|format.RestoreNameLowercase, &b)); err != nil {
		return fmt.Sprintf("%p", n)
	}
	return b.String()
}

func (s *scope) errf(code, name, format string, args ...any) error {
	e := sql.Errorf(code, format, args...)
	if name != "" {
		e.Pos = sql.FindPos(s.src, name)
	}
	return e
}

// compile turns an AST expression into an evaluator expression.
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
		e, err := s.compile(x.V)
		if err != nil {
			return nil, err
		}
		switch x.Op {
		case opcode.Not, opcode.Not2:
			if e.Type() != types.Bool && e.Type() != types.Unknown {
				return nil, s.errf(sql.CodeDatatypeMismatch, "", "argument of NOT must be type boolean, not type %s", lower(e.Type()))
			}
			return &exec.Not{X: e}, nil
		case opcode.Minus:
			if !e.Type().Numeric() {
				return nil, s.errf(sql.CodeUndefinedFunc, "", "operator does not exist: - %s", lower(e.Type()))
			}
			if l, ok := e.(*exec.Literal); ok { // fold -5 so it stays a literal
				switch v := l.V.(type) {
				case int64:
					return &exec.Literal{V: -v, T: l.T}, nil
				case float64:
					return &exec.Literal{V: -v, T: l.T}, nil
				}
			}
			return &exec.Not{X: e, Neg: true}, nil
		case opcode.Plus:
			return e, nil
		}
		return nil, s.errf(sql.CodeNotSupported, "", "operator %s is not supported", x.Op)
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
		if x.Sel != nil {
			return nil, s.errf(sql.CodeNotSupported, "", "IN (subquery) is not supported")
		}
		e, err := s.compile(x.Expr)
		if err != nil {
			return nil, err
		}
		var out exec.Expr
		for _, item := range x.List {
			v, err := s.compile(item)
			if err != nil {
				return nil, err
			}
			c, err := s.compare("=", e, v)
			if err != nil {
				return nil, err
			}
			if out == nil {
				out = c
			} else {
				out = &exec.Logic{L: out, R: c}
			}
		}
		if x.Not {
			out = &exec.Not{X: out}
		}
		return out, nil
	case *ast.FuncCastExpr:
		e, err := s.compile(x.Expr)
		if err != nil {
			return nil, err
		}
		to, ok := castTarget(x)
		if !ok {
			return nil, s.errf(sql.CodeNotSupported, "", "CAST to %s is not supported: use TEXT, BIGINT, DOUBLE, BOOLEAN or TIMESTAMP", x.Tp.String())
		}
		return coerce(&exec.Cast{X: e, To: to})
	case *ast.AggregateFuncExpr:
		return s.aggregate(x)
	case *ast.FuncCallExpr:
		return s.call(x)
	}
	return nil, s.errf(sql.CodeNotSupported, "", "expression %s is not supported", restore(n))
}

func lower(t types.Type) string { return strings.ToLower(t.String()) }

func castTarget(x *ast.FuncCastExpr) (types.Type, bool) {
	switch x.Tp.GetType() {
	case mysql.TypeLonglong, mysql.TypeLong, mysql.TypeShort, mysql.TypeTiny, mysql.TypeInt24:
		return types.Int, true
	case mysql.TypeDouble, mysql.TypeFloat, mysql.TypeNewDecimal:
		return types.Double, true
	case mysql.TypeVarString, mysql.TypeString, mysql.TypeVarchar, mysql.TypeBlob:
		return types.Text, true
	case mysql.TypeDatetime, mysql.TypeTimestamp, mysql.TypeDate:
		return types.Timestamp, true
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
		if s.input.Index(name) >= 0 {
			return nil, s.errf(sql.CodeGrouping, name, "column %q must appear in the GROUP BY clause or be used in an aggregate function", name)
		}
		return nil, s.errf(sql.CodeUndefinedColumn, name, "column %q does not exist", name)
	}
	i := s.input.Index(name)
	if i < 0 {
		return nil, s.errf(sql.CodeUndefinedColumn, name, "column %q does not exist", name).(*sql.Error).
			WithHint("available columns: %s", s.input)
	}
	return &exec.ColRef{Idx: i, Name: s.input[i].Name, T: s.input[i].Type}, nil
}

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
	case isTextLiteral(l):
		l, err = coerce(&exec.Cast{X: l, To: rt})
		return l, r, err
	}
	return nil, nil, s.errf(sql.CodeUndefinedFunc, "", "cannot compare %s with %s", lower(lt), lower(rt))
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
		for _, e := range []exec.Expr{l, r} {
			if e.Type() != types.Bool && e.Type() != types.Unknown {
				return nil, s.errf(sql.CodeDatatypeMismatch, "", "argument of %s must be type boolean, not type %s", strings.ToUpper(x.Op.String()), lower(e.Type()))
			}
		}
		if l.Type() == types.Unknown {
			l = &exec.Literal{T: types.Bool}
		}
		if r.Type() == types.Unknown {
			r = &exec.Literal{T: types.Bool}
		}
		return &exec.Logic{And: x.Op == opcode.LogicAnd, L: l, R: r}, nil
	case opcode.Plus, opcode.Minus, opcode.Mul, opcode.Div, opcode.Mod, opcode.IntDiv:
		ops := map[opcode.Op]byte{opcode.Plus: '+', opcode.Minus: '-', opcode.Mul: '*', opcode.Div: '/', opcode.Mod: '%', opcode.IntDiv: '/'}
		return s.arith(ops[x.Op], l, r)
	}
	return nil, s.errf(sql.CodeNotSupported, "", "operator %s is not supported", x.Op)
}

func (s *scope) arith(op byte, l, r exec.Expr) (exec.Expr, error) {
	lt, rt := l.Type(), r.Type()
	if lt == types.Unknown || rt == types.Unknown {
		t := lt
		if t == types.Unknown {
			t = rt
		}
		if t == types.Unknown {
			t = types.Int
		}
		return &exec.Literal{T: t}, nil
	}
	switch {
	case lt == types.Timestamp && rt == types.Interval && (op == '+' || op == '-'):
		return &exec.Arith{Op: op, L: l, R: r, T: types.Timestamp}, nil
	case lt == types.Interval && rt == types.Timestamp && op == '+':
		return &exec.Arith{Op: op, L: r, R: l, T: types.Timestamp}, nil
	case lt == types.Timestamp && rt == types.Timestamp && op == '-':
		return &exec.Arith{Op: op, L: l, R: r, T: types.Interval}, nil
	case lt.Numeric() && rt.Numeric():
		t := types.Int
		if lt == types.Double || rt == types.Double {
			t = types.Double
		}
		return &exec.Arith{Op: op, L: l, R: r, T: t}, nil
	case isTextLiteral(l) && rt.Numeric():
		l2, err := coerce(&exec.Cast{X: l, To: rt})
		if err != nil {
			return nil, err
		}
		return s.arith(op, l2, r)
	case isTextLiteral(r) && lt.Numeric():
		r2, err := coerce(&exec.Cast{X: r, To: lt})
		if err != nil {
			return nil, err
		}
		return s.arith(op, l, r2)
	}
	return nil, s.errf(sql.CodeUndefinedFunc, "", "operator does not exist: %s %c %s", lower(lt), op, lower(rt)).(*sql.Error).
		WithHint("arithmetic needs numbers, or a timestamp and an interval")
}

func (s *scope) call(x *ast.FuncCallExpr) (exec.Expr, error) {
	name := strings.ToUpper(x.FnName.O)
	if x.FnName.L == ast.TimestampLiteral || x.FnName.L == ast.DateLiteral {
		name = "TIMESTAMPLITERAL"
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
	case "NOW", "CURRENT_TIMESTAMP", "RAND", "RANDOM":
		return nil, s.errf(sql.CodeNotSupported, "", "%s() is not deterministic and is not supported in continuous queries", strings.ToLower(name))
	}
	arity, ok := exec.ScalarFuncs[name]
	if !ok {
		if agg.IsAggregate(name) {
			return nil, s.errf(sql.CodeNotSupported, "", "aggregate %s is not supported here", strings.ToLower(name))
		}
		return nil, s.errf(sql.CodeUndefinedFunc, strings.ToLower(x.FnName.O), "function %s does not exist", strings.ToLower(x.FnName.O))
	}
	if (arity >= 0 && len(x.Args) != arity) || (arity < 0 && len(x.Args) == 0) {
		return nil, s.errf(sql.CodeUndefinedFunc, "", "function %s takes %d argument(s), got %d", strings.ToLower(name), arity, len(x.Args))
	}
	args := make([]exec.Expr, len(x.Args))
	for i, a := range x.Args {
		e, err := s.compile(a)
		if err != nil {
			return nil, err
		}
		args[i] = e
	}
	switch name {
	case "COALESCE":
		t := types.Unknown
		for _, a := range args {
			at := a.Type()
			switch {
			case t == types.Unknown:
				t = at
			case at == types.Unknown, at == t:
			case t.Numeric() && at.Numeric():
				t = types.Double
			default:
				return nil, s.errf(sql.CodeDatatypeMismatch, "", "COALESCE types %s and %s cannot be matched", lower(t), lower(at))
			}
		}
		for i, a := range args {
			if a.Type() != t {
				c, err := coerce(&exec.Cast{X: a, To: t})
				if err != nil {
					return nil, err
				}
				args[i] = c
			}
		}
		return &exec.Call{Name: name, Args: args, T: t}, nil
	case "CONCAT":
		return &exec.Call{Name: name, Args: args, T: types.Text}, nil
	case "LOWER", "UPPER", "LENGTH", "CHAR_LENGTH":
		if args[0].Type() != types.Text && args[0].Type() != types.Unknown {
			return nil, s.errf(sql.CodeUndefinedFunc, "", "function %s(%s) does not exist", strings.ToLower(name), lower(args[0].Type()))
		}
		if args[0].Type() == types.Unknown {
			args[0] = &exec.Literal{T: types.Text}
		}
		t := types.Text
		if name == "LENGTH" || name == "CHAR_LENGTH" {
			t = types.Int
		}
		return &exec.Call{Name: name, Args: args, T: t}, nil
	case "ABS":
		if !args[0].Type().Numeric() {
			return nil, s.errf(sql.CodeUndefinedFunc, "", "function abs(%s) does not exist", lower(args[0].Type()))
		}
		return &exec.Call{Name: name, Args: args, T: args[0].Type()}, nil
	}
	return nil, s.errf(sql.CodeUndefinedFunc, "", "function %s does not exist", strings.ToLower(name))
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
	if kind != w.Kind {
		return nil, s.errf(sql.CodeGrouping, strings.ToLower(name), "%s does not match the GROUP BY window %s", name, w.Kind)
	}
	if len(x.Args) < 2 {
		return nil, s.errf(sql.CodeSyntax, strings.ToLower(name), "%s takes the same arguments as %s in GROUP BY", name, w.Kind)
	}
	col, ok := x.Args[0].(*ast.ColumnNameExpr)
	size, err := intArg(innerCall(x.Args[len(x.Args)-1]), 0)
	if !ok || err != nil || !strings.EqualFold(col.Name.Name.O, w.TimeCol) || size != w.SizeMs {
		return nil, s.errf(sql.CodeGrouping, strings.ToLower(name), "%s must repeat the arguments of %s(%s, ...) in GROUP BY", name, w.Kind, w.TimeCol)
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

// aggregate registers an aggregate call and returns a reference to its
// result column after aggregation.
func (s *scope) aggregate(x *ast.AggregateFuncExpr) (exec.Expr, error) {
	name := strings.ToUpper(x.F)
	if s.noAggs != "" {
		return nil, s.errf(sql.CodeGrouping, strings.ToLower(x.F), "aggregate functions are not allowed in %s", s.noAggs)
	}
	if s.agg == nil || s.inAgg {
		return nil, s.errf(sql.CodeGrouping, strings.ToLower(x.F), "aggregate %s cannot be nested or used here", name)
	}
	txt := restore(x)
	for i, t := range s.agg.callText {
		if t == txt {
			return s.aggRef(i), nil
		}
	}
	star := false
	if name == "COUNT" && len(x.Args) == 1 {
		if v, ok := x.Args[0].(*driver.ValueExpr); ok && v.GetValue() != nil {
			star = true
		}
	}
	inner := &scope{src: s.src, input: s.input, inAgg: true}
	call := AggCall{Spec: agg.Spec{Name: name, Distinct: x.Distinct, Star: star}, Text: txt}
	if !star {
		for _, a := range x.Args {
			e, err := inner.compile(a)
			if err != nil {
				return nil, err
			}
			call.Args = append(call.Args, e)
			call.Spec.ArgTypes = append(call.Spec.ArgTypes, e.Type())
		}
	}
	f, err := agg.New(call.Spec)
	if err != nil {
		code := sql.CodeUndefinedFunc
		if x.Distinct {
			code = sql.CodeNotSupported
		}
		return nil, s.errf(code, strings.ToLower(x.F), "%v", err)
	}
	call.Type = f.ResultType()
	s.agg.calls = append(s.agg.calls, call)
	s.agg.callText = append(s.agg.callText, txt)
	return s.aggRef(len(s.agg.calls) - 1), nil
}

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
