package bounded

import (
	"context"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/planner"
)

// joinChunk bounds how many candidate pairs one ON evaluation sees.
const joinChunk = 1 << 16

// join is a nested-loop join: the ON condition is evaluated a chunk of
// candidate pairs at a time over gathered columns. Catalog relations are
// small; a left join pads unmatched left rows with NULLs.
func join(ctx context.Context, r *planner.Rel, src Source) (*exec.Batch, error) {
	l, err := materialize(ctx, r.Left, src)
	if err != nil {
		return nil, err
	}
	rt, err := materialize(ctx, r.Right, src)
	if err != nil {
		return nil, err
	}
	var li, ri []int // result pairs; ri -1: NULLs (left join)
	matched := make([]bool, l.N)
	var cl, cr []int
	flush := func() error {
		if len(cl) == 0 {
			return nil
		}
		if r.On == nil {
			li, ri = append(li, cl...), append(ri, cr...)
			for _, i := range cl {
				matched[i] = true
			}
			cl, cr = cl[:0], cr[:0]
			return nil
		}
		b := pairBatch(l, rt, cl, cr)
		m, err := r.On.Eval(b)
		if err != nil {
			return err
		}
		for k := range cl {
			if !m.IsNull(k) && m.B[k] {
				li, ri = append(li, cl[k]), append(ri, cr[k])
				matched[cl[k]] = true
			}
		}
		cl, cr = cl[:0], cr[:0]
		return nil
	}
	for i := 0; i < l.N; i++ {
		for j := 0; j < rt.N; j++ {
			cl, cr = append(cl, i), append(cr, j)
			if len(cl) >= joinChunk {
				if err := flush(); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if r.JoinType == "left" {
		// Keep left order: rebuild the pairs with the unmatched rows in place.
		var li2, ri2 []int
		k := 0
		for i := 0; i < l.N; i++ {
			found := false
			for k < len(li) && li[k] == i {
				li2, ri2 = append(li2, i), append(ri2, ri[k])
				k++
				found = true
			}
			if !found && !matched[i] {
				li2, ri2 = append(li2, i), append(ri2, -1)
			}
		}
		li, ri = li2, ri2
	}
	// A right join runs as a left join with its sides swapped; the plan's
	// schema lists the columns in that order.
	return pairBatch(l, rt, li, ri), nil
}

// pairBatch gathers rows li of l beside rows ri of r (-1: NULL).
func pairBatch(l, r *exec.Batch, li, ri []int) *exec.Batch {
	b := &exec.Batch{N: len(li)}
	for _, c := range l.Cols {
		b.Cols = append(b.Cols, exec.Take(c, li))
	}
	for _, c := range r.Cols {
		b.Cols = append(b.Cols, exec.Take(c, ri))
	}
	return b
}
