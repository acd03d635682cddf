package dataflow

import (
	"context"

	"github.com/turbinesql/turbinesql/exec"
)

// Project filters rows (WHERE before an aggregation's absence, HAVING
// after one) and computes the select list into output rows. With
// AddFinal (EMIT EVERY) each row gets the is_final column: false on an
// early fire, true on a window's final pane. Keys chosen upstream and the
// panes' windows follow the rows that pass.
//
// With Tombstones (an upsert stream keyed by its group key), a keyed row
// the filter (HAVING) rejects becomes a tombstone of its key, so readers of
// the output topic as a table see the group disappear.
type Project struct {
	Filter     exec.Expr
	Exprs      []exec.Expr
	AddFinal   bool
	Tombstones bool
}

var _ Op = (*Project)(nil)

func (p *Project) Open(context.Context, *Env) error { return nil }

func (p *Project) Process(_ context.Context, b *Batch) (*Batch, error) {
	data, keys, panes := b.Data, b.Keys, b.Panes
	tombs := b.Tombstones // groups that expired (state_ttl)
	if data == nil {
		if len(tombs) > 0 {
			return &Batch{Partition: b.Partition, Tombstones: tombs, Final: b.Final}, nil
		}
		return nil, nil
	}
	if p.Filter != nil && data.N > 0 {
		m, err := p.Filter.Eval(data)
		if err != nil {
			return nil, err
		}
		keep := make([]bool, data.N)
		kept := 0
		var ks [][]byte
		var ps []Pane
		for i := range keep {
			if keep[i] = !m.IsNull(i) && m.B[i]; keep[i] {
				kept++
				if keys != nil {
					ks = append(ks, keys[i])
				}
				if panes != nil {
					ps = append(ps, panes[i])
				}
			} else if p.Tombstones && keys != nil && keys[i] != nil {
				tombs = append(tombs, keys[i])
			}
		}
		if kept < data.N {
			data, keys, panes = data.Select(keep, kept), ks, ps
		}
	}
	if data.N == 0 {
		if len(tombs) > 0 {
			return &Batch{Partition: b.Partition, Tombstones: tombs, Final: b.Final}, nil
		}
		return nil, nil
	}
	rows, err := exec.Project(data, p.Exprs)
	if err != nil {
		return nil, err
	}
	if p.AddFinal {
		for i := range rows {
			rows[i] = append(rows[i], b.Final)
		}
	}
	return &Batch{Partition: b.Partition, Rows: rows, Keys: keys, Panes: panes, Final: b.Final, Tombstones: tombs}, nil
}

func (p *Project) OnWatermark(context.Context, Watermark) (*Batch, error) { return nil, nil }
func (p *Project) Commit(context.Context, *Commit) error                  { return nil }
func (p *Project) Close()                                                 {}
