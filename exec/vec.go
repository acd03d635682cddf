package exec

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/types"
)

// Vec is the evaluator's working column: one typed Go slice plus a null
// mask. Int64, Float64 and Timestamp columns from Arrow are viewed without a
// copy; results are turned back into Arrow arrays only at operator edges.
type Vec struct {
	T    types.Type
	N    int
	I    []int64   // Int, Timestamp (millis), Interval (millis)
	F    []float64 // Double
	S    []string  // Text
	B    []bool    // Bool
	Null []bool    // nil: no nulls
}

// IsNull reports whether row i is NULL.
func (v *Vec) IsNull(i int) bool { return v.Null != nil && v.Null[i] }

func newVec(t types.Type, n int) *Vec {
	v := &Vec{T: t, N: n}
	switch t {
	case types.Int, types.Timestamp, types.Interval:
		v.I = make([]int64, n)
	case types.Double:
		v.F = make([]float64, n)
	case types.Text:
		v.S = make([]string, n)
	case types.Bool:
		v.B = make([]bool, n)
	}
	return v
}

func (v *Vec) ensureNull() []bool {
	if v.Null == nil {
		v.Null = make([]bool, v.N)
	}
	return v.Null
}

// orNulls returns a mask that is null where a or b is (nil when neither has nulls).
func orNulls(a, b []bool, n int) []bool {
	switch {
	case a == nil && b == nil:
		return nil
	case a == nil:
		return append([]bool(nil), b...)
	case b == nil:
		return append([]bool(nil), a...)
	}
	out := make([]bool, n)
	for i := range out {
		out[i] = a[i] || b[i]
	}
	return out
}

// FromArrow views an Arrow column as a Vec.
func FromArrow(a arrow.Array, t types.Type) *Vec {
	n := a.Len()
	v := &Vec{T: t, N: n}
	if a.NullN() > 0 {
		v.Null = make([]bool, n)
		for i := 0; i < n; i++ {
			v.Null[i] = a.IsNull(i)
		}
	}
	switch c := a.(type) {
	case *array.Int64:
		v.I = c.Int64Values()
	case *array.Timestamp:
		ts := c.TimestampValues()
		v.I = make([]int64, n)
		for i, x := range ts {
			v.I[i] = int64(x)
		}
	case *array.Float64:
		v.F = c.Float64Values()
	case *array.String:
		v.S = make([]string, n)
		for i := 0; i < n; i++ {
			v.S[i] = c.Value(i)
		}
	case *array.Boolean:
		v.B = make([]bool, n)
		for i := 0; i < n; i++ {
			v.B[i] = c.Value(i)
		}
	case *array.Null:
		v = newVec(t, n)
		v.Null = make([]bool, n)
		for i := range v.Null {
			v.Null[i] = true
		}
	}
	return v
}

// ToArrow builds an Arrow array from v.
func (v *Vec) ToArrow(mem memory.Allocator) arrow.Array {
	var valid []bool
	if v.Null != nil {
		valid = make([]bool, v.N)
		for i, isNull := range v.Null {
			valid[i] = !isNull
		}
	}
	switch v.T {
	case types.Int, types.Interval:
		b := array.NewInt64Builder(mem)
		defer b.Release()
		b.AppendValues(v.I, valid)
		return b.NewArray()
	case types.Timestamp:
		b := array.NewTimestampBuilder(mem, arrow.FixedWidthTypes.Timestamp_ms.(*arrow.TimestampType))
		defer b.Release()
		ts := make([]arrow.Timestamp, v.N)
		for i, x := range v.I {
			ts[i] = arrow.Timestamp(x)
		}
		b.AppendValues(ts, valid)
		return b.NewArray()
	case types.Double:
		b := array.NewFloat64Builder(mem)
		defer b.Release()
		b.AppendValues(v.F, valid)
		return b.NewArray()
	case types.Text:
		b := array.NewStringBuilder(mem)
		defer b.Release()
		b.AppendValues(v.S, valid)
		return b.NewArray()
	case types.Bool:
		b := array.NewBooleanBuilder(mem)
		defer b.Release()
		b.AppendValues(v.B, valid)
		return b.NewArray()
	}
	b := array.NewNullBuilder(mem)
	defer b.Release()
	b.AppendNulls(v.N)
	return b.NewArray()
}

// Value returns row i as a Go value (nil, int64, float64, string, bool,
// time.Time), for result rows at the edges.
func (v *Vec) Value(i int) any {
	if v.IsNull(i) {
		return nil
	}
	switch v.T {
	case types.Int, types.Interval:
		return v.I[i]
	case types.Timestamp:
		return types.MillisTime(v.I[i])
	case types.Double:
		return v.F[i]
	case types.Text:
		return v.S[i]
	case types.Bool:
		return v.B[i]
	}
	return nil
}

// allNull returns a Vec of n NULLs of type t.
func allNull(t types.Type, n int) *Vec {
	v := newVec(t, n)
	v.Null = make([]bool, n)
	for i := range v.Null {
		v.Null[i] = true
	}
	return v
}

// copyNulls returns a copy of v's null mask (nil when it has none).
func (v *Vec) copyNulls() []bool {
	if v.Null == nil {
		return nil
	}
	return append([]bool(nil), v.Null...)
}

// typed reports whether v has the value slice its type needs; an untyped
// NULL (types.Unknown) has none.
func (v *Vec) typed() bool {
	switch v.T {
	case types.Int, types.Timestamp, types.Interval:
		return len(v.I) == v.N
	case types.Double:
		return len(v.F) == v.N
	case types.Text:
		return len(v.S) == v.N
	case types.Bool:
		return len(v.B) == v.N
	}
	return false
}

// gather returns the k rows of v where sel is true, in order.
func (v *Vec) gather(sel []bool, k int) *Vec {
	if !v.typed() {
		return allNull(v.T, k)
	}
	out := newVec(v.T, k)
	if v.Null != nil {
		out.Null = make([]bool, k)
		gatherInto(out.Null, v.Null, sel)
	}
	switch v.T {
	case types.Int, types.Timestamp, types.Interval:
		gatherInto(out.I, v.I, sel)
	case types.Double:
		gatherInto(out.F, v.F, sel)
	case types.Text:
		gatherInto(out.S, v.S, sel)
	case types.Bool:
		gatherInto(out.B, v.B, sel)
	}
	return out
}

// scatter is the inverse of gather: row j of v goes to the j-th row where
// sel is true in a Vec of n rows; the other rows are NULL.
func (v *Vec) scatter(sel []bool, n int) *Vec {
	out := allNull(v.T, n)
	if !v.typed() {
		return out
	}
	j := 0
	for i, s := range sel {
		if s {
			out.Null[i] = v.IsNull(j)
			j++
		}
	}
	switch v.T {
	case types.Int, types.Timestamp, types.Interval:
		scatterInto(out.I, v.I, sel)
	case types.Double:
		scatterInto(out.F, v.F, sel)
	case types.Text:
		scatterInto(out.S, v.S, sel)
	case types.Bool:
		scatterInto(out.B, v.B, sel)
	}
	return out
}

// gatherInto copies the elements of src where sel is true to the front of
// dst, in order: one typed loop per column, whatever its type.
func gatherInto[T any](dst, src []T, sel []bool) {
	j := 0
	for i, s := range sel {
		if s {
			dst[j] = src[i]
			j++
		}
	}
}

// scatterInto is the inverse of gatherInto: src[j] goes to the j-th index
// where sel is true.
func scatterInto[T any](dst, src []T, sel []bool) {
	j := 0
	for i, s := range sel {
		if s {
			dst[i] = src[j]
			j++
		}
	}
}

// mergeFrom copies the rows of src where take is true into v (same type,
// same length), nulls included. v must have a null mask.
func (v *Vec) mergeFrom(src *Vec, take []bool) {
	if !src.typed() {
		for i, t := range take {
			if t {
				v.Null[i] = true
			}
		}
		return
	}
	for i, t := range take {
		if t {
			v.Null[i] = src.IsNull(i)
		}
	}
	switch v.T {
	case types.Int, types.Timestamp, types.Interval:
		for i, t := range take {
			if t {
				v.I[i] = src.I[i]
			}
		}
	case types.Double:
		for i, t := range take {
			if t {
				v.F[i] = src.F[i]
			}
		}
	case types.Text:
		for i, t := range take {
			if t {
				v.S[i] = src.S[i]
			}
		}
	case types.Bool:
		for i, t := range take {
			if t {
				v.B[i] = src.B[i]
			}
		}
	}
}
