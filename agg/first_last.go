package agg

import (
	"encoding/binary"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/turbinesql/turbinesql/types"
)

// firstLast is FIRST_VALUE(x) and LAST_VALUE(x) as aggregates: the x of the
// row with the smallest (event time, sequence) for FIRST, the largest for
// LAST. The caller appends the event time and sequence columns (Info.
// NeedsOrder); the sequence is the Kafka offset made unique across
// partitions, so (time, sequence) orders rows totally and the answer does
// not depend on arrival order, batch boundaries or how partials were merged.
//
// NULL rules, as PostgreSQL's aggregates ignore NULL inputs: a row whose x is
// NULL is skipped (FIRST_VALUE is the first non-NULL x, what window
// functions call IGNORE NULLS), and so is a row whose time or sequence is
// NULL, having no place in the order. No row left: NULL.
//
// Ties on (time, sequence) happen only when one row is seen twice (a replay
// under at-least-once), which then carries the same x; should the caller
// ever repeat a sequence with different values, the smaller x wins for FIRST
// and the larger for LAST (LAST is FIRST with every order reversed), so the
// result is still deterministic.
type firstLast[V held] struct {
	last  bool
	typ   types.Type
	has   []bool
	t     []int64
	seq   []int64
	v     []V
	touch touched

	ks     []uint64 // scratch, reused across batches
	ss     []string
	ts, qs []int64
}

func newFirstLast(t types.Type, last bool) Func {
	if t == types.Text {
		return &firstLast[string]{last: last, typ: t}
	}
	return &firstLast[uint64]{last: last, typ: t}
}

func (f *firstLast[V]) Grow(n int) {
	f.has, f.t, f.seq, f.v = growSlice(f.has, n), growSlice(f.t, n), growSlice(f.seq, n), growSlice(f.v, n)
	f.touch.grow(n)
}

func (f *firstLast[V]) Reset(slot uint32) {
	var zero V
	f.has[slot], f.t[slot], f.seq[slot], f.v[slot] = false, 0, 0, zero
}

func (f *firstLast[V]) ResultType() types.Type { return f.typ }
func (f *firstLast[V]) Mergeable() bool        { return true }

func (f *firstLast[V]) Result(slot uint32) any {
	if !f.has[slot] {
		return nil
	}
	return heldResult(f.typ, f.v, slot)
}

// offer keeps (t, q, x) in slot if it comes before (FIRST) or after (LAST)
// what the slot holds.
func (f *firstLast[V]) offer(slot uint32, t, q int64, x V) bool {
	if f.has[slot] {
		ct, cq, cx := f.t[slot], f.seq[slot], f.v[slot]
		if f.last {
			if t < ct || t == ct && (q < cq || q == cq && x <= cx) {
				return false
			}
		} else if t > ct || t == ct && (q > cq || q == cq && x >= cx) {
			return false
		}
	}
	f.has[slot], f.t[slot], f.seq[slot], f.v[slot] = true, t, q, x
	return true
}

func (f *firstLast[V]) Update(slots []uint32, args []arrow.Array) {
	vx, none := validOf(args[0])
	vt, noneT := validOf(args[1])
	vq, noneQ := validOf(args[2])
	if none || noneT || noneQ {
		return
	}
	xs := heldCol[V](args[0], false, &f.ks, &f.ss)
	ts := ints(args[1], &f.ts)
	qs := ints(args[2], &f.qs)
	text := heldText[V]()
	f.touch.begin()
	for i, sl := range slots {
		if vx.ok(i) && vt.ok(i) && vq.ok(i) && f.offer(sl, ts[i], qs[i], xs[i]) && text {
			f.touch.add(sl)
		}
	}
	cloneTouched(&f.touch, f.v)
}

// Encode writes a presence byte, then time and sequence as varints and the
// value (appendHeld).
func (f *firstLast[V]) Encode(dst []byte, slot uint32) []byte {
	dst = append(dst, encV1)
	if !f.has[slot] {
		return append(dst, 0)
	}
	dst = binary.AppendVarint(append(dst, 1), f.t[slot])
	dst = binary.AppendVarint(dst, f.seq[slot])
	return appendHeld(dst, f.v, slot)
}

func (f *firstLast[V]) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil || len(b) < 1 {
		return errCorrupt
	}
	if b[0] == 0 {
		return nil
	}
	b = b[1:]
	t, n := binary.Varint(b)
	if n <= 0 {
		return errCorrupt
	}
	b = b[n:]
	q, n := binary.Varint(b)
	if n <= 0 {
		return errCorrupt
	}
	x, _, err := readHeld[V](b[n:])
	if err != nil {
		return err
	}
	f.offer(slot, t, q, x)
	return nil
}
