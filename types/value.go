package types

import (
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Value reads row i of an Arrow column as a Go value: nil, string, int64,
// float64, bool or time.Time (UTC). It is for result rows at the edges
// (pgwire, JSON output), never for inner loops.
func Value(col arrow.Array, i int) any {
	if col.IsNull(i) {
		return nil
	}
	switch c := col.(type) {
	case *array.String:
		return c.Value(i)
	case *array.Int64:
		return c.Value(i)
	case *array.Float64:
		return c.Value(i)
	case *array.Boolean:
		return c.Value(i)
	case *array.Timestamp:
		return time.UnixMilli(int64(c.Value(i))).UTC()
	}
	return nil
}

// MillisTime converts epoch milliseconds to a UTC time.
func MillisTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
