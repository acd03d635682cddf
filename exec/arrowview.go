package exec

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/types"
)

// arrowView returns v as an Arrow array. Fixed-width columns (BIGINT,
// DOUBLE, TIMESTAMP, INTERVAL) share v's memory rather than being copied:
// an aggregate's update loop reads them a batch at a time, and a copy per
// argument per batch was a visible share of the hash aggregation's time.
// Only the validity bitmap is built, and only when v has NULLs. The view is
// valid while v is not modified.
func arrowView(v *Vec, mem memory.Allocator) arrow.Array {
	var dt arrow.DataType
	var values []byte
	switch v.T {
	case types.Int, types.Interval:
		dt, values = arrow.PrimitiveTypes.Int64, arrow.Int64Traits.CastToBytes(v.I[:v.N])
	case types.Timestamp:
		dt = arrow.FixedWidthTypes.Timestamp_ms
		values = arrow.Int64Traits.CastToBytes(v.I[:v.N])
	case types.Double:
		dt, values = arrow.PrimitiveTypes.Float64, arrow.Float64Traits.CastToBytes(v.F[:v.N])
	default:
		return v.ToArrow(mem)
	}
	var validity *memory.Buffer
	nulls := 0
	if v.Null != nil {
		bm := make([]byte, bitutil.BytesForBits(int64(v.N)))
		for i, isNull := range v.Null[:v.N] {
			if isNull {
				nulls++
			} else {
				bitutil.SetBit(bm, i)
			}
		}
		if nulls > 0 {
			validity = memory.NewBufferBytes(bm)
		}
	}
	data := array.NewData(dt, v.N, []*memory.Buffer{validity, memory.NewBufferBytes(values)}, nil, nulls, 0)
	defer data.Release()
	return array.MakeFromData(data)
}
