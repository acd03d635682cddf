package exec

import (
	"fmt"
	"math"
	"strings"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// Batch is the evaluator's input: N rows, one Vec per input column.
type Batch struct {
	N    int
	Cols []*Vec
}

// Expr is a compiled scalar expression, evaluated a column at a time.
//
// Every operator switches on its operand types once per batch and then runs
// a typed loop over the Vec slices: no interface call or type switch per
// row. Values in NULL rows are unspecified and never read for anything that
// can fail (a division, an overflow check), so NULL rows never raise errors.
type Expr interface {
	Type() types.Type
	Eval(b *Batch) (*Vec, error)
	String() string
}

// evalAll evaluates each of exprs over b.
func evalAll(b *Batch, exprs []Expr) ([]*Vec, error) {
	out := make([]*Vec, len(exprs))
	for i, e := range exprs {
		v, err := e.Eval(b)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

var (
	_ Expr = (*ColRef)(nil)
	_ Expr = (*Literal)(nil)
	_ Expr = (*Arith)(nil)
	_ Expr = (*Compare)(nil)
	_ Expr = (*Logic)(nil)
	_ Expr = (*Not)(nil)
	_ Expr = (*IsNull)(nil)
	_ Expr = (*Cast)(nil)
	_ Expr = (*Call)(nil)
	_ Expr = (*Case)(nil)
	_ Expr = (*InList)(nil)
	_ Expr = (*Like)(nil)
)

// ColRef reads input column Idx.
type ColRef struct {
	Idx  int
	Name string
	T    types.Type
}

func (c *ColRef) Type() types.Type { return c.T }
func (c *ColRef) String() string   { return c.Name }
func (c *ColRef) Eval(b *Batch) (*Vec, error) {
	if c.Idx < 0 || c.Idx >= len(b.Cols) {
		return nil, sql.Errorf(sql.CodeInternal, "column %s (#%d) is not in the batch", c.Name, c.Idx)
	}
	return b.Cols[c.Idx], nil
}

// Literal is a constant; V is nil, int64, float64, string or bool (millis
// int64 for timestamps and intervals).
type Literal struct {
	V any
	T types.Type
}

func (l *Literal) Type() types.Type { return l.T }
func (l *Literal) String() string {
	switch v := l.V.(type) {
	case nil:
		return "NULL"
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case int64:
		if l.T == types.Timestamp {
			return "TIMESTAMP '" + types.MillisTime(v).Format("2006-01-02 15:04:05.999") + "'"
		}
		if l.T == types.Interval {
			return fmt.Sprintf("INTERVAL '%d' MILLISECOND", v)
		}
	}
	return fmt.Sprint(l.V)
}

func (l *Literal) Eval(b *Batch) (*Vec, error) {
	v := newVec(l.T, b.N)
	switch x := l.V.(type) {
	case nil:
		return allNull(l.T, b.N), nil
	case int64:
		switch {
		case v.I != nil:
			for i := range v.I {
				v.I[i] = x
			}
		case v.F != nil:
			for i := range v.F {
				v.F[i] = float64(x)
			}
		}
	case float64:
		switch {
		case v.F != nil:
			for i := range v.F {
				v.F[i] = x
			}
		case v.I != nil:
			for i := range v.I {
				v.I[i] = int64(x)
			}
		}
	case string:
		for i := range v.S {
			v.S[i] = x
		}
	case bool:
		for i := range v.B {
			v.B[i] = x
		}
	}
	if !v.typed() {
		return nil, sql.Errorf(sql.CodeInternal, "literal %v cannot be of type %s", l.V, l.T)
	}
	return v, nil
}

// Arith is + - * / % over numbers, and the date/time arithmetic PostgreSQL
// has: TIMESTAMP ± INTERVAL, TIMESTAMP - TIMESTAMP (an INTERVAL), INTERVAL ±
// INTERVAL, INTERVAL * number, INTERVAL / number. The planner puts the
// TIMESTAMP or INTERVAL operand on the left. Integer division truncates;
// division by zero is 22012 and integer overflow 22003, as in PostgreSQL.
type Arith struct {
	Op   byte
	L, R Expr
	T    types.Type
}

func (a *Arith) Type() types.Type { return a.T }
func (a *Arith) String() string   { return fmt.Sprintf("(%s %c %s)", a.L, a.Op, a.R) }

func (a *Arith) Eval(b *Batch) (*Vec, error) {
	l, err := a.L.Eval(b)
	if err != nil {
		return nil, err
	}
	r, err := a.R.Eval(b)
	if err != nil {
		return nil, err
	}
	if !l.typed() || !r.typed() {
		return allNull(a.T, b.N), nil
	}
	out := newVec(a.T, b.N)
	out.Null = orNulls(l.Null, r.Null, b.N)
	switch {
	case a.T == types.Double:
		err = arithFloat(a.Op, asFloat(l), asFloat(r), out.F, out.Null)
	case a.T == types.Interval && r.T == types.Double:
		err = scaleInterval(a.Op, l.I, r.F, out.I, out.Null)
	case a.T == types.Interval && r.T == types.Int && (a.Op == '*' || a.Op == '/'):
		if a.Op == '*' {
			err = arithInt('*', l.I, r.I, out.I, out.Null, intervalRange)
		} else {
			err = scaleInterval('/', l.I, asFloat(r), out.I, out.Null)
		}
	case a.T == types.Timestamp && l.I != nil && r.I != nil:
		err = arithInt(a.Op, l.I, r.I, out.I, out.Null, timestampRange)
	case a.T == types.Interval && l.I != nil && r.I != nil:
		err = arithInt(a.Op, l.I, r.I, out.I, out.Null, intervalRange)
	case a.T == types.Int && l.I != nil && r.I != nil:
		err = arithInt(a.Op, l.I, r.I, out.I, out.Null, bigintRange)
	default:
		return nil, sql.Errorf(sql.CodeUndefinedFunc, "operator does not exist: %s %c %s", PGName(l.T), a.Op, PGName(r.T))
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

func bigintRange() error    { return sql.Errorf("22003", "bigint out of range") }
func timestampRange() error { return sql.Errorf("22008", "timestamp out of range") }
func intervalRange() error  { return sql.Errorf("22008", "interval out of range") }
func divByZero() error      { return sql.Errorf(sql.CodeDivisionByZero, "division by zero") }
func floatOverflow() error  { return sql.Errorf("22003", "value out of range: overflow") }
func floatUnderflow() error { return sql.Errorf("22003", "value out of range: underflow") }

func addInt(x, y int64) (int64, bool) {
	z := x + y
	return z, (x^z)&(y^z) >= 0
}

func subInt(x, y int64) (int64, bool) {
	z := x - y
	return z, (x^y)&(x^z) >= 0
}

func mulInt(x, y int64) (int64, bool) {
	if x == 0 || y == 0 {
		return 0, true
	}
	z := x * y
	if (x == -1 && y == math.MinInt64) || (y == -1 && x == math.MinInt64) || z/y != x {
		return 0, false
	}
	return z, true
}

// arithInt runs op over int64 slices, skipping NULL rows; rangeErr names
// the type that overflowed.
func arithInt(op byte, x, y, out []int64, null []bool, rangeErr func() error) error {
	switch op {
	case '+':
		for i := range out {
			if null != nil && null[i] {
				continue
			}
			z, ok := addInt(x[i], y[i])
			if !ok {
				return rangeErr()
			}
			out[i] = z
		}
	case '-':
		for i := range out {
			if null != nil && null[i] {
				continue
			}
			z, ok := subInt(x[i], y[i])
			if !ok {
				return rangeErr()
			}
			out[i] = z
		}
	case '*':
		for i := range out {
			if null != nil && null[i] {
				continue
			}
			z, ok := mulInt(x[i], y[i])
			if !ok {
				return rangeErr()
			}
			out[i] = z
		}
	case '/':
		for i := range out {
			if null != nil && null[i] {
				continue
			}
			switch {
			case y[i] == 0:
				return divByZero()
			case y[i] == -1 && x[i] == math.MinInt64:
				return rangeErr()
			}
			out[i] = x[i] / y[i]
		}
	case '%':
		for i := range out {
			if null != nil && null[i] {
				continue
			}
			switch y[i] {
			case 0:
				return divByZero()
			case -1: // MinInt64 % -1 would trap; the answer is 0
				out[i] = 0
			default:
				out[i] = x[i] % y[i]
			}
		}
	default:
		return sql.Errorf(sql.CodeUndefinedFunc, "operator %c is not defined for integers", op)
	}
	return nil
}

// arithFloat runs op over float64 slices with PostgreSQL's float8 checks:
// an infinite result from finite operands overflows, a zero result from
// non-zero operands of * or / underflows, and x / 0 is an error unless x is
// NaN. % is the remainder with the sign of the dividend (math.Mod).
func arithFloat(op byte, x, y, out []float64, null []bool) error {
	switch op {
	case '+':
		for i := range out {
			z := x[i] + y[i]
			if math.IsInf(z, 0) && !math.IsInf(x[i], 0) && !math.IsInf(y[i], 0) && (null == nil || !null[i]) {
				return floatOverflow()
			}
			out[i] = z
		}
	case '-':
		for i := range out {
			z := x[i] - y[i]
			if math.IsInf(z, 0) && !math.IsInf(x[i], 0) && !math.IsInf(y[i], 0) && (null == nil || !null[i]) {
				return floatOverflow()
			}
			out[i] = z
		}
	case '*':
		for i := range out {
			z := x[i] * y[i]
			if null == nil || !null[i] {
				if math.IsInf(z, 0) && !math.IsInf(x[i], 0) && !math.IsInf(y[i], 0) {
					return floatOverflow()
				}
				if z == 0 && x[i] != 0 && y[i] != 0 {
					return floatUnderflow()
				}
			}
			out[i] = z
		}
	case '/':
		for i := range out {
			if null != nil && null[i] {
				continue
			}
			if y[i] == 0 && !math.IsNaN(x[i]) {
				return divByZero()
			}
			z := x[i] / y[i]
			if math.IsInf(z, 0) && !math.IsInf(x[i], 0) {
				return floatOverflow()
			}
			if z == 0 && x[i] != 0 && !math.IsInf(y[i], 0) {
				return floatUnderflow()
			}
			out[i] = z
		}
	case '%':
		for i := range out {
			if null != nil && null[i] {
				continue
			}
			if y[i] == 0 && !math.IsNaN(x[i]) {
				return divByZero()
			}
			out[i] = math.Mod(x[i], y[i])
		}
	default:
		return sql.Errorf(sql.CodeUndefinedFunc, "operator %c is not defined for double precision", op)
	}
	return nil
}

// scaleInterval is INTERVAL * number and INTERVAL / number, rounded to the
// millisecond.
func scaleInterval(op byte, x []int64, y []float64, out []int64, null []bool) error {
	for i := range out {
		if null != nil && null[i] {
			continue
		}
		var z float64
		switch op {
		case '*':
			z = float64(x[i]) * y[i]
		case '/':
			if y[i] == 0 {
				return divByZero()
			}
			z = float64(x[i]) / y[i]
		default:
			return sql.Errorf(sql.CodeUndefinedFunc, "operator does not exist: interval %c double precision", op)
		}
		z = math.Round(z)
		if math.IsNaN(z) || z >= 9.223372036854775807e18 || z < -9.223372036854775808e18 {
			return intervalRange()
		}
		out[i] = int64(z)
	}
	return nil
}

// asFloat views a numeric Vec as float64s.
func asFloat(v *Vec) []float64 {
	if v.T == types.Double {
		return v.F
	}
	f := make([]float64, v.N)
	for i, x := range v.I {
		f[i] = float64(x)
	}
	return f
}

// Compare is = <> < <= > >= with SQL NULL semantics. Both sides have the
// same type, or are both numeric (compared as DOUBLE). Text compares by
// bytes (the C collation); NaN equals NaN and sorts above every number, as
// in PostgreSQL.
type Compare struct {
	Op   string
	L, R Expr
}

func (c *Compare) Type() types.Type { return types.Bool }
func (c *Compare) String() string   { return fmt.Sprintf("(%s %s %s)", c.L, c.Op, c.R) }

func (c *Compare) Eval(b *Batch) (*Vec, error) {
	l, err := c.L.Eval(b)
	if err != nil {
		return nil, err
	}
	r, err := c.R.Eval(b)
	if err != nil {
		return nil, err
	}
	if !l.typed() || !r.typed() {
		return allNull(types.Bool, b.N), nil
	}
	out := newVec(types.Bool, b.N)
	out.Null = orNulls(l.Null, r.Null, b.N)
	switch {
	case l.T == types.Text && r.T == types.Text:
		cmpOrdered(c.Op, l.S, r.S, out.B)
	case l.T == types.Bool && r.T == types.Bool:
		cmpBool(c.Op, l.B, r.B, out.B)
	case l.T == types.Double || r.T == types.Double:
		if l.I == nil && l.F == nil || r.I == nil && r.F == nil {
			return nil, cmpTypeError(l.T, r.T)
		}
		cmpFloat(c.Op, asFloat(l), asFloat(r), out.B)
	case l.I != nil && r.I != nil:
		cmpOrdered(c.Op, l.I, r.I, out.B)
	default:
		return nil, cmpTypeError(l.T, r.T)
	}
	return out, nil
}

func cmpTypeError(l, r types.Type) error {
	return sql.Errorf(sql.CodeUndefinedFunc, "operator does not exist: %s = %s", PGName(l), PGName(r))
}

func cmpOrdered[T int64 | string](op string, x, y []T, out []bool) {
	switch op {
	case "=":
		for i := range out {
			out[i] = x[i] == y[i]
		}
	case "<>", "!=":
		for i := range out {
			out[i] = x[i] != y[i]
		}
	case "<":
		for i := range out {
			out[i] = x[i] < y[i]
		}
	case "<=":
		for i := range out {
			out[i] = x[i] <= y[i]
		}
	case ">":
		for i := range out {
			out[i] = x[i] > y[i]
		}
	case ">=":
		for i := range out {
			out[i] = x[i] >= y[i]
		}
	}
}

func cmpFloat(op string, x, y []float64, out []bool) {
	switch op {
	case "=":
		for i := range out {
			out[i] = floatCmp(x[i], y[i]) == 0
		}
	case "<>", "!=":
		for i := range out {
			out[i] = floatCmp(x[i], y[i]) != 0
		}
	case "<":
		for i := range out {
			out[i] = floatCmp(x[i], y[i]) < 0
		}
	case "<=":
		for i := range out {
			out[i] = floatCmp(x[i], y[i]) <= 0
		}
	case ">":
		for i := range out {
			out[i] = floatCmp(x[i], y[i]) > 0
		}
	case ">=":
		for i := range out {
			out[i] = floatCmp(x[i], y[i]) >= 0
		}
	}
}

// cmpBool orders false before true.
func cmpBool(op string, x, y []bool, out []bool) {
	switch op {
	case "=":
		for i := range out {
			out[i] = x[i] == y[i]
		}
	case "<>", "!=":
		for i := range out {
			out[i] = x[i] != y[i]
		}
	case "<":
		for i := range out {
			out[i] = !x[i] && y[i]
		}
	case "<=":
		for i := range out {
			out[i] = !x[i] || y[i]
		}
	case ">":
		for i := range out {
			out[i] = x[i] && !y[i]
		}
	case ">=":
		for i := range out {
			out[i] = x[i] || !y[i]
		}
	}
}

// floatCmp orders NaN above every number and equal to itself, as PostgreSQL does.
func floatCmp(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	case a == b:
		return 0
	}
	an, bn := a != a, b != b
	switch {
	case an && bn:
		return 0
	case an:
		return 1
	}
	return -1
}

// Logic is AND / OR with Kleene (three-valued) semantics. R is evaluated
// only on the rows L leaves undecided when R could raise an error, so
// `b <> 0 AND a / b > 1` never divides by zero, as in PostgreSQL.
type Logic struct {
	And  bool
	L, R Expr
}

func (g *Logic) Type() types.Type { return types.Bool }
func (g *Logic) String() string {
	op := "OR"
	if g.And {
		op = "AND"
	}
	return fmt.Sprintf("(%s %s %s)", g.L, op, g.R)
}

func (g *Logic) Eval(b *Batch) (*Vec, error) {
	l, err := g.L.Eval(b)
	if err != nil {
		return nil, err
	}
	if !l.typed() {
		l = allNull(types.Bool, b.N)
	}
	var r *Vec
	if mayFail(g.R) {
		// Undecided rows: L is NULL, or true for AND, false for OR.
		sel := make([]bool, b.N)
		k := 0
		for i, v := range l.B {
			if l.IsNull(i) || v == g.And {
				sel[i] = true
				k++
			}
		}
		r, err = evalOn(g.R, b, sel, k)
	} else {
		r, err = g.R.Eval(b)
	}
	if err != nil {
		return nil, err
	}
	if !r.typed() {
		r = allNull(types.Bool, b.N)
	}
	out := newVec(types.Bool, b.N)
	lb, rb := l.B, r.B
	if l.Null == nil && r.Null == nil {
		if g.And {
			for i := range out.B {
				out.B[i] = lb[i] && rb[i]
			}
		} else {
			for i := range out.B {
				out.B[i] = lb[i] || rb[i]
			}
		}
		return out, nil
	}
	out.Null = make([]bool, b.N)
	ln, rn := l.Null, r.Null
	if ln == nil {
		ln = make([]bool, b.N)
	}
	if rn == nil {
		rn = make([]bool, b.N)
	}
	if g.And {
		for i := range out.B {
			lf := !ln[i] && !lb[i] // definitely false
			rf := !rn[i] && !rb[i]
			switch {
			case lf || rf:
			case ln[i] || rn[i]:
				out.Null[i] = true
			default:
				out.B[i] = true
			}
		}
	} else {
		for i := range out.B {
			lt := !ln[i] && lb[i] // definitely true
			rt := !rn[i] && rb[i]
			switch {
			case lt || rt:
				out.B[i] = true
			case ln[i] || rn[i]:
				out.Null[i] = true
			}
		}
	}
	return out, nil
}

// Not is NOT x (NULL stays NULL), or unary minus when Neg.
type Not struct {
	X   Expr
	Neg bool
}

func (n *Not) Type() types.Type { return n.X.Type() }
func (n *Not) String() string {
	if n.Neg {
		return fmt.Sprintf("(-%s)", n.X)
	}
	return fmt.Sprintf("(NOT %s)", n.X)
}

func (n *Not) Eval(b *Batch) (*Vec, error) {
	x, err := n.X.Eval(b)
	if err != nil {
		return nil, err
	}
	if !x.typed() {
		return allNull(x.T, b.N), nil
	}
	out := newVec(x.T, b.N)
	out.Null = x.copyNulls()
	switch x.T {
	case types.Bool:
		for i, v := range x.B {
			out.B[i] = !v
		}
	case types.Double:
		for i, v := range x.F {
			out.F[i] = -v
		}
	case types.Int, types.Interval:
		for i, v := range x.I {
			if v == math.MinInt64 && !x.IsNull(i) {
				if x.T == types.Interval {
					return nil, intervalRange()
				}
				return nil, bigintRange()
			}
			out.I[i] = -v
		}
	default:
		return nil, sql.Errorf(sql.CodeUndefinedFunc, "operator does not exist: - %s", PGName(x.T))
	}
	return out, nil
}

// IsNull is x IS [NOT] NULL.
type IsNull struct {
	X      Expr
	Negate bool
}

func (n *IsNull) Type() types.Type { return types.Bool }
func (n *IsNull) String() string {
	if n.Negate {
		return fmt.Sprintf("(%s IS NOT NULL)", n.X)
	}
	return fmt.Sprintf("(%s IS NULL)", n.X)
}

func (n *IsNull) Eval(b *Batch) (*Vec, error) {
	x, err := n.X.Eval(b)
	if err != nil {
		return nil, err
	}
	out := newVec(types.Bool, b.N)
	switch {
	case x.Null != nil:
		for i, isNull := range x.Null {
			out.B[i] = isNull != n.Negate
		}
	case !x.typed(): // an untyped NULL
		for i := range out.B {
			out.B[i] = !n.Negate
		}
	case n.Negate:
		for i := range out.B {
			out.B[i] = true
		}
	}
	return out, nil
}

// PGName is PostgreSQL's name for a type, for error messages.
func PGName(t types.Type) string {
	switch t {
	case types.Text:
		return "text"
	case types.Int:
		return "bigint"
	case types.Double:
		return "double precision"
	case types.Bool:
		return "boolean"
	case types.Timestamp:
		return "timestamp without time zone"
	case types.Interval:
		return "interval"
	}
	return "unknown"
}
