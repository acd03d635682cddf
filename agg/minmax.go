package agg

import (
	"encoding/binary"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/turbinesql/turbinesql/types"
)

func newMinMax(t types.Type, isMax bool) Func {
	switch t {
	case types.Text:
		return &minMaxText{isMax: isMax}
	case types.Double:
		return &minMaxFloat{isMax: isMax}
	default: // Int, Timestamp and Bool all travel as int64 here
		return &minMaxInt{isMax: isMax, typ: t}
	}
}

// minMaxInt is MIN/MAX over BIGINT, TIMESTAMP (millis) and BOOLEAN (0/1).
type minMaxInt struct {
	isMax bool
	typ   types.Type
	v     []int64
	valid []bool
}

func (m *minMaxInt) Grow(n int)             { m.v, m.valid = growSlice(m.v, n), growSlice(m.valid, n) }
func (m *minMaxInt) Reset(slot uint32)      { m.v[slot], m.valid[slot] = 0, false }
func (m *minMaxInt) ResultType() types.Type { return m.typ }
func (m *minMaxInt) Mergeable() bool        { return true }

func (m *minMaxInt) put(slot uint32, x int64) {
	if !m.valid[slot] || (m.isMax && x > m.v[slot]) || (!m.isMax && x < m.v[slot]) {
		m.v[slot], m.valid[slot] = x, true
	}
}

func (m *minMaxInt) Update(slots []uint32, args []arrow.Array) {
	switch c := args[0].(type) {
	case *array.Int64:
		vals := c.Int64Values()
		for i, sl := range slots {
			if c.IsValid(i) {
				m.put(sl, vals[i])
			}
		}
	case *array.Timestamp:
		vals := c.TimestampValues()
		for i, sl := range slots {
			if c.IsValid(i) {
				m.put(sl, int64(vals[i]))
			}
		}
	case *array.Boolean:
		for i, sl := range slots {
			if c.IsValid(i) {
				x := int64(0)
				if c.Value(i) {
					x = 1
				}
				m.put(sl, x)
			}
		}
	}
}

func (m *minMaxInt) Result(slot uint32) any {
	if !m.valid[slot] {
		return nil
	}
	switch m.typ {
	case types.Timestamp:
		return types.MillisTime(m.v[slot])
	case types.Bool:
		return m.v[slot] != 0
	}
	return m.v[slot]
}

func (m *minMaxInt) Encode(dst []byte, slot uint32) []byte {
	dst = append(dst, encV1)
	if !m.valid[slot] {
		return append(dst, 0)
	}
	return binary.AppendVarint(append(dst, 1), m.v[slot])
}

func (m *minMaxInt) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil || len(b) < 1 {
		return errCorrupt
	}
	if b[0] == 0 {
		return nil
	}
	v, n := binary.Varint(b[1:])
	if n <= 0 {
		return errCorrupt
	}
	m.put(slot, v)
	return nil
}

// minMaxFloat is MIN/MAX over DOUBLE. NaN is larger than every number, as in
// PostgreSQL. -0 and +0 are equal in SQL, but which of the two a tie keeps
// would depend on arrival order; ordering -0 just below +0 (floatKey) keeps
// merged results equal to single-stage ones bit for bit.
type minMaxFloat struct {
	isMax bool
	v     []float64
	valid []bool
}

func (m *minMaxFloat) Grow(n int)             { m.v, m.valid = growSlice(m.v, n), growSlice(m.valid, n) }
func (m *minMaxFloat) Reset(slot uint32)      { m.v[slot], m.valid[slot] = 0, false }
func (m *minMaxFloat) ResultType() types.Type { return types.Double }
func (m *minMaxFloat) Mergeable() bool        { return true }

func (m *minMaxFloat) put(slot uint32, x float64) {
	if !m.valid[slot] {
		m.v[slot], m.valid[slot] = x, true
		return
	}
	kx, kv := floatKey(x, false), floatKey(m.v[slot], false)
	if (m.isMax && kx > kv) || (!m.isMax && kx < kv) {
		m.v[slot] = x
	}
}

func (m *minMaxFloat) Update(slots []uint32, args []arrow.Array) {
	c := args[0].(*array.Float64)
	vals := c.Float64Values()
	for i, sl := range slots {
		if c.IsValid(i) {
			m.put(sl, vals[i])
		}
	}
}

func (m *minMaxFloat) Result(slot uint32) any {
	if !m.valid[slot] {
		return nil
	}
	return m.v[slot]
}

func (m *minMaxFloat) Encode(dst []byte, slot uint32) []byte {
	dst = append(dst, encV1)
	if !m.valid[slot] {
		return append(dst, 0)
	}
	return binary.BigEndian.AppendUint64(append(dst, 1), math.Float64bits(m.v[slot]))
}

func (m *minMaxFloat) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil || len(b) < 1 {
		return errCorrupt
	}
	if b[0] == 0 {
		return nil
	}
	if len(b) < 9 {
		return errCorrupt
	}
	m.put(slot, math.Float64frombits(binary.BigEndian.Uint64(b[1:])))
	return nil
}

// minMaxText is MIN/MAX over TEXT, by byte order (collation "C").
type minMaxText struct {
	isMax bool
	v     []string
	valid []bool
}

func (m *minMaxText) Grow(n int)             { m.v, m.valid = growSlice(m.v, n), growSlice(m.valid, n) }
func (m *minMaxText) Reset(slot uint32)      { m.v[slot], m.valid[slot] = "", false }
func (m *minMaxText) ResultType() types.Type { return types.Text }
func (m *minMaxText) Mergeable() bool        { return true }

func (m *minMaxText) put(slot uint32, x string) {
	if !m.valid[slot] || (m.isMax && x > m.v[slot]) || (!m.isMax && x < m.v[slot]) {
		// Clone: x points into an Arrow buffer that is released after the batch.
		m.v[slot], m.valid[slot] = string([]byte(x)), true
	}
}

func (m *minMaxText) Update(slots []uint32, args []arrow.Array) {
	c := args[0].(*array.String)
	for i, sl := range slots {
		if c.IsValid(i) {
			m.put(sl, c.Value(i))
		}
	}
}

func (m *minMaxText) Result(slot uint32) any {
	if !m.valid[slot] {
		return nil
	}
	return m.v[slot]
}

func (m *minMaxText) Encode(dst []byte, slot uint32) []byte {
	dst = append(dst, encV1)
	if !m.valid[slot] {
		return append(dst, 0)
	}
	dst = binary.AppendUvarint(append(dst, 1), uint64(len(m.v[slot])))
	return append(dst, m.v[slot]...)
}

func (m *minMaxText) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil || len(b) < 1 {
		return errCorrupt
	}
	if b[0] == 0 {
		return nil
	}
	l, n := binary.Uvarint(b[1:])
	if n <= 0 || uint64(len(b)-1-n) < l {
		return errCorrupt
	}
	m.put(slot, string(b[1+n:1+n+int(l)]))
	return nil
}
