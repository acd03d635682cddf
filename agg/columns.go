package agg

import (
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/types"
)

// This file reads argument columns a column at a time: each helper switches
// on the Arrow array type once and runs a typed loop, so the per-row loops of
// the aggregates see plain Go slices and never call through arrow.Array.

// valid is the validity bitmap of one argument column, read once per batch.
// Calling IsValid through the arrow.Array interface is an interface call per
// row; testing the bit here is not.
type valid struct {
	bits []byte // nil: no row is NULL
	off  int
}

// validOf returns a's validity; none reports that every row is NULL (this
// includes arrow's Null type, whose IsValid wrongly says true: it has no
// bitmap at all).
func validOf(a arrow.Array) (v valid, none bool) {
	if a.Len() == 0 || a.NullN() == a.Len() || a.DataType().ID() == arrow.NULL {
		return valid{}, true
	}
	if a.NullN() == 0 {
		return valid{}, false
	}
	return valid{bits: a.NullBitmapBytes(), off: a.Data().Offset()}, false
}

func (v valid) ok(i int) bool { return v.bits == nil || bitutil.BitIsSet(v.bits, v.off+i) }

// floats returns a's values as float64, BIGINT converted (as PostgreSQL
// casts bigint to float8 for the floating-point aggregates). A DOUBLE column
// is returned without copying; conversions go to *scratch, which is kept
// for the next batch (a zero-copy slice never is: it is Arrow's memory).
func floats(a arrow.Array, scratch *[]float64) []float64 {
	if c, ok := a.(*array.Float64); ok {
		return c.Float64Values()
	}
	dst := growSlice((*scratch)[:0], a.Len())
	*scratch = dst
	if c, ok := a.(*array.Int64); ok {
		for i, v := range c.Int64Values() {
			dst[i] = float64(v)
		}
	}
	return dst // otherwise a NULL column: every row is skipped
}

// ints returns the values of a BIGINT or TIMESTAMP (epoch millis) column,
// as floats does.
func ints(a arrow.Array, scratch *[]int64) []int64 {
	if c, ok := a.(*array.Int64); ok {
		return c.Int64Values()
	}
	dst := growSlice((*scratch)[:0], a.Len())
	*scratch = dst
	if c, ok := a.(*array.Timestamp); ok {
		for i, v := range c.TimestampValues() {
			dst[i] = int64(v)
		}
	}
	return dst
}

// strs returns the values of a TEXT column. The strings alias Arrow memory
// that is released after the batch: clone before keeping one.
func strs(a arrow.Array, scratch *[]string) []string {
	dst := growSlice((*scratch)[:0], a.Len())
	*scratch = dst
	if c, ok := a.(*array.String); ok {
		for i := range dst {
			dst[i] = c.Value(i)
		}
	}
	return dst
}

// Non-text values are held in accumulators as order keys: uint64s whose
// unsigned order is the SQL order of the values, so one generic code path
// compares, sorts and encodes BIGINT, DOUBLE, BOOLEAN and TIMESTAMP alike.
// A key converts back to its value exactly (fromKey).

const signBit = 1 << 63

// memAlloc allocates the few arrays aggregates build themselves.
var memAlloc memory.Allocator = memory.DefaultAllocator

// canonNaN is the one NaN keys hold: SQL has one NaN, above every number.
var canonNaN = math.Float64bits(math.NaN())

// floatKey orders doubles as PostgreSQL does: -Inf < ... < +Inf < NaN. -0
// sorts just below +0, so ties between them break the same way every time;
// pass canonZero to make them one value (SQL equality: -0 = 0).
func floatKey(f float64, canonZero bool) uint64 {
	b := math.Float64bits(f)
	switch {
	case f != f:
		b = canonNaN
	case canonZero && f == 0:
		b = 0
	}
	if b&signBit != 0 {
		return ^b
	}
	return b | signBit
}

func keyFloat(k uint64) float64 {
	if k&signBit != 0 {
		return math.Float64frombits(k &^ signBit)
	}
	return math.Float64frombits(^k)
}

func intKey(v int64) uint64 { return uint64(v) ^ signBit }
func keyInt(k uint64) int64 { return int64(k ^ signBit) }

// keys returns the order keys of a non-text column in *scratch; canonZero
// as floatKey.
func keys(a arrow.Array, canonZero bool, scratch *[]uint64) []uint64 {
	dst := growSlice((*scratch)[:0], a.Len())
	*scratch = dst
	switch c := a.(type) {
	case *array.Int64:
		for i, v := range c.Int64Values() {
			dst[i] = intKey(v)
		}
	case *array.Timestamp:
		for i, v := range c.TimestampValues() {
			dst[i] = intKey(int64(v))
		}
	case *array.Float64:
		for i, v := range c.Float64Values() {
			dst[i] = floatKey(v, canonZero)
		}
	case *array.Boolean:
		for i := range dst {
			dst[i] = 0
			if c.Value(i) {
				dst[i] = 1
			}
		}
	}
	return dst
}

// fromKey is the Result value of key k of a column of type t.
func fromKey(t types.Type, k uint64) any {
	switch t {
	case types.Double:
		return keyFloat(k)
	case types.Bool:
		return k != 0
	case types.Timestamp:
		return types.MillisTime(keyInt(k))
	}
	return keyInt(k)
}

// keysArray builds a column of type t from keys, for aggregates that
// recompute over a set of values (DISTINCT).
func keysArray(t types.Type, ks []uint64, ss []string) arrow.Array {
	mem := memAlloc
	switch t {
	case types.Text:
		b := array.NewStringBuilder(mem)
		defer b.Release()
		b.AppendValues(ss, nil)
		return b.NewArray()
	case types.Double:
		b := array.NewFloat64Builder(mem)
		defer b.Release()
		for _, k := range ks {
			b.Append(keyFloat(k))
		}
		return b.NewArray()
	case types.Bool:
		b := array.NewBooleanBuilder(mem)
		defer b.Release()
		for _, k := range ks {
			b.Append(k != 0)
		}
		return b.NewArray()
	case types.Timestamp:
		b := array.NewTimestampBuilder(mem, arrow.FixedWidthTypes.Timestamp_ms.(*arrow.TimestampType))
		defer b.Release()
		for _, k := range ks {
			b.Append(arrow.Timestamp(keyInt(k)))
		}
		return b.NewArray()
	}
	b := array.NewInt64Builder(mem)
	defer b.Release()
	for _, k := range ks {
		b.Append(keyInt(k))
	}
	return b.NewArray()
}
