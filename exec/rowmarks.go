package exec

import (
	"errors"
	"slices"
)

// Row marks let a pre-aggregation (a combine's) say what each partial it
// ships covers, so that its receiver can tell a partial shipped again, a
// copy of what it merged, from one that carries rows it never had. The
// caller gives every row a mark (its source offset: marks grow in the
// order rows are consumed); each group keeps the highest mark folded into
// it and how many rows it folded since it was last shipped, and Ship
// reports both (Partial.Last, Partial.Rows). Rows marked below FreshFrom
// are not counted in Rows: a pre-aggregation that restarted reads again
// what it had read before, and those rows are not new.

// slotMarks is what a group of a marked aggregation knows of its rows.
type slotMarks struct {
	fresh uint64 // rows folded in since the group was last shipped (or made)
	last  int64  // the highest mark folded in
}

// errMarksUnsupported: held rows are folded later, without their marks,
// and sessions merge groups; a pre-aggregation has neither.
var errMarksUnsupported = errors.New("row marks need an aggregation in memory over TUMBLE or HOP")

// ConsumeMarked is Consume with a mark for each row of b (marks[i] for row
// i). Only for an aggregation that keeps its groups in memory (no
// UseStore) over TUMBLE or HOP windows.
func (a *Aggregator) ConsumeMarked(b *Batch, marks []int64, wm int64, hasWM bool) (late []int, err error) {
	if a.store != nil || a.sessions != nil {
		return nil, errMarksUnsupported
	}
	a.marked = true
	a.inMarks = marks[:b.N]
	defer func() { a.inMarks = nil }()
	return a.Consume(b, wm, hasWM)
}

// keepMarks drops the marks of the rows Consume leaves out (keep false),
// as it drops the rows.
func (a *Aggregator) keepMarks(keep []bool, kept int) {
	if a.inMarks == nil {
		return
	}
	out := slices.Grow(a.markBuf[:0], kept)
	for i, k := range keep {
		if k {
			out = append(out, a.inMarks[i])
		}
	}
	a.markBuf, a.inMarks = out, out
}

// noteMarks records the marks of a folded batch: row i went to slots[i];
// newRows made their slot (a recycled slot starts afresh).
func (a *Aggregator) noteMarks(slots []uint32, newRows []int) {
	if a.inMarks == nil {
		return
	}
	if n := len(a.Table.meta); len(a.slotMarks) < n {
		a.slotMarks = append(a.slotMarks, make([]slotMarks, n-len(a.slotMarks))...)
	}
	for _, i := range newRows {
		a.slotMarks[slots[i]] = slotMarks{last: -1}
	}
	for i, s := range slots {
		m := &a.slotMarks[s]
		mk := a.inMarks[i]
		m.last = max(m.last, mk)
		if mk >= a.FreshFrom {
			m.fresh++
		}
	}
}

// markShipped fills p's marks from slot s; kept: the group stays (an open
// window shipped whole), so its next ship counts the rows from here.
func (a *Aggregator) markShipped(p *Partial, s uint32, kept bool) {
	if !a.marked {
		return
	}
	m := &a.slotMarks[s]
	p.Marked, p.Rows, p.Last = true, m.fresh, m.last
	if kept {
		m.fresh = 0
	}
}
