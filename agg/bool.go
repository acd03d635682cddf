package agg

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/turbinesql/turbinesql/types"
)

// boolAgg is BOOL_OR and BOOL_AND (EVERY). One byte of flags per slot
// records whether a true and whether a false was seen; merging ORs the
// flags, which is order-insensitive and idempotent. NULLs are ignored; no
// non-NULL row: NULL.
type boolAgg struct {
	and   bool
	flags []uint8
}

const (
	sawTrue  = 1
	sawFalse = 2
)

func (b *boolAgg) Grow(n int)             { b.flags = growSlice(b.flags, n) }
func (b *boolAgg) Reset(slot uint32)      { b.flags[slot] = 0 }
func (b *boolAgg) ResultType() types.Type { return types.Bool }
func (b *boolAgg) Mergeable() bool        { return true }

func (b *boolAgg) Result(slot uint32) any {
	f := b.flags[slot]
	if f == 0 {
		return nil
	}
	if b.and {
		return f&sawFalse == 0
	}
	return f&sawTrue != 0
}

func (b *boolAgg) Update(slots []uint32, args []arrow.Array) {
	v, none := validOf(args[0])
	if none {
		return
	}
	c := args[0].(*array.Boolean)
	for i, sl := range slots {
		if v.ok(i) {
			if c.Value(i) {
				b.flags[sl] |= sawTrue
			} else {
				b.flags[sl] |= sawFalse
			}
		}
	}
}

// Encode writes the flags byte.
func (b *boolAgg) Encode(dst []byte, slot uint32) []byte {
	return append(dst, encV1, b.flags[slot])
}

func (b *boolAgg) Merge(slot uint32, enc []byte) error {
	rest, err := checkVersion(enc)
	if err != nil || len(rest) < 1 || rest[0]&^(sawTrue|sawFalse) != 0 {
		return errCorrupt
	}
	b.flags[slot] |= rest[0]
	return nil
}
