package exec

import (
	"fmt"
	"strings"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// Conditional evaluation. CASE, COALESCE and the right side of AND / OR
// evaluate an operand only on the rows that need it, as PostgreSQL does, so
// `CASE WHEN x = 0 THEN 0 ELSE 10 / x END` never divides by zero. The rows
// are gathered into a smaller batch (only the columns the operand reads),
// evaluated, and scattered back. Operands that cannot fail are evaluated on
// the whole batch instead, which is cheaper than gathering.

// evalOn evaluates e on the k rows of b where sel is true. The result has
// b.N rows; rows where sel is false are unspecified (NULL when e was
// gathered, e's value otherwise) and callers must not read them.
func evalOn(e Expr, b *Batch, sel []bool, k int) (*Vec, error) {
	if k == b.N || !mayFail(e) {
		return e.Eval(b)
	}
	if k == 0 {
		return allNull(e.Type(), b.N), nil
	}
	used := make([]bool, len(b.Cols))
	if !colsUsed(e, used) {
		for c := range used {
			used[c] = true
		}
	}
	sub := &Batch{N: k, Cols: make([]*Vec, len(b.Cols))}
	for c, v := range b.Cols {
		if used[c] {
			sub.Cols[c] = v.gather(sel, k)
		} else {
			sub.Cols[c] = allNull(v.T, k) // never read
		}
	}
	v, err := e.Eval(sub)
	if err != nil {
		return nil, err
	}
	return v.scatter(sel, b.N), nil
}

// mayFail reports whether evaluating e can raise an error on some input
// (a division, an overflow, a cast of text, an invalid LIKE pattern).
// Unknown expressions may fail.
func mayFail(e Expr) bool {
	switch x := e.(type) {
	case *ColRef, *Literal:
		return false
	case *Compare:
		return mayFail(x.L) || mayFail(x.R)
	case *Logic:
		return mayFail(x.L) || mayFail(x.R)
	case *Not:
		return x.Neg || mayFail(x.X)
	case *IsNull:
		return mayFail(x.X)
	case *Like:
		_, lit := x.Pattern.(*Literal)
		return !lit || mayFail(x.X)
	case *InList:
		for _, it := range x.List {
			if mayFail(it) {
				return true
			}
		}
		return mayFail(x.X)
	case *Case:
		for _, w := range x.Whens {
			if mayFail(w.Cond) || mayFail(w.Then) {
				return true
			}
		}
		return x.Else != nil && mayFail(x.Else)
	case *Cast:
		from := x.X.Type()
		safe := from == x.To || x.To == types.Text || (from == types.Int && x.To == types.Double) || from == types.Unknown
		return !safe || mayFail(x.X)
	case *Call:
		switch x.Name {
		case "COALESCE", "CONCAT", "||", "LOWER", "UPPER", "LENGTH", "CHAR_LENGTH", "CHARACTER_LENGTH",
			"OCTET_LENGTH", "TRIM", "BTRIM", "LTRIM", "RTRIM", "NULLIF", "FLOOR", "CEIL", "CEILING":
			for _, a := range x.Args {
				if mayFail(a) {
					return true
				}
			}
			return false
		}
	}
	return true
}

// colsUsed marks the input columns e reads; false if e contains an
// expression it does not know (then every column must be assumed read).
func colsUsed(e Expr, used []bool) bool {
	switch x := e.(type) {
	case *ColRef:
		if x.Idx >= 0 && x.Idx < len(used) {
			used[x.Idx] = true
		}
		return true
	case *Literal:
		return true
	case *Arith:
		return colsUsed(x.L, used) && colsUsed(x.R, used)
	case *Compare:
		return colsUsed(x.L, used) && colsUsed(x.R, used)
	case *Logic:
		return colsUsed(x.L, used) && colsUsed(x.R, used)
	case *Not:
		return colsUsed(x.X, used)
	case *IsNull:
		return colsUsed(x.X, used)
	case *Cast:
		return colsUsed(x.X, used)
	case *Like:
		return colsUsed(x.X, used) && colsUsed(x.Pattern, used)
	case *Call:
		for _, a := range x.Args {
			if !colsUsed(a, used) {
				return false
			}
		}
		return true
	case *InList:
		for _, a := range x.List {
			if !colsUsed(a, used) {
				return false
			}
		}
		return colsUsed(x.X, used)
	case *Case:
		for _, w := range x.Whens {
			if !colsUsed(w.Cond, used) || !colsUsed(w.Then, used) {
				return false
			}
		}
		return x.Else == nil || colsUsed(x.Else, used)
	}
	return false
}

// When is one WHEN cond THEN result arm of a CASE.
type When struct {
	Cond Expr // BOOLEAN
	Then Expr // of the CASE's type
}

// Case is a searched CASE (the planner turns a simple CASE x WHEN v ... into
// WHEN x = v ...). Each arm is evaluated only on the rows that reach it; a
// missing ELSE is NULL. Every THEN and the ELSE have type T.
type Case struct {
	Whens []When
	Else  Expr // nil: NULL
	T     types.Type
}

func (c *Case) Type() types.Type { return c.T }
func (c *Case) String() string {
	var sb strings.Builder
	sb.WriteString("CASE")
	for _, w := range c.Whens {
		fmt.Fprintf(&sb, " WHEN %s THEN %s", w.Cond, w.Then)
	}
	if c.Else != nil {
		fmt.Fprintf(&sb, " ELSE %s", c.Else)
	}
	sb.WriteString(" END")
	return sb.String()
}

func (c *Case) Eval(b *Batch) (*Vec, error) {
	out := allNull(c.T, b.N)
	rem := make([]bool, b.N) // rows no arm has taken yet
	for i := range rem {
		rem[i] = true
	}
	k := b.N
	take := make([]bool, b.N)
	for _, w := range c.Whens {
		if k == 0 {
			break
		}
		cv, err := evalOn(w.Cond, b, rem, k)
		if err != nil {
			return nil, err
		}
		if cv.T != types.Bool || !cv.typed() {
			continue // an untyped NULL condition takes no row
		}
		nt := 0
		for i, r := range rem {
			t := r && cv.B[i] && !cv.IsNull(i)
			take[i] = t
			if t {
				rem[i] = false
				nt++
			}
		}
		if nt == 0 {
			continue
		}
		k -= nt
		if err := c.fill(out, w.Then, b, take, nt); err != nil {
			return nil, err
		}
	}
	if k > 0 && c.Else != nil {
		if err := c.fill(out, c.Else, b, rem, k); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// fill evaluates e on the k rows of sel and copies them into out.
func (c *Case) fill(out *Vec, e Expr, b *Batch, sel []bool, k int) error {
	v, err := evalOn(e, b, sel, k)
	if err != nil {
		return err
	}
	if v, err = conform(v, c.T); err != nil {
		return err
	}
	out.mergeFrom(v, sel)
	return nil
}

// conform casts v to t if it is not of type t already (an untyped NULL
// becomes a typed one).
func conform(v *Vec, t types.Type) (*Vec, error) {
	if v.T == t {
		return v, nil
	}
	if !v.typed() {
		return allNull(t, v.N), nil
	}
	return castVec(v, t)
}

// InList is x [NOT] IN (list). Every item has x's type (the planner casts
// them). The result is true if x equals an item, else NULL if x or any item
// is NULL, else false; NOT IN negates that, NULL staying NULL.
type InList struct {
	X    Expr
	List []Expr
	Not  bool
}

func (n *InList) Type() types.Type { return types.Bool }
func (n *InList) String() string {
	parts := make([]string, len(n.List))
	for i, e := range n.List {
		parts[i] = e.String()
	}
	not := ""
	if n.Not {
		not = "NOT "
	}
	return fmt.Sprintf("(%s %sIN (%s))", n.X, not, strings.Join(parts, ", "))
}

func (n *InList) Eval(b *Batch) (*Vec, error) {
	x, err := n.X.Eval(b)
	if err != nil {
		return nil, err
	}
	out := newVec(types.Bool, b.N)
	if !x.typed() {
		return allNull(types.Bool, b.N), nil
	}
	sawNull := make([]bool, b.N) // an item was NULL on this row
	for _, item := range n.List {
		if lit, ok := item.(*Literal); ok && lit.T == x.T {
			if lit.V == nil {
				for i := range sawNull {
					sawNull[i] = true
				}
				continue
			}
			if err := inLiteral(x, lit.V, out.B); err != nil {
				return nil, err
			}
			continue
		}
		v, err := item.Eval(b)
		if err != nil {
			return nil, err
		}
		if v, err = conform(v, x.T); err != nil {
			return nil, err
		}
		if v.Null != nil {
			for i, isNull := range v.Null {
				sawNull[i] = sawNull[i] || isNull
			}
		}
		// A NULL item row holds an unspecified value: mask its match.
		hit := out.B
		if v.Null != nil {
			hit = make([]bool, b.N)
		}
		switch x.T {
		case types.Int, types.Timestamp, types.Interval:
			for i, xv := range x.I {
				hit[i] = hit[i] || xv == v.I[i]
			}
		case types.Double:
			for i, xv := range x.F {
				hit[i] = hit[i] || floatCmp(xv, v.F[i]) == 0
			}
		case types.Text:
			for i, xv := range x.S {
				hit[i] = hit[i] || xv == v.S[i]
			}
		case types.Bool:
			for i, xv := range x.B {
				hit[i] = hit[i] || xv == v.B[i]
			}
		}
		if v.Null != nil {
			for i, h := range hit {
				out.B[i] = out.B[i] || (h && !v.Null[i])
			}
		}
	}
	out.Null = make([]bool, b.N)
	anyNull := false
	for i := range out.B {
		if x.IsNull(i) || (!out.B[i] && sawNull[i]) {
			out.Null[i] = true
			out.B[i] = false
			anyNull = true
		} else if n.Not {
			out.B[i] = !out.B[i]
		}
	}
	if !anyNull {
		out.Null = nil
	}
	return out, nil
}

// inLiteral sets hit[i] where x[i] equals the constant v.
func inLiteral(x *Vec, v any, hit []bool) error {
	switch c := v.(type) {
	case int64:
		if x.I == nil {
			break
		}
		for i, xv := range x.I {
			hit[i] = hit[i] || xv == c
		}
		return nil
	case float64:
		if x.F == nil {
			break
		}
		for i, xv := range x.F {
			hit[i] = hit[i] || floatCmp(xv, c) == 0
		}
		return nil
	case string:
		if x.S == nil {
			break
		}
		for i, xv := range x.S {
			hit[i] = hit[i] || xv == c
		}
		return nil
	case bool:
		if x.B == nil {
			break
		}
		for i, xv := range x.B {
			hit[i] = hit[i] || xv == c
		}
		return nil
	}
	return sql.Errorf(sql.CodeInternal, "IN list constant %v does not match type %s", v, x.T)
}
