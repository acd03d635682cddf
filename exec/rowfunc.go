package exec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/turbinesql/turbinesql/types"
)

// RowFunc is a scalar function evaluated a row at a time over Go values:
// the system-catalog functions (format_type, pg_get_indexdef, regclass
// lookups, ...), whose inputs are catalog rows, not data at volume. NULL
// arguments reach F unless Strict, in which case the result is NULL.
type RowFunc struct {
	Name   string
	Args   []Expr
	T      types.Type
	Strict bool
	F      func(args []any) (any, error)
}

func (f *RowFunc) Type() types.Type { return f.T }
func (f *RowFunc) String() string {
	parts := make([]string, len(f.Args))
	for i, a := range f.Args {
		parts[i] = a.String()
	}
	return f.Name + "(" + strings.Join(parts, ", ") + ")"
}

func (f *RowFunc) Eval(b *Batch) (*Vec, error) {
	args, err := evalAll(b, f.Args)
	if err != nil {
		return nil, err
	}
	out := newVec(f.T, b.N)
	vals := make([]any, len(args))
rows:
	for r := 0; r < b.N; r++ {
		for i, a := range args {
			vals[i] = a.Value(r)
			if vals[i] == nil && f.Strict {
				out.ensureNull()[r] = true
				continue rows
			}
		}
		v, err := f.F(vals)
		if err != nil {
			return nil, err
		}
		if err := storeValue(out, r, v); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
	}
	return out, nil
}

// storeValue sets row i of v to x, a Go value of v's type.
func storeValue(v *Vec, i int, x any) error {
	switch y := x.(type) {
	case nil:
		v.ensureNull()[i] = true
		return nil
	case int64:
		switch v.T {
		case types.Int, types.Timestamp, types.Interval:
			v.I[i] = y
			return nil
		case types.Double:
			v.F[i] = float64(y)
			return nil
		}
	case float64:
		if v.T == types.Double {
			v.F[i] = y
			return nil
		}
	case string:
		if v.T == types.Text {
			v.S[i] = y
			return nil
		}
	case bool:
		if v.T == types.Bool {
			v.B[i] = y
			return nil
		}
	case interface{ UnixMilli() int64 }:
		if v.T == types.Timestamp {
			v.I[i] = y.UnixMilli()
			return nil
		}
	}
	return fmt.Errorf("value %v (%T) is not of type %s", x, x, v.T)
}

// ConstVec is a Vec of n copies of x, a Go value of type t.
func ConstVec(t types.Type, x any, n int) (*Vec, error) {
	v := newVec(t, n)
	for i := 0; i < n; i++ {
		if err := storeValue(v, i, x); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// VecOf builds a column of type t from Go values.
func VecOf(t types.Type, vals []any) (*Vec, error) {
	v := newVec(t, len(vals))
	for i, x := range vals {
		if err := storeValue(v, i, x); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// OuterRef reads a value of the enclosing query's current row inside a
// correlated subquery: the Subquery that owns Cell sets it before each run.
type OuterRef struct {
	Cell *any
	Name string
	T    types.Type
}

func (o *OuterRef) Type() types.Type { return o.T }
func (o *OuterRef) String() string   { return "outer." + o.Name }
func (o *OuterRef) Eval(b *Batch) (*Vec, error) {
	return ConstVec(o.T, *o.Cell, b.N)
}

// Subquery is a subquery used as a value (scalar, EXISTS, IN, ARRAY). Run
// executes it with the Cells of its outer references set from Outer (each
// evaluated over the enclosing batch), and Reduce turns its rows (and the
// row's Probe value, for IN) into this row's value. An uncorrelated
// subquery runs once per Eval.
type Subquery struct {
	Text   string
	Outer  []Expr
	Cells  []*any
	Probe  Expr // IN: the left operand; nil otherwise
	T      types.Type
	Run    func() ([][]any, error)
	Reduce func(rows [][]any, probe any) (any, error)
}

func (s *Subquery) Type() types.Type { return s.T }
func (s *Subquery) String() string   { return "(" + s.Text + ")" }
func (s *Subquery) Eval(b *Batch) (*Vec, error) {
	outer, err := evalAll(b, s.Outer)
	if err != nil {
		return nil, err
	}
	var probe *Vec
	if s.Probe != nil {
		v, err := s.Probe.Eval(b)
		if err != nil {
			return nil, err
		}
		probe = v
	}
	out := newVec(s.T, b.N)
	var cached [][]any
	ran := false
	for r := 0; r < b.N; r++ {
		for i, v := range outer {
			*s.Cells[i] = v.Value(r)
		}
		if !ran || len(outer) > 0 {
			rows, err := s.Run()
			if err != nil {
				return nil, err
			}
			cached, ran = rows, true
		}
		var p any
		if probe != nil {
			p = probe.Value(r)
		}
		v, err := s.Reduce(cached, p)
		if err != nil {
			return nil, err
		}
		if err := storeValue(out, r, v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Take gathers rows idx of v; an index of -1 is a NULL.
func Take(v *Vec, idx []int) *Vec {
	out := newVec(v.T, len(idx))
	for k, i := range idx {
		if i < 0 || v.IsNull(i) {
			out.ensureNull()[k] = true
			continue
		}
		switch {
		case out.I != nil:
			out.I[k] = v.I[i]
		case out.F != nil:
			out.F[k] = v.F[i]
		case out.S != nil:
			out.S[k] = v.S[i]
		case out.B != nil:
			out.B[k] = v.B[i]
		}
	}
	return out
}

// RowNumber is row_number() OVER (PARTITION BY ... ORDER BY ...): each
// row's position within its partition. It numbers the batch it is given,
// so the planner uses it only where that batch is the whole input.
type RowNumber struct {
	Partition    []Expr
	Order        []Expr
	OrderCompare []func(a, b any) int // one per Order: its direction and NULLS placement
	Compare      func(a, b any) int   // orders PARTITION BY values (NULLs together)
}

func (r *RowNumber) Type() types.Type { return types.Int }
func (r *RowNumber) String() string   { return "row_number() OVER (...)" }
func (r *RowNumber) Eval(b *Batch) (*Vec, error) {
	parts, err := evalAll(b, r.Partition)
	if err != nil {
		return nil, err
	}
	orders, err := evalAll(b, r.Order)
	if err != nil {
		return nil, err
	}
	idx := make([]int, b.N)
	for i := range idx {
		idx[i] = i
	}
	cmpCols := func(cols []*Vec, cmps []func(a, b any) int, i, j int) int {
		for k, c := range cols {
			cmp := r.Compare
			if cmps != nil {
				cmp = cmps[k]
			}
			if x := cmp(c.Value(i), c.Value(j)); x != 0 {
				return x
			}
		}
		return 0
	}
	slices.SortStableFunc(idx, func(i, j int) int {
		if c := cmpCols(parts, nil, i, j); c != 0 {
			return c
		}
		return cmpCols(orders, r.OrderCompare, i, j)
	})
	out := newVec(types.Int, b.N)
	n := int64(0)
	for k, i := range idx {
		if k == 0 || cmpCols(parts, nil, idx[k-1], i) != 0 {
			n = 0
		}
		n++
		out.I[i] = n
	}
	return out, nil
}

// Concat appends b's rows to a's (same column types) into a new batch.
func Concat(a, b *Batch) *Batch {
	out := &Batch{N: a.N + b.N, Cols: make([]*Vec, len(a.Cols))}
	for c, x := range a.Cols {
		y := b.Cols[c]
		v := &Vec{T: x.T, N: out.N}
		v.I = append(append([]int64(nil), x.I[:min(len(x.I), x.N)]...), y.I[:min(len(y.I), y.N)]...)
		v.F = append(append([]float64(nil), x.F[:min(len(x.F), x.N)]...), y.F[:min(len(y.F), y.N)]...)
		v.S = append(append([]string(nil), x.S[:min(len(x.S), x.N)]...), y.S[:min(len(y.S), y.N)]...)
		v.B = append(append([]bool(nil), x.B[:min(len(x.B), x.N)]...), y.B[:min(len(y.B), y.N)]...)
		if x.Null != nil || y.Null != nil {
			v.Null = make([]bool, out.N)
			copy(v.Null, x.Null)
			copy(v.Null[x.N:], y.Null)
		}
		if !v.typed() { // an all-NULL column without values (types.Unknown)
			v = allNull(x.T, out.N)
		}
		out.Cols[c] = v
	}
	return out
}
