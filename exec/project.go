package exec

// Select keeps the rows where keep is true (kept of them).
func (b *Batch) Select(keep []bool, kept int) *Batch {
	out := &Batch{N: kept, Cols: make([]*Vec, len(b.Cols))}
	for c, v := range b.Cols {
		out.Cols[c] = v.gather(keep, kept)
	}
	return out
}

// FilterBatch keeps the rows where pred is true (not false, not NULL).
func FilterBatch(b *Batch, pred Expr) (*Batch, error) {
	if pred == nil || b.N == 0 {
		return b, nil
	}
	m, err := pred.Eval(b)
	if err != nil {
		return nil, err
	}
	keep := make([]bool, b.N)
	kept := 0
	for i := 0; i < b.N; i++ {
		if !m.IsNull(i) && m.B[i] {
			keep[i] = true
			kept++
		}
	}
	if kept == b.N {
		return b, nil
	}
	return b.Select(keep, kept), nil
}

// Project evaluates exprs over b into result rows of Go values.
func Project(b *Batch, exprs []Expr) ([][]any, error) {
	cols, err := evalAll(b, exprs)
	if err != nil {
		return nil, err
	}
	rows := make([][]any, b.N)
	for i := range rows {
		row := make([]any, len(cols))
		for j, c := range cols {
			row[j] = c.Value(i)
		}
		rows[i] = row
	}
	return rows, nil
}
