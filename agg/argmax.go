package agg

import (
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/turbinesql/turbinesql/types"
)

// argBy is ARG_MAX(x, by) and ARG_MIN(x, by): the x of the row with the
// largest (smallest) by. Rows where x or by is NULL are skipped, as
// DuckDB's arg_max does and as PostgreSQL's aggregates ignore NULL inputs;
// no row left: NULL.
//
// Ties: several rows can share the extreme by. Taking the first one seen
// would make the answer depend on arrival order and on how partials were
// merged, so among tied rows the smallest x wins, for ARG_MAX and ARG_MIN
// alike, in SQL order (NaN above every number, -0 just below +0, TEXT by
// bytes). by compares with SQL equality: -0 ties with +0.
type argBy[X, B held] struct {
	isMax bool
	typ   types.Type
	has   []bool
	x     []X
	by    []B
	touch touched

	xk, bk []uint64 // scratch, reused across batches
	xs, bs []string
}

func newArgBy(xt, bt types.Type, isMax bool) Func {
	switch {
	case xt == types.Text && bt == types.Text:
		return &argBy[string, string]{isMax: isMax, typ: xt}
	case xt == types.Text:
		return &argBy[string, uint64]{isMax: isMax, typ: xt}
	case bt == types.Text:
		return &argBy[uint64, string]{isMax: isMax, typ: xt}
	}
	return &argBy[uint64, uint64]{isMax: isMax, typ: xt}
}

func (a *argBy[X, B]) Grow(n int) {
	a.has, a.x, a.by = growSlice(a.has, n), growSlice(a.x, n), growSlice(a.by, n)
	a.touch.grow(n)
}

func (a *argBy[X, B]) Reset(slot uint32) {
	var zx X
	var zb B
	a.has[slot], a.x[slot], a.by[slot] = false, zx, zb
}

func (a *argBy[X, B]) ResultType() types.Type { return a.typ }
func (a *argBy[X, B]) Mergeable() bool        { return true }

func (a *argBy[X, B]) Result(slot uint32) any {
	if !a.has[slot] {
		return nil
	}
	return heldResult(a.typ, a.x, slot)
}

func (a *argBy[X, B]) offer(slot uint32, x X, b B) bool {
	if a.has[slot] {
		cb := a.by[slot]
		if a.isMax && b < cb || !a.isMax && b > cb || b == cb && x >= a.x[slot] {
			return false
		}
	}
	a.has[slot], a.x[slot], a.by[slot] = true, x, b
	return true
}

func (a *argBy[X, B]) Update(slots []uint32, args []arrow.Array) {
	vx, noneX := validOf(args[0])
	vb, noneB := validOf(args[1])
	if noneX || noneB {
		return
	}
	xs := heldCol[X](args[0], false, &a.xk, &a.xs)
	bs := heldCol[B](args[1], true, &a.bk, &a.bs)
	text := heldText[X]() || heldText[B]()
	a.touch.begin()
	for i, sl := range slots {
		if vx.ok(i) && vb.ok(i) && a.offer(sl, xs[i], bs[i]) && text {
			a.touch.add(sl)
		}
	}
	cloneTouched(&a.touch, a.x)
	cloneTouched(&a.touch, a.by)
}

// Encode writes a presence byte, then x and by (appendHeld).
func (a *argBy[X, B]) Encode(dst []byte, slot uint32) []byte {
	dst = append(dst, encV1)
	if !a.has[slot] {
		return append(dst, 0)
	}
	dst = appendHeld(append(dst, 1), a.x, slot)
	return appendHeld(dst, a.by, slot)
}

func (a *argBy[X, B]) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil || len(b) < 1 {
		return errCorrupt
	}
	if b[0] == 0 {
		return nil
	}
	x, rest, err := readHeld[X](b[1:])
	if err != nil {
		return err
	}
	by, _, err := readHeld[B](rest)
	if err != nil {
		return err
	}
	a.offer(slot, x, by)
	return nil
}
