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
type Expr interface {
	Type() types.Type
	Eval(b *Batch) (*Vec, error)
	String() string
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
)

// ColRef reads input column Idx.
type ColRef struct {
	Idx  int
	Name string
	T    types.Type
}

func (c *ColRef) Type() types.Type            { return c.T }
func (c *ColRef) String() string              { return c.Name }
func (c *ColRef) Eval(b *Batch) (*Vec, error) { return b.Cols[c.Idx], nil }

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
		v.Null = make([]bool, b.N)
		for i := range v.Null {
			v.Null[i] = true
		}
	case int64:
		for i := range v.I {
			v.I[i] = x
		}
	case float64:
		for i := range v.F {
			v.F[i] = x
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
	return v, nil
}

// Arith is + - * / % over numbers, and TIMESTAMP ± INTERVAL.
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
	out := newVec(a.T, b.N)
	out.Null = orNulls(l.Null, r.Null, b.N)
	switch a.T {
	case types.Double:
		lf, rf := asFloat(l), asFloat(r)
		for i := range out.F {
			if out.IsNull(i) {
				continue
			}
			x, y := lf[i], rf[i]
			switch a.Op {
			case '+':
				out.F[i] = x + y
			case '-':
				out.F[i] = x - y
			case '*':
				out.F[i] = x * y
			case '/':
				if y == 0 {
					return nil, sql.Errorf(sql.CodeDivisionByZero, "division by zero")
				}
				out.F[i] = x / y
			case '%':
				if y == 0 {
					return nil, sql.Errorf(sql.CodeDivisionByZero, "division by zero")
				}
				out.F[i] = math.Mod(x, y)
			}
		}
	case types.Int, types.Timestamp, types.Interval:
		for i := range out.I {
			if out.IsNull(i) {
				continue
			}
			x, y := l.I[i], r.I[i]
			var z int64
			switch a.Op {
			case '+':
				z = x + y
				if (z > x) != (y > 0) {
					return nil, overflow()
				}
			case '-':
				z = x - y
				if (z < x) != (y > 0) {
					return nil, overflow()
				}
			case '*':
				if x != 0 && y != 0 {
					z = x * y
					if z/y != x || (x == -1 && y == math.MinInt64) || (y == -1 && x == math.MinInt64) {
						return nil, overflow()
					}
				}
			case '/':
				if y == 0 {
					return nil, sql.Errorf(sql.CodeDivisionByZero, "division by zero")
				}
				if x == math.MinInt64 && y == -1 {
					return nil, overflow()
				}
				z = x / y
			case '%':
				if y == 0 {
					return nil, sql.Errorf(sql.CodeDivisionByZero, "division by zero")
				}
				if y != -1 {
					z = x % y
				}
			}
			out.I[i] = z
		}
	}
	return out, nil
}

func overflow() error { return sql.Errorf("22003", "bigint out of range") }

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

// Compare is = <> < <= > >= with SQL NULL semantics.
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
	out := newVec(types.Bool, b.N)
	out.Null = orNulls(l.Null, r.Null, b.N)
	cmp := make([]int, b.N)
	switch {
	case l.T == types.Text:
		for i := range cmp {
			cmp[i] = strings.Compare(l.S[i], r.S[i])
		}
	case l.T == types.Bool:
		for i := range cmp {
			cmp[i] = boolCmp(l.B[i], r.B[i])
		}
	case l.T == types.Double || r.T == types.Double:
		lf, rf := asFloat(l), asFloat(r)
		for i := range cmp {
			cmp[i] = floatCmp(lf[i], rf[i])
		}
	default:
		for i := range cmp {
			switch {
			case l.I[i] < r.I[i]:
				cmp[i] = -1
			case l.I[i] > r.I[i]:
				cmp[i] = 1
			}
		}
	}
	for i, k := range cmp {
		switch c.Op {
		case "=":
			out.B[i] = k == 0
		case "<>":
			out.B[i] = k != 0
		case "<":
			out.B[i] = k < 0
		case "<=":
			out.B[i] = k <= 0
		case ">":
			out.B[i] = k > 0
		case ">=":
			out.B[i] = k >= 0
		}
	}
	return out, nil
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// floatCmp orders NaN above every number and equal to itself, as PostgreSQL does.
func floatCmp(a, b float64) int {
	an, bn := math.IsNaN(a), math.IsNaN(b)
	switch {
	case an && bn:
		return 0
	case an:
		return 1
	case bn:
		return -1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Logic is AND / OR with Kleene (three-valued) semantics.
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
	r, err := g.R.Eval(b)
	if err != nil {
		return nil, err
	}
	out := newVec(types.Bool, b.N)
	for i := 0; i < b.N; i++ {
		ln, rn := l.IsNull(i), r.IsNull(i)
		lv, rv := !ln && l.B[i], !rn && r.B[i]
		if g.And {
			switch {
			case (!ln && !lv) || (!rn && !rv):
				out.B[i] = false
			case ln || rn:
				out.ensureNull()[i] = true
			default:
				out.B[i] = true
			}
		} else {
			switch {
			case lv || rv:
				out.B[i] = true
			case ln || rn:
				out.ensureNull()[i] = true
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
	out := newVec(x.T, b.N)
	if x.Null != nil {
		out.Null = append([]bool(nil), x.Null...)
	}
	switch x.T {
	case types.Bool:
		for i, v := range x.B {
			out.B[i] = !v
		}
	case types.Double:
		for i, v := range x.F {
			out.F[i] = -v
		}
	default:
		for i, v := range x.I {
			if v == math.MinInt64 {
				return nil, overflow()
			}
			out.I[i] = -v
		}
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
	for i := range out.B {
		out.B[i] = x.IsNull(i) != n.Negate
	}
	return out, nil
}
