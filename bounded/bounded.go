// Package bounded runs the plan of a bounded query (a SELECT that ends)
// over in-memory batches: the relations of its FROM (topics, catalog
// tables, joins, subqueries), then the filter, aggregation, projection,
// DISTINCT, ORDER BY, OFFSET and LIMIT, with the same vectorised
// evaluator the streams use.
package bounded

import (
	"context"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/pgcat"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// Source reads the relations at the leaves of a plan.
type Source interface {
	// Topic reads a source's or stream's topic to its end now, as one
	// batch of rel's schema.
	Topic(ctx context.Context, rel *catalog.Relation) (*exec.Batch, error)
	Catalog() pgcat.Env
}

// Run executes p and returns its result rows.
func Run(ctx context.Context, p *planner.Plan, src Source) ([][]any, error) {
	if len(p.Union) > 0 {
		var rows [][]any
		for _, b := range p.Union {
			r, err := Run(ctx, b, src)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r...)
		}
		if !p.UnionAll {
			rows = Distinct(rows)
		}
		return Finish(p, rows), nil
	}
	var b *exec.Batch
	var err error
	if p.From != nil {
		b, err = materialize(ctx, p.From, src)
	} else {
		b, err = src.Topic(ctx, p.Input)
	}
	if err != nil {
		return nil, err
	}
	rows, err := Evaluate(p, b)
	if err != nil {
		return nil, err
	}
	if p.Distinct {
		rows = Distinct(rows)
	}
	return Finish(p, rows), nil
}

// Evaluate runs the filter, aggregation and projection of p over its
// whole input b.
func Evaluate(p *planner.Plan, b *exec.Batch) ([][]any, error) {
	if !p.Aggregate {
		fb, err := exec.FilterBatch(b, p.Filter)
		if err != nil {
			return nil, err
		}
		if p.Expand != nil {
			if fb, err = expand(fb, p.Expand); err != nil {
				return nil, err
			}
		}
		return exec.Project(fb, p.Project)
	}
	ag, err := Aggregator(p, 0)
	if err != nil {
		return nil, err
	}
	if _, err := ag.Consume(b, 0, false); err != nil {
		return nil, err
	}
	return Aggregated(p, ag)
}

// Aggregated projects the groups of a finished aggregation. Without GROUP
// BY there is one group even over no rows (COUNT(*) is 0), as in SQL.
func Aggregated(p *planner.Plan, ag *exec.Aggregator) ([][]any, error) {
	if len(p.Keys) == 0 && p.Window == nil && ag.Table.Len() == 0 {
		ag.Table.Slot(exec.NoWindow, nil, 0)
	}
	groups, err := ag.EmitAll()
	if err != nil {
		return nil, err
	}
	var rows [][]any
	for _, g := range groups {
		if g, err = exec.FilterBatch(g, p.Having); err != nil {
			return nil, err
		}
		out, err := exec.Project(g, p.Project)
		if err != nil {
			return nil, err
		}
		rows = append(rows, out...)
	}
	return rows, nil
}

// Aggregator builds the hash aggregation of p.
func Aggregator(p *planner.Plan, latenessMs int64) (*exec.Aggregator, error) {
	return planner.NewAggregator(p, latenessMs)
}

// Finish sorts, offsets, limits and cuts hidden sort columns.
func Finish(p *planner.Plan, rows [][]any) [][]any {
	if len(p.OrderBy) > 0 {
		sort.SliceStable(rows, func(i, j int) bool {
			for _, k := range p.OrderBy {
				if c := k.Compare(rows[i][k.Idx], rows[j][k.Idx]); c != 0 {
					return c < 0
				}
			}
			return false
		})
	}
	if p.Offset > 0 {
		rows = rows[min(int(p.Offset), len(rows)):]
	}
	if p.Limit >= 0 && int64(len(rows)) > p.Limit {
		rows = rows[:p.Limit]
	}
	if p.Hidden > 0 {
		for i := range rows {
			rows[i] = rows[i][:len(p.Output)]
		}
	}
	return rows
}

// Distinct keeps the first of each set of equal rows (NULLs equal, as
// SELECT DISTINCT and UNION treat them).
func Distinct(rows [][]any) [][]any {
	out := rows[:0]
	for _, r := range rows {
		dup := false
		for _, o := range out {
			if sameRow(o, r) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, r)
		}
	}
	return out
}

func sameRow(a, b []any) bool {
	for i := range a {
		if (a[i] == nil) != (b[i] == nil) || (a[i] != nil && planner.CompareValues(a[i], b[i]) != 0) {
			return false
		}
	}
	return true
}

// materialize reads a FROM relation into one batch.
func materialize(ctx context.Context, r *planner.Rel, src Source) (*exec.Batch, error) {
	switch r.Kind {
	case planner.RelOneRow:
		return &exec.Batch{N: 1}, nil
	case planner.RelTopic:
		return src.Topic(ctx, r.Relation)
	case planner.RelVirtual:
		rec, err := r.Virtual.Batch(src.Catalog(), memory.DefaultAllocator)
		if err != nil {
			return nil, err
		}
		return exec.BatchOf(rec, r.Schema), nil
	case planner.RelDerived:
		rows, err := Run(ctx, r.Sub, src)
		if err != nil {
			return nil, err
		}
		return batchOfRows(r, rows)
	case planner.RelJoin:
		return join(ctx, r, src)
	case planner.RelFunc:
		rows, err := planner.FuncRows(r)
		if err != nil {
			return nil, err
		}
		return batchOfRows(r, rows)
	}
	return nil, sql.Errorf(sql.CodeInternal, "relation kind %d", r.Kind)
}

func batchOfRows(r *planner.Rel, rows [][]any) (*exec.Batch, error) {
	b := &exec.Batch{N: len(rows), Cols: make([]*exec.Vec, len(r.Schema))}
	vals := make([]any, len(rows))
	for c, f := range r.Schema {
		for i, row := range rows {
			vals[i] = row[c]
		}
		v, err := exec.VecOf(f.Type, vals)
		if err != nil {
			return nil, err
		}
		b.Cols[c] = v
	}
	return b, nil
}

// expand repeats each row of b once per element of the longest of arrs
// (their text form), appending the element's position (1-based) as the
// last column.
func expand(b *exec.Batch, arrs []exec.Expr) (*exec.Batch, error) {
	lens := make([]int, b.N)
	for _, arr := range arrs {
		v, err := arr.Eval(b)
		if err != nil {
			return nil, err
		}
		for i := 0; i < b.N; i++ {
			s, ok := v.Value(i).(string)
			if !ok {
				continue
			}
			n := len(pgcat.ParseArray(s))
			if !strings.HasPrefix(s, "{") {
				n = len(strings.Fields(s)) // int2vector: '1 2'
			}
			lens[i] = max(lens[i], n)
		}
	}
	var idx []int
	var ord []any
	for i, n := range lens {
		for k := 1; k <= n; k++ {
			idx = append(idx, i)
			ord = append(ord, int64(k))
		}
	}
	out := &exec.Batch{N: len(idx)}
	for _, c := range b.Cols {
		out.Cols = append(out.Cols, exec.Take(c, idx))
	}
	o, err := exec.VecOf(types.Int, ord)
	if err != nil {
		return nil, err
	}
	out.Cols = append(out.Cols, o)
	return out, nil
}
