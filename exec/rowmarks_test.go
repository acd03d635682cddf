package exec

import (
	"testing"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/types"
	"github.com/turbinesql/turbinesql/window"
)

// TestRowMarks: each group reports the highest mark folded into it and the
// rows new since its last ship; a row left out (late) leaves its mark out
// too; rows marked below FreshFrom are not new; a group kept (an open
// window shipped whole) counts afresh from its ship, and a recycled slot
// starts afresh.
func TestRowMarks(t *testing.T) {
	spec := window.Spec{Kind: window.Tumble, Size: 10}
	a, err := NewAggregator(AggConfig{Keys: []Expr{&ColRef{Idx: 0, Name: "k", T: types.Int}}, PK: -1, TimeIdx: 1,
		Window: &spec, Specs: []agg.Spec{{Name: "COUNT", Star: true}}, Args: [][]Expr{nil}})
	if err != nil {
		t.Fatal(err)
	}
	a.FreshFrom = 101
	batch := func(ks, ts []int64) *Batch {
		return &Batch{N: len(ks), Cols: []*Vec{{T: types.Int, N: len(ks), I: ks}, {T: types.Timestamp, N: len(ts), I: ts}}}
	}
	// Key 1 at marks 100 (not new), 102 and 105; key 2 at 103 and 104;
	// key 3's row (time 5, behind watermark 20) is late, and its mark 106
	// goes with it.
	late, err := a.ConsumeMarked(batch([]int64{1, 1, 2, 3, 1, 2}, []int64{21, 22, 23, 5, 24, 25}), []int64{100, 102, 103, 106, 105, 104}, 20, true)
	if err != nil || len(late) != 1 || late[0] != 3 {
		t.Fatalf("late %v, %v; want row 3", late, err)
	}
	parts, closed := a.Ship(0, false, true) // open: shipped whole, kept
	if len(closed) != 0 || len(parts) != 2 {
		t.Fatalf("shipped %d partials %+v (closed %v), want keys 1 and 2 of [20, 30)", len(parts), parts, closed)
	}
	byKey := func(ps []Partial) map[string]Partial {
		m := map[string]Partial{}
		for _, p := range ps {
			if !p.Marked {
				t.Fatalf("partial %+v not marked", p)
			}
			m[string(p.Key)] = p
		}
		return m
	}
	k1, k2 := string(AppendKey(nil, []*Vec{{T: types.Int, N: 1, I: []int64{1}}}, 0)), string(AppendKey(nil, []*Vec{{T: types.Int, N: 1, I: []int64{2}}}, 0))
	got := byKey(parts)
	if p := got[k1]; p.Last != 105 || p.Rows != 2 {
		t.Errorf("key 1: last %d rows %d, want 105 and 2 (mark 100 is below FreshFrom)", p.Last, p.Rows)
	}
	if p := got[k2]; p.Last != 104 || p.Rows != 2 {
		t.Errorf("key 2: last %d rows %d, want 104 and 2", p.Last, p.Rows)
	}
	// One more row of key 2, then the window is due.
	if _, err := a.ConsumeMarked(batch([]int64{2}, []int64{26}), []int64{107}, 20, true); err != nil {
		t.Fatal(err)
	}
	parts, closed = a.Ship(30, true, false)
	got = byKey(parts)
	if len(closed) != 1 || got[k1].Rows != 0 || got[k1].Last != 105 || got[k2].Rows != 1 || got[k2].Last != 107 {
		t.Errorf("due ship %+v (closed %v): want key 1 unchanged since its ship (0 rows, last 105), key 2 one new row at 107", got, closed)
	}
	// A slot recycled for a new window starts afresh.
	if _, err := a.ConsumeMarked(batch([]int64{1}, []int64{31}), []int64{108}, 30, true); err != nil {
		t.Fatal(err)
	}
	parts, _ = a.Ship(40, true, false)
	if p := byKey(parts)[k1]; len(parts) != 1 || p.Rows != 1 || p.Last != 108 {
		t.Errorf("recycled slot: %+v, want one row at 108", parts)
	}
}
