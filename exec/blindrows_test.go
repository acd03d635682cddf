package exec

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/types"
	"github.com/turbinesql/turbinesql/window"
)

// partialStore is a GroupStore that keeps every partial it is given
// (evicted, or committed through Changes), by group.
type partialStore struct {
	parts map[string][][]byte // window/kg/key -> partials
	kgs   map[string]uint16
	// evicted counts the partials written before a commit.
	evicted int
}

func (p *partialStore) add(ref StateRef, val []byte) error {
	if !ref.Partial {
		return fmt.Errorf("a held row's group stored whole: %+v", ref)
	}
	g := fmt.Sprintf("%d/%x", ref.Window, ref.Key)
	p.parts[g] = append(p.parts[g], bytes.Clone(val))
	p.kgs[g] = ref.KG
	return nil
}

func (p *partialStore) Load([]StateRef, func(int, []byte) error) error { return nil }
func (p *partialStore) Evict(ref StateRef, val []byte) error           { p.evicted++; return p.add(ref, val) }
func (p *partialStore) Scan(int64) GroupCursor                         { return emptyCursor{} }

// ScanDeltas lists the window's partials in (key group, key) order.
func (p *partialStore) ScanDeltas(window int64) GroupCursor {
	type part struct {
		kg       uint16
		key, val []byte
	}
	var ps []part
	for g, vals := range p.parts {
		var w int64
		var hexKey string
		if _, err := fmt.Sscanf(g, "%d/%s", &w, &hexKey); err != nil || w != window {
			continue
		}
		var key []byte
		fmt.Sscanf(hexKey, "%x", &key)
		for _, v := range vals {
			ps = append(ps, part{p.kgs[g], key, v})
		}
	}
	slices.SortStableFunc(ps, func(x, y part) int {
		if x.kg != y.kg {
			return int(x.kg) - int(y.kg)
		}
		return bytes.Compare(x.key, y.key)
	})
	return &sliceCursor{next: func() (uint16, []byte, []byte, bool) {
		if len(ps) == 0 {
			return 0, nil, nil, false
		}
		x := ps[0]
		ps = ps[1:]
		return x.kg, x.key, x.val, true
	}}
}

type sliceCursor struct {
	next func() (uint16, []byte, []byte, bool)
}

func (c *sliceCursor) Next() (uint16, []byte, []byte, bool) { return c.next() }
func (c *sliceCursor) Close() error                         { return nil }

type emptyCursor struct{}

func (emptyCursor) Next() (uint16, []byte, []byte, bool) { return 0, nil, nil, false }
func (emptyCursor) Close() error                         { return nil }

// TestHeldRowsFoldAsTheTable: rows of cold windows held and folded at once
// (blindrows.go) store partials that merge, per group, into exactly the
// accumulators the group table builds from the same rows; and they come
// in store order. The input has composite keys (a text partition key,
// short and over 16 bytes with long shared prefixes, and NULL; an
// integer), NULL arguments, several aggregates, rows of 2 and of 12
// windows per flush (the bucketed sort, and the plain one past 8
// windows), flushes of more than 4,096 rows, commits between batches,
// and a limit small enough that rows are written to the store before a
// commit.
func TestHeldRowsFoldAsTheTable(t *testing.T) {
	// Placed by the text key, a bucket (window, key group) holds a few
	// keys; by the integer (3 values), each holds a thousand, long keys
	// with a shared 16-byte prefix among them.
	for _, pk := range []int{0, 1} {
		t.Run(fmt.Sprintf("pk=%d", pk), func(t *testing.T) { testHeldRows(t, pk) })
	}
}

func testHeldRows(t *testing.T, pk int) {
	spec := window.Spec{Kind: window.Tumble, Size: 60_000}
	specs := []agg.Spec{
		{Name: "COUNT", Star: true},
		{Name: "SUM", ArgTypes: []types.Type{types.Int}},
		{Name: "MIN", ArgTypes: []types.Type{types.Text}},
		{Name: "AVG", ArgTypes: []types.Type{types.Int}},
		{Name: "BOOL_AND", ArgTypes: []types.Type{types.Bool}},
	}
	k := &ColRef{Idx: 0, Name: "k", T: types.Text}
	j := &ColRef{Idx: 1, Name: "j", T: types.Int}
	v := &ColRef{Idx: 2, Name: "v", T: types.Int}
	s := &ColRef{Idx: 4, Name: "s", T: types.Text}
	b := &ColRef{Idx: 5, Name: "b", T: types.Bool}
	cfg := AggConfig{Keys: []Expr{k, j}, PK: pk, TimeIdx: 3, Window: &spec, Specs: specs, Args: [][]Expr{nil, {v}, {s}, {v}, {b}}}
	ref, err := NewAggregator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	held, err := NewAggregator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := &partialStore{parts: map[string][][]byte{}, kgs: map[string]uint16{}}
	var cold []int64
	for w := int64(0); w < 12; w++ {
		cold = append(cold, w*spec.Size)
	}
	held.UseStore(st, cold) // every window cold: every row is held
	held.SetBufferLimit(1 << 20)
	if !held.BlindWrites() {
		t.Fatal("the aggregation does not write blind")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	long := strings.Repeat("a shared prefix longer than 16 bytes ", 2)
	bucketed, tabled := 0, 0
	commit := func() {
		t.Helper()
		onlyHeld := held.Table.Len() == 0 // the grouper's groups come after, in its order
		if held.held != nil && len(held.held.ents) >= 1<<12 {
			bucketed++
		}
		var refs [][]byte
		if err := held.Changes(func(r StateRef, val []byte) error {
			refs = append(refs, fmt.Appendf(nil, "%020d/%05d/%x", r.Window+1<<62, r.KG, r.Key))
			return st.add(r, val)
		}, func(StateRef) error { return fmt.Errorf("a held row's group deleted") }); err != nil {
			t.Fatal(err)
		}
		if onlyHeld && !slices.IsSortedFunc(refs, bytes.Compare) {
			t.Fatal("a commit's partials are not in store order")
		}
	}
	for batch := 0; batch < 46; batch++ {
		if batch == 10 && st.evicted == 0 {
			t.Fatal("no held rows written out past the limit before a commit")
		}
		if batch == 40 || batch == 42 {
			commit() // then few keys: held, then (the flush found many rows a group) folded by the grouper
		}
		n := 1 + rng.IntN(3000)
		// Phases: windows 0 and 1, then all 12, then 5 and 6, with a
		// commit between phases.
		first, windows := int64(0), 2
		switch {
		case batch == 15 || batch == 25:
			commit()
			fallthrough
		case batch > 15 && batch < 25:
			first, windows = 0, 12
		case batch > 25:
			first = 5
		}
		cols := []*Vec{newVec(types.Text, n), newVec(types.Int, n), newVec(types.Int, n), newVec(types.Timestamp, n), newVec(types.Text, n), newVec(types.Bool, n)}
		for c := range cols {
			cols[c].Null = make([]bool, n)
		}
		for i := 0; i < n; i++ {
			key := rng.IntN(3000)
			if batch >= 40 {
				key = rng.IntN(24) // few keys: many rows a group
			}
			switch key % 5 {
			case 0:
				cols[0].S[i] = fmt.Sprint(key)
			case 4: // keys that differ only past their first 8 bytes
				cols[0].S[i] = fmt.Sprintf("w1%010d", key)
			case 1:
				cols[0].S[i] = long + fmt.Sprint(key)
			case 2:
				cols[0].Null[i] = key%8 == 2
				cols[0].S[i] = "k" + fmt.Sprint(key)
			default:
				cols[0].S[i] = long[:20] + fmt.Sprint(key)
			}
			cols[1].I[i] = int64(key % 3)
			cols[2].I[i], cols[2].Null[i] = rng.Int64N(1000)-300, rng.IntN(20) == 0
			cols[3].I[i] = (first+int64(rng.IntN(windows)))*spec.Size + rng.Int64N(spec.Size)
			cols[4].S[i], cols[4].Null[i] = fmt.Sprintf("s%d", rng.IntN(500)), rng.IntN(15) == 0
			cols[5].B[i], cols[5].Null[i] = rng.IntN(10) != 0, rng.IntN(25) == 0
		}
		in := &Batch{N: n, Cols: cols}
		for _, a := range []*Aggregator{ref, held} {
			if late, err := a.Consume(in, 0, false); err != nil || len(late) > 0 {
				t.Fatal(late, err)
			}
		}
		switch {
		case held.Table.Len() == 0:
		case batch > 40:
			tabled++ // holding is off: the grouper folds few keys' rows
		default:
			t.Fatalf("batch %d: %d groups went to the table", batch, held.Table.Len())
		}
		if rng.IntN(6) == 0 {
			commit()
		}
		if batch == 10 || batch == 33 {
			// An early fire reads a window with rows held: it sees them.
			for w := first; w < first+2; w++ {
				got, want := windowRows(t, held, w*spec.Size), windowRows(t, ref, w*spec.Size)
				if !slices.Equal(got, want) {
					t.Fatalf("batch %d: window %d read with rows held: %d rows, want %d\n got %.300q\nwant %.300q", batch, w, len(got), len(want), got, want)
				}
			}
		}
	}
	commit()
	if bucketed < 3 || tabled == 0 {
		t.Fatalf("%d commits sorted by bucket (want 3 or more), %d batches of few keys folded by the grouper (want some)", bucketed, tabled)
	}
	if held.HeldBytes() != 0 {
		t.Fatalf("%d bytes still held after the commit", held.HeldBytes())
	}
	// Every group the table holds, merged from its partials, encodes as
	// the table's slot does.
	scratch, err := held.newTable()
	if err != nil {
		t.Fatal(err)
	}
	groups := 0
	for _, w := range ref.Table.windowStarts() {
		for _, slot := range ref.Table.WindowSlots(w) {
			groups++
			g := fmt.Sprintf("%d/%x", w, ref.Table.Key(slot))
			parts := st.parts[g]
			if len(parts) == 0 {
				t.Fatalf("group %s: no partial stored", g)
			}
			if st.kgs[g] != ref.Table.Meta(slot).KG {
				t.Fatalf("group %s: key group %d, want %d", g, st.kgs[g], ref.Table.Meta(slot).KG)
			}
			m := scratch.Slot(w, ref.Table.Key(slot), 0)
			for _, p := range parts {
				if err := scratch.Merge(m, p); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := scratch.Encode(nil, m), ref.Table.Encode(nil, slot); !bytes.Equal(got, want) {
				t.Fatalf("group %s: merged partials %x, want %x", g, got, want)
			}
		}
	}
	if groups != len(st.parts) {
		t.Fatalf("%d groups stored, want %d", len(st.parts), groups)
	}
}

// windowRows is window w's rows as WindowRows gives them, sorted, each
// as text.
func windowRows(t *testing.T, a *Aggregator, w int64) []string {
	t.Helper()
	c, ok, err := a.WindowRows(w)
	if err != nil || !ok {
		t.Fatalf("window %d: ok %v, %v", w, ok, err)
	}
	var out []string
	for b := c.First; b != nil; {
		for i := 0; i < b.N; i++ {
			var row []string
			for _, col := range b.Cols {
				row = append(row, fmt.Sprint(col.Value(i)))
			}
			out = append(out, strings.Join(row, "|"))
		}
		if c.More == nil {
			break
		}
		if b, err = c.More(); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(out)
	return out
}

// TestHeldRowsBoundedWhateverTheCache: a cache share of many GB does not
// let the held rows outgrow the 32-bit offsets that find their keys.
func TestHeldRowsBoundedWhateverTheCache(t *testing.T) {
	a := &Aggregator{}
	a.SetBufferLimit(64 << 30)
	if a.bufLimit != maxHeldBytes || maxHeldBytes > math.MaxUint32 {
		t.Fatalf("held rows limit %d with a 64 GB share", a.bufLimit)
	}
	a.SetBufferLimit(1 << 20)
	if a.bufLimit != 1<<20 {
		t.Fatalf("held rows limit %d with a 1 MB share", a.bufLimit)
	}
}

// TestLargeWindowGoesCold: a window of a cached blind aggregation that
// outgrows maxHotWindowGroups while most of its rows make new groups goes
// cold however large the cache (its
// further rows are held, not probed into a table of more groups than the
// CPU's cache), a smaller window stays hot, and both read back exactly as
// an aggregation without a store builds them.
func TestLargeWindowGoesCold(t *testing.T) {
	cfg, spec := countSumByKey()
	ref, err := NewAggregator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := &partialStore{parts: map[string][][]byte{}, kgs: map[string]uint16{}}
	cached := largeCacheAggregator(t, cfg, st, 0) // nothing stored: every window starts hot
	rng := rand.New(rand.NewPCG(9, 10))
	big, small := int64(0), spec.Size // windows of 4 times the bound's keys and of 1,000
	keys := maxHotWindowGroups * 4
	for batch := 0; batch < 80; batch++ {
		n := 4096
		cols := []*Vec{newVec(types.Int, n), newVec(types.Int, n), newVec(types.Timestamp, n)}
		for i := 0; i < n; i++ {
			w, key := big, rng.IntN(keys)
			if i%8 == 0 {
				w, key = small, rng.IntN(1000)
			}
			cols[0].I[i], cols[1].I[i], cols[2].I[i] = int64(key), rng.Int64N(100), w+rng.Int64N(spec.Size)
		}
		in := &Batch{N: n, Cols: cols}
		for _, a := range []*Aggregator{ref, cached} {
			if late, err := a.Consume(in, 0, false); err != nil || len(late) > 0 {
				t.Fatal(late, err)
			}
		}
	}
	if !cached.Cold(big) || cached.Cold(small) {
		t.Fatalf("cold: window of %d keys %v (want true), of 1,000 keys %v (want false)", keys, cached.Cold(big), cached.Cold(small))
	}
	if g := len(cached.Table.windows[big].slots); g > maxHotWindowGroups+4096 {
		t.Fatalf("%d groups of the large window in memory, bound %d", g, maxHotWindowGroups)
	}
	if cached.HeldRows() == 0 {
		t.Fatal("no rows of the large window held")
	}
	for _, w := range []int64{big, small} {
		got, want := windowRows(t, cached, w), windowRows(t, ref, w)
		if !slices.Equal(got, want) {
			t.Fatalf("window %d: %d rows, want %d", w, len(got), len(want))
		}
	}

	// Past a bound of 100 groups, a window whose batches mostly fold into
	// groups it has (1,000 keys, 4,096 rows a batch) stays hot; one whose
	// rows are all new keys goes cold.
	a := largeCacheAggregator(t, cfg, st, 100)
	folding, fresh := 2*spec.Size, 3*spec.Size
	for batch := 0; batch < 6; batch++ {
		for _, w := range []int64{folding, fresh} {
			n := 4096
			cols := []*Vec{newVec(types.Int, n), newVec(types.Int, n), newVec(types.Timestamp, n)}
			for i := 0; i < n; i++ {
				key := int64(rng.IntN(1000))
				if w == fresh {
					key = int64(batch*n + i)
				}
				cols[0].I[i], cols[1].I[i], cols[2].I[i] = key, 1, w
			}
			if late, err := a.Consume(&Batch{N: n, Cols: cols}, 0, false); err != nil || len(late) > 0 {
				t.Fatal(late, err)
			}
		}
	}
	if a.Cold(folding) || !a.Cold(fresh) {
		t.Fatalf("bound 100: cold with 1,000 keys folded %v (want false), with new keys %v (want true)", a.Cold(folding), a.Cold(fresh))
	}
}

// TestFoldingWindowStaysHotBesideNewKeys: past its bound, a window whose
// rows all fold into groups it has stays hot though most of each batch is
// new keys of another window (the share of new rows is counted per
// window; counted per batch, a window boundary cooled the folding one.
// Found by a review.)
func TestFoldingWindowStaysHotBesideNewKeys(t *testing.T) {
	cfg, spec := countSumByKey()
	a := largeCacheAggregator(t, cfg, &partialStore{parts: map[string][][]byte{}, kgs: map[string]uint16{}}, 100)
	rng := rand.New(rand.NewPCG(1, 2))
	folding, fresh := int64(0), spec.Size
	next := int64(0)
	for batch := 0; batch < 6; batch++ {
		n := 4096
		cols := []*Vec{newVec(types.Int, n), newVec(types.Int, n), newVec(types.Timestamp, n)}
		for i := 0; i < n; i++ {
			w, key := folding, int64(rng.IntN(1000))
			if batch > 0 && i%5 < 3 { // 60%: new keys of the next window
				w, key = fresh, next
				next++
			}
			cols[0].I[i], cols[1].I[i], cols[2].I[i] = key, 1, w
		}
		if late, err := a.Consume(&Batch{N: n, Cols: cols}, 0, false); err != nil || len(late) > 0 {
			t.Fatal(late, err)
		}
	}
	if a.Cold(folding) {
		t.Fatal("a window of 1,000 keys whose rows all fold went cold")
	}
}

// countSumByKey is COUNT(*), SUM(v) GROUP BY k over 1-minute TUMBLE
// windows of rows (k BIGINT, v BIGINT, ts).
func countSumByKey() (AggConfig, window.Spec) {
	spec := window.Spec{Kind: window.Tumble, Size: 60_000}
	k := &ColRef{Idx: 0, Name: "k", T: types.Int}
	v := &ColRef{Idx: 1, Name: "v", T: types.Int}
	return AggConfig{Keys: []Expr{k}, PK: 0, TimeIdx: 2, Window: &spec,
		Specs: []agg.Spec{{Name: "COUNT", Star: true}, {Name: "SUM", ArgTypes: []types.Type{types.Int}}}, Args: [][]Expr{nil, {v}}}, spec
}

// largeCacheAggregator is cfg's aggregation over st with a 1 GB share, its
// windows cold past hot groups in memory (0: the default bound).
func largeCacheAggregator(t *testing.T, cfg AggConfig, st GroupStore, hot int) *Aggregator {
	t.Helper()
	a, err := NewAggregator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.UseStore(st, nil)
	a.SetBufferLimit(1 << 30)
	a.SetHotWindowGroups(hot)
	return a
}

// TestOneNewRowDoesNotCoolAWindow: past its bound, a window whose rows
// all folded stays hot when a batch carries one row of it, of a new key
// (a late row beside the next window's): coolLarge decides on 256 of a
// window's rows or more. (Decided on the batch's rows of the window, one
// such row cooled it. Found by a review.)
func TestOneNewRowDoesNotCoolAWindow(t *testing.T) {
	cfg, spec := countSumByKey()
	a := largeCacheAggregator(t, cfg, &partialStore{parts: map[string][][]byte{}, kgs: map[string]uint16{}}, 100)
	rng := rand.New(rand.NewPCG(1, 2))
	folding, other := int64(0), spec.Size
	for batch := 0; batch < 6; batch++ {
		n := 4096
		cols := []*Vec{newVec(types.Int, n), newVec(types.Int, n), newVec(types.Timestamp, n)}
		for i := 0; i < n; i++ {
			w, key := folding, int64(rng.IntN(1000))
			if batch == 5 {
				w, key = other, int64(rng.IntN(50))
				if i == 0 {
					w, key = folding, 5000
				}
			}
			cols[0].I[i], cols[1].I[i], cols[2].I[i] = key, 1, w
		}
		if late, err := a.Consume(&Batch{N: n, Cols: cols}, 0, false); err != nil || len(late) > 0 {
			t.Fatal(late, err)
		}
	}
	if a.Cold(folding) {
		t.Fatal("a window of 1,000 keys whose 20,480 rows folded went cold on one row of a new key")
	}
}
