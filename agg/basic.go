package agg

import (
	"encoding/binary"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/turbinesql/turbinesql/types"
)

// count is COUNT(*) or COUNT(x): an int64 per slot.
type count struct {
	star bool
	n    []int64
}

func (c *count) Grow(n int)             { c.n = growSlice(c.n, n) }
func (c *count) Reset(slot uint32)      { c.n[slot] = 0 }
func (c *count) ResultType() types.Type { return types.Int }
func (c *count) Mergeable() bool        { return true }
func (c *count) Result(slot uint32) any { return c.n[slot] }

func (c *count) Update(slots []uint32, args []arrow.Array) {
	if c.star {
		for _, s := range slots {
			c.n[s]++
		}
		return
	}
	v, none := validOf(args[0])
	if none {
		return
	}
	if v.bits == nil {
		for _, s := range slots {
			c.n[s]++
		}
		return
	}
	for i, s := range slots {
		if v.ok(i) {
			c.n[s]++
		}
	}
}

func (c *count) Encode(dst []byte, slot uint32) []byte {
	dst = append(dst, encV1)
	return binary.AppendVarint(dst, c.n[slot])
}

func (c *count) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil {
		return err
	}
	v, n := binary.Varint(b)
	if n <= 0 {
		return errCorrupt
	}
	c.n[slot] += v
	return nil
}

// sumInt is SUM(BIGINT). PostgreSQL returns NUMERIC and never overflows, so
// the sum is kept exact in 128 bits whatever the order of updates and
// merges; Result returns it as BIGINT when it fits.
type sumInt struct {
	sum   []i128
	valid []bool
}

func (s *sumInt) Grow(n int)             { s.sum, s.valid = growSlice(s.sum, n), growSlice(s.valid, n) }
func (s *sumInt) Reset(slot uint32)      { s.sum[slot], s.valid[slot] = i128{}, false }
func (s *sumInt) ResultType() types.Type { return types.Int }
func (s *sumInt) Mergeable() bool        { return true }

func (s *sumInt) Update(slots []uint32, args []arrow.Array) {
	v, none := validOf(args[0])
	if none {
		return
	}
	vals := args[0].(*array.Int64).Int64Values()
	if v.bits == nil {
		for i, sl := range slots {
			s.sum[sl] = s.sum[sl].addInt(vals[i])
			s.valid[sl] = true
		}
		return
	}
	for i, sl := range slots {
		if v.ok(i) {
			s.sum[sl] = s.sum[sl].addInt(vals[i])
			s.valid[sl] = true
		}
	}
}

// Result is the sum as BIGINT; a sum outside the BIGINT range is returned as
// the nearest float64 (the planner types SUM(BIGINT) as BIGINT, and the
// caller turns such a float into NULL; exactness beyond 2^63 is
// issue-tracked).
func (s *sumInt) Result(slot uint32) any {
	if !s.valid[slot] {
		return nil
	}
	if v, ok := s.sum[slot].small(); ok {
		return v
	}
	return s.sum[slot].float()
}

// Encode writes a tag byte, then the sum: tag 2 and a zigzag varint when it
// fits in 64 bits (the usual case, and what a combine hop ships per group),
// tag 1 and the low and high 64 bits big-endian when it does not, tag 0
// for no rows.
func (s *sumInt) Encode(dst []byte, slot uint32) []byte {
	dst = append(dst, encV1)
	if !s.valid[slot] {
		return append(dst, 0)
	}
	if v, ok := s.sum[slot].small(); ok {
		return binary.AppendVarint(append(dst, 2), v)
	}
	dst = append(dst, 1)
	dst = binary.BigEndian.AppendUint64(dst, s.sum[slot].lo)
	return binary.BigEndian.AppendUint64(dst, uint64(s.sum[slot].hi))
}

func (s *sumInt) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil {
		return err
	}
	if len(b) < 1 {
		return errCorrupt
	}
	var v i128
	switch b[0] {
	case 0:
		return nil
	case 1:
		if len(b) < 17 {
			return errCorrupt
		}
		v = i128{lo: binary.BigEndian.Uint64(b[1:]), hi: int64(binary.BigEndian.Uint64(b[9:]))}
	case 2:
		x, n := binary.Varint(b[1:])
		if n <= 0 {
			return errCorrupt
		}
		v = i128{}.addInt(x)
	default:
		return errCorrupt
	}
	s.sum[slot] = s.sum[slot].add(v)
	s.valid[slot] = true
	return nil
}

// sumFloat is SUM(DOUBLE).
type sumFloat struct {
	sum   []float64
	valid []bool
}

func (s *sumFloat) Grow(n int)             { s.sum, s.valid = growSlice(s.sum, n), growSlice(s.valid, n) }
func (s *sumFloat) Reset(slot uint32)      { s.sum[slot], s.valid[slot] = 0, false }
func (s *sumFloat) ResultType() types.Type { return types.Double }
func (s *sumFloat) Mergeable() bool        { return true }

func (s *sumFloat) Result(slot uint32) any {
	if !s.valid[slot] {
		return nil
	}
	return s.sum[slot]
}

func (s *sumFloat) Update(slots []uint32, args []arrow.Array) {
	v, none := validOf(args[0])
	if none {
		return
	}
	vals := args[0].(*array.Float64).Float64Values()
	for i, sl := range slots {
		if v.ok(i) {
			s.sum[sl] += vals[i]
			s.valid[sl] = true
		}
	}
}

func (s *sumFloat) Encode(dst []byte, slot uint32) []byte {
	dst = append(dst, encV1)
	if !s.valid[slot] {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(s.sum[slot]))
}

func (s *sumFloat) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil {
		return err
	}
	if len(b) < 1 {
		return errCorrupt
	}
	if b[0] == 0 {
		return nil
	}
	if len(b) < 9 {
		return errCorrupt
	}
	s.sum[slot] += math.Float64frombits(binary.BigEndian.Uint64(b[1:]))
	s.valid[slot] = true
	return nil
}

// avg is AVG over BIGINT or DOUBLE. Over BIGINT the sum is kept exact in
// 128 bits (the sumInt accumulator), so the result does not depend on the
// order rows and partials arrive in; it is rounded to DOUBLE once, at the
// end, as PostgreSQL's NUMERIC average would be. Over DOUBLE it is
// PostgreSQL's float8 average: a plain sum divided by the count.
type avg struct {
	isInt bool
	ints  sumInt
	sum   []float64
	n     []int64
}

func (a *avg) Grow(n int) {
	a.ints.Grow(n)
	a.sum, a.n = growSlice(a.sum, n), growSlice(a.n, n)
}
func (a *avg) Reset(slot uint32)      { a.ints.Reset(slot); a.sum[slot], a.n[slot] = 0, 0 }
func (a *avg) ResultType() types.Type { return types.Double }
func (a *avg) Mergeable() bool        { return true }

func (a *avg) Result(slot uint32) any {
	if a.n[slot] == 0 {
		return nil
	}
	if a.isInt {
		return a.ints.sum[slot].quo(a.n[slot])
	}
	return a.sum[slot] / float64(a.n[slot])
}

func (a *avg) Update(slots []uint32, args []arrow.Array) {
	v, none := validOf(args[0])
	if none {
		return
	}
	switch c := args[0].(type) {
	case *array.Int64:
		vals := c.Int64Values()
		for i, sl := range slots {
			if v.ok(i) {
				a.ints.sum[sl] = a.ints.sum[sl].addInt(vals[i])
				a.ints.valid[sl] = true
				a.n[sl]++
			}
		}
	case *array.Float64:
		vals := c.Float64Values()
		for i, sl := range slots {
			if v.ok(i) {
				a.sum[sl] += vals[i]
				a.n[sl]++
			}
		}
	}
}

func (a *avg) Encode(dst []byte, slot uint32) []byte {
	dst = append(dst, encV1)
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(a.sum[slot]))
	dst = binary.AppendVarint(dst, a.n[slot])
	return a.ints.Encode(dst, slot)
}

func (a *avg) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil {
		return err
	}
	if len(b) < 9 {
		return errCorrupt
	}
	a.sum[slot] += math.Float64frombits(binary.BigEndian.Uint64(b))
	v, n := binary.Varint(b[8:])
	if n <= 0 {
		return errCorrupt
	}
	a.n[slot] += v
	return a.ints.Merge(slot, b[8+n:])
}
