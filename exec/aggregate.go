package exec

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/types"
)

// NoWindow is the window start of every group of an unwindowed aggregation.
const NoWindow int64 = 0

// Aggregator is the hash aggregation operator: it filters a batch, assigns
// each row to its (window, key) slot and folds it into the accumulators.
type Aggregator struct {
	Filter   Expr
	Keys     []Expr
	KeyTypes []types.Type
	PK       int // index in Keys of the partition key; -1: none
	TimeIdx  int // input column of event time; -1: no window
	SizeMs   int64
	AggArgs  [][]Expr
	Table    *GroupTable

	mem    memory.Allocator
	rows   RowKeys
	probes []probeKey
	wins   []int64
	slots  []uint32
	pkBuf  []byte
}

// NewAggregator builds the operator; specs and args are per aggregate.
func NewAggregator(filter Expr, keys []Expr, pk, timeIdx int, sizeMs int64, specs []agg.Spec, args [][]Expr) (*Aggregator, error) {
	funcs := make([]agg.Func, len(specs))
	for i, s := range specs {
		f, err := agg.New(s)
		if err != nil {
			return nil, err
		}
		funcs[i] = f
	}
	kt := make([]types.Type, len(keys))
	for i, k := range keys {
		kt[i] = k.Type()
	}
	return &Aggregator{Filter: filter, Keys: keys, KeyTypes: kt, PK: pk, TimeIdx: timeIdx, SizeMs: sizeMs,
		AggArgs: args, Table: NewGroupTable(funcs), mem: memory.DefaultAllocator}, nil
}

// prepareProbes fills a.probes with every row's probe key: straight from
// the column for a single BIGINT, TIMESTAMP or short TEXT key, otherwise by
// encoding the rows first.
func (a *Aggregator) prepareProbes(keys []*Vec, n int) {
	if len(keys) == 1 {
		switch keys[0].T {
		case types.Int, types.Timestamp:
			a.probes = probeInts(a.probes, keys[0], n)
			return
		case types.Text:
			var ok bool
			if a.probes, ok = probeShortTexts(a.probes, keys[0], n); ok {
				return
			}
		}
	}
	a.rows.Encode(keys, n)
	a.probes = probeRows(a.probes, &a.rows, n)
}

// windows computes the window of every row into a.wins and marks the late
// ones (a NULL event time, or a window ended at or before closedBefore).
func (a *Aggregator) windows(ts *Vec, n int, closedBefore int64, hasClosed bool) (late int, keep []bool) {
	a.wins = a.windowsOf(ts, n)
	size := a.SizeMs
	for i, w := range a.wins {
		if ts.IsNull(i) || (hasClosed && w+size <= closedBefore) {
			if keep == nil {
				keep = make([]bool, n)
				for j := range keep {
					keep[j] = true
				}
			}
			keep[i] = false
			late++
		}
	}
	return late, keep
}

func (a *Aggregator) windowsOf(ts *Vec, n int) []int64 {
	wins := slices.Grow(a.wins[:0], n)[:n]
	size := a.SizeMs
	for i, t := range ts.I[:n] {
		wins[i] = WindowOf(t, size)
	}
	return wins
}

// WindowOf is the tumbling window start of event time ts.
func WindowOf(ts, size int64) int64 {
	w := ts - ts%size
	if ts < 0 && ts%size != 0 {
		w -= size
	}
	return w
}

// Consume folds batch b in. Rows whose window already ended at or before
// closedBefore are late: they are not folded in and their count is returned.
// Rows with a NULL event time belong to no window and are counted as late too.
//
// The work is column-at-a-time: windows and lateness in one typed loop, the
// group keys encoded a column at a time (RowKeys), then one hash probe per
// row to a dense slot id, then each aggregate's typed update loop over the
// slot vector.
func (a *Aggregator) Consume(b *Batch, closedBefore int64, hasClosed bool) (late int, err error) {
	if b.N == 0 {
		return 0, nil
	}
	b, err = FilterBatch(b, a.Filter)
	if err != nil || b.N == 0 {
		return 0, err
	}
	a.wins = a.wins[:0]
	if a.TimeIdx >= 0 {
		var keep []bool
		late, keep = a.windows(b.Cols[a.TimeIdx], b.N, closedBefore, hasClosed)
		if late == b.N {
			return late, nil
		}
		if late > 0 {
			b = b.Select(keep, b.N-late)
			a.wins = a.windowsOf(b.Cols[a.TimeIdx], b.N)
		}
	}
	keys := make([]*Vec, len(a.Keys))
	for i, k := range a.Keys {
		v, err := k.Eval(b)
		if err != nil {
			return 0, err
		}
		keys[i] = v
	}
	a.prepareProbes(keys, b.N)
	slots := a.slots[:0]
	w := NoWindow
	for i := range a.probes {
		if len(a.wins) > 0 {
			w = a.wins[i]
		}
		p := &a.probes[i]
		var key []byte
		if p.klen > inlineKey {
			key = a.rows.Row(i)
		}
		s, isNew := a.Table.lookup(w, p, key)
		if isNew && a.PK >= 0 {
			a.pkBuf = PartitionKeyText(keys[a.PK], i, a.pkBuf[:0])
			a.Table.Meta(s).KG = keyGroup(a.pkBuf)
		}
		slots = append(slots, s)
	}
	a.slots = slots
	args := make([][]arrow.Array, len(a.AggArgs))
	defer func() {
		for _, as := range args {
			for _, x := range as {
				x.Release()
			}
		}
	}()
	for j, exprs := range a.AggArgs {
		for _, e := range exprs {
			v, err := e.Eval(b)
			if err != nil {
				return late, err
			}
			args[j] = append(args[j], arrowView(v, a.mem))
		}
	}
	a.Table.Update(slots, args)
	return late, nil
}

// Emit builds the post-aggregation rows of slots: keys, then (when
// windowed) window start and end, then each aggregate's result.
func (a *Aggregator) Emit(slots []uint32) (*Batch, error) {
	n := len(slots)
	ncols := len(a.Keys) + len(a.Table.Aggs)
	if a.TimeIdx >= 0 {
		ncols += 2
	}
	out := &Batch{N: n, Cols: make([]*Vec, 0, ncols)}
	keyCols := make([]*Vec, len(a.Keys))
	for j, t := range a.KeyTypes {
		keyCols[j] = newVec(t, n)
	}
	var ws, we *Vec
	if a.TimeIdx >= 0 {
		ws, we = newVec(types.Timestamp, n), newVec(types.Timestamp, n)
	}
	aggCols := make([]*Vec, len(a.Table.Aggs))
	for j, f := range a.Table.Aggs {
		aggCols[j] = newVec(f.ResultType(), n)
	}
	for i, s := range slots {
		m := a.Table.Meta(s)
		vals, err := DecodeKey(a.Table.Key(s), a.KeyTypes)
		if err != nil {
			return nil, err
		}
		for j, v := range vals {
			setValue(keyCols[j], i, v)
		}
		if ws != nil {
			ws.I[i], we.I[i] = m.Window, m.Window+a.SizeMs
		}
		for j, f := range a.Table.Aggs {
			setValue(aggCols[j], i, f.Result(s))
		}
	}
	out.Cols = append(out.Cols, keyCols...)
	if ws != nil {
		out.Cols = append(out.Cols, ws, we)
	}
	out.Cols = append(out.Cols, aggCols...)
	return out, nil
}

// setValue stores a Go value into row i of v (nil → NULL).
func setValue(v *Vec, i int, x any) {
	switch y := x.(type) {
	case nil:
		v.ensureNull()[i] = true
	case int64:
		if v.T == types.Double {
			v.F[i] = float64(y)
		} else {
			v.I[i] = y
		}
	case float64:
		if v.T == types.Int { // SUM(BIGINT) beyond the int64 range
			v.ensureNull()[i] = true
		} else {
			v.F[i] = y
		}
	case string:
		v.S[i] = y
	case bool:
		v.B[i] = y
	case interface{ UnixMilli() int64 }:
		v.I[i] = y.UnixMilli()
	default:
		panic(fmt.Sprintf("exec: cannot store %T", x)) // a bug in an aggregate's Result
	}
}
