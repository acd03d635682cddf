package exec

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/types"
	"github.com/turbinesql/turbinesql/window"
)

// NoWindow is the window start of every group of an unwindowed aggregation.
const NoWindow int64 = 0

// AggConfig describes a hash aggregation.
type AggConfig struct {
	Filter   Expr
	Keys     []Expr
	PK       int // index in Keys of the partition key; -1: none
	TimeIdx  int // input column of event time; -1: no window
	Window   *window.Spec
	Lateness int64 // allowed lateness, millis
	Specs    []agg.Spec
	Args     [][]Expr // per aggregate, over the input
}

// Aggregator is the hash aggregation operator: it filters a batch, assigns
// each row to its (slice, key) slot and folds it into the accumulators.
//
// A slice is a tumbling window for TUMBLE, and a stretch of the gcd of
// slide and size for HOP: each row updates exactly one slice, and a hopping
// window is assembled from its slices when it closes, so overlapping
// windows share the work instead of each row updating size/slide windows.
// SESSION windows keep one slot per (key, session) (see session.go).
type Aggregator struct {
	AggConfig
	KeyTypes []types.Type
	Table    *GroupTable

	mem      memory.Allocator
	rows     RowKeys
	probes   []probeKey
	wins     []int64
	slots    []uint32
	pkBuf    []byte
	kgBuf    []uint16
	heldRows uint64 // rows held so far (HeldRows)
	keep     []bool
	emitTab  *GroupTable // HOP: where a window's slices are merged to emit it
	sessions *sessions   // SESSION: the open sessions of each key
	encBuf   []byte
	// store holds the groups not in memory (nil: all are); cold lists
	// the windows (slices) that may have some there (cache.go).
	store GroupStore
	cold  map[int64]bool
	// evicted holds, for a window gone cold during this run, a filter of
	// the keys it lost to the store (keyfilter.go); none for a window cold
	// since start.
	evicted map[int64]*keyFilter
	// blind: misses in cold windows are not read (UseStore).
	blind bool
	// scratch merges encodings (MergedEncoding).
	scratch *GroupTable
	// held are rows of cold windows not yet folded, up to bufLimit bytes
	// (blindrows.go); coldSel is scratch.
	held     *blindRows
	bufLimit int
	coldSel  []bool
	heldOff  bool
	// hotGroups bounds a hot window's groups (SetHotWindowGroups).
	hotGroups int
	// marked: rows come with marks (ConsumeMarked, rowmarks.go); inMarks
	// are the current batch's, slotMarks what each group knows.
	marked    bool
	FreshFrom int64 // rows marked below it are not counted as new (rowmarks.go)
	inMarks   []int64
	markBuf   []int64
	slotMarks []slotMarks
}

// NewAggregator builds the operator.
func NewAggregator(cfg AggConfig) (*Aggregator, error) {
	funcs, err := newFuncs(cfg.Specs)
	if err != nil {
		return nil, err
	}
	kt := make([]types.Type, len(cfg.Keys))
	for i, k := range cfg.Keys {
		kt[i] = k.Type()
	}
	if cfg.Window == nil {
		cfg.TimeIdx = -1
	} else if err := cfg.Window.Validate(); err != nil {
		return nil, err
	}
	a := &Aggregator{AggConfig: cfg, KeyTypes: kt, Table: NewGroupTable(funcs), mem: memory.DefaultAllocator, hotGroups: maxHotWindowGroups}
	if cfg.Window != nil && cfg.Window.Kind == window.Hop && cfg.Window.SliceSize() != cfg.Window.Size {
		if a.emitTab, err = a.newTable(); err != nil {
			return nil, err
		}
	}
	if cfg.Window != nil && cfg.Window.Kind == window.Session {
		a.sessions = newSessions()
	}
	return a, nil
}

func newFuncs(specs []agg.Spec) ([]agg.Func, error) {
	funcs := make([]agg.Func, len(specs))
	for i, s := range specs {
		f, err := agg.New(s)
		if err != nil {
			return nil, err
		}
		funcs[i] = f
	}
	return funcs, nil
}

// keyGroup is the key group of a partition-key value: the same on every
// partition count (state.KeyGroup), so a key that stays on its partition
// across a change of count finds its state.
func (a *Aggregator) keyGroup(pk []byte) uint16 { return state.KeyGroup(pk) }

// rowGroup is the key group of row i's partition key: the NULL key has a
// group of its own (state.NullGroup), apart from the empty text's.
func (a *Aggregator) rowGroup(pk *Vec, i int) uint16 {
	if pk.IsNull(i) {
		return state.NullGroup
	}
	a.pkBuf = PartitionKeyText(pk, i, a.pkBuf[:0])
	return a.keyGroup(a.pkBuf)
}

// rowGroups is rowGroup of each of pk's first n rows (in a buffer reused
// by the next call): in one pass for an integer key (state.IntGroups).
func (a *Aggregator) rowGroups(pk *Vec, n int) []uint16 {
	kgs := slices.Grow(a.kgBuf[:0], n)[:n]
	a.kgBuf = kgs
	if pk.T == types.Int && len(pk.I) >= n && (pk.Null == nil || len(pk.Null) >= n) {
		var null []bool
		if pk.Null != nil {
			null = pk.Null[:n]
		}
		state.IntGroups(kgs, pk.I[:n], null)
		return kgs
	}
	for i := range kgs {
		kgs[i] = a.rowGroup(pk, i)
	}
	return kgs
}

// newTable is an empty group table over fresh accumulators of the same
// aggregates.
func (a *Aggregator) newTable() (*GroupTable, error) {
	funcs, err := newFuncs(a.Specs)
	if err != nil {
		return nil, err
	}
	return NewGroupTable(funcs), nil
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

// Consume folds batch b in. It returns the rows (indices into b) that
// passed the filter but are late: their event time is NULL, or every
// window they fall in has closed (its end plus the allowed lateness is at
// or before the watermark wm). Late rows are not folded in.
//
// The work is column-at-a-time: filter, slices and lateness in typed
// loops, the group keys encoded a column at a time (RowKeys), then one hash
// probe per row to a dense slot id, then each aggregate's typed update loop
// over the slot vector.
func (a *Aggregator) Consume(b *Batch, wm int64, hasWM bool) (late []int, err error) {
	n := b.N
	if n == 0 {
		return nil, nil
	}
	a.keep = slices.Grow(a.keep[:0], n)[:n]
	keep := a.keep
	kept := n
	if a.Filter != nil {
		m, err := a.Filter.Eval(b)
		if err != nil {
			return nil, err
		}
		kept = 0
		for i := 0; i < n; i++ {
			keep[i] = !m.IsNull(i) && m.B[i]
			if keep[i] {
				kept++
			}
		}
	} else {
		for i := range keep {
			keep[i] = true
		}
	}
	a.wins = a.wins[:0]
	if a.Window != nil {
		ts := b.Cols[a.TimeIdx]
		if a.sessions != nil {
			return a.consumeSessions(b, ts, keep, kept, wm, hasWM)
		}
		a.wins = slices.Grow(a.wins, n)[:n]
		spec := a.Window
		g := spec.SliceSize()
		for i, t := range ts.I[:n] {
			a.wins[i] = window.FloorTo(t, g)
		}
		for i := 0; i < n; i++ {
			if !keep[i] {
				continue
			}
			if ts.IsNull(i) || (hasWM && spec.LastWindowEnd(a.wins[i])+a.Lateness <= wm) {
				keep[i] = false
				kept--
				late = append(late, i)
			}
		}
	}
	if kept == 0 {
		return late, nil
	}
	if kept < n {
		b = b.Select(keep, kept)
		a.keepMarks(keep, kept)
		if len(a.wins) > 0 {
			j := 0
			for i, k := range keep {
				if k {
					a.wins[j] = a.wins[i]
					j++
				}
			}
			a.wins = a.wins[:j]
		}
	}
	return late, a.fold(b, a.wins)
}

// fold assigns every row of b to the slot of (wins[i] or NoWindow, key)
// and updates the aggregates.
func (a *Aggregator) fold(b *Batch, wins []int64) error {
	if len(wins) > 0 && a.holding() {
		var err error
		if b, wins, err = a.foldCold(b, wins); err != nil || b == nil {
			return err
		}
	}
	keys, err := evalAll(b, a.Keys)
	if err != nil {
		return err
	}
	a.prepareProbes(keys, b.N)
	slots := slices.Grow(a.slots[:0], b.N)[:b.N]
	newRows := a.Table.assign(wins, a.probes, &a.rows, slots)
	a.noteNewSlots(len(newRows), b.N)
	if len(newRows) > 0 && a.blind && a.store != nil && a.bufLimit > 0 {
		a.coolLarge(wins[:b.N], newRows)
	}
	if a.PK >= 0 {
		for _, i := range newRows {
			a.Table.Meta(slots[i]).KG = a.rowGroup(keys[a.PK], i)
		}
	}
	a.slots = slots
	a.noteMarks(slots, newRows)
	if a.store != nil && len(newRows) > 0 && len(a.cold) > 0 {
		if err := a.loadMisses(newRows, slots); err != nil {
			return err
		}
	}
	return a.update(b, slots)
}

// update evaluates the aggregates' arguments over b and folds row i into
// slots[i].
func (a *Aggregator) update(b *Batch, slots []uint32) error {
	args := make([][]arrow.Array, len(a.Args))
	defer func() {
		for _, as := range args {
			for _, x := range as {
				x.Release()
			}
		}
	}()
	for j, exprs := range a.Args {
		for _, e := range exprs {
			v, err := e.Eval(b)
			if err != nil {
				return err
			}
			args[j] = append(args[j], arrowView(v, a.mem))
		}
	}
	a.Table.Update(slots, args)
	return nil
}

// emit builds the post-aggregation rows of slots of table t: keys, then
// (when windowed) the window's start and end, then each aggregate's
// result. Every row gets the window [start, end).
func (a *Aggregator) emit(t *GroupTable, slots []uint32, start, end int64) (*Batch, error) {
	return a.emitRows(t, slots, func(s uint32) []byte { return t.Key(s) }, func(int) (int64, int64) { return start, end })
}

// emitRows is emit with each row's key and window given by the caller
// (sessions keep their keys themselves, and each has its own bounds).
func (a *Aggregator) emitRows(t *GroupTable, slots []uint32, keyOf func(uint32) []byte, bounds func(i int) (int64, int64)) (*Batch, error) {
	n := len(slots)
	ncols := len(a.Keys) + len(t.Aggs)
	if a.Window != nil {
		ncols += 2
	}
	out := &Batch{N: n, Cols: make([]*Vec, 0, ncols)}
	keyCols := make([]*Vec, len(a.Keys))
	for j, kt := range a.KeyTypes {
		keyCols[j] = newVec(kt, n)
	}
	aggCols := make([]*Vec, len(t.Aggs))
	for j, f := range t.Aggs {
		aggCols[j] = newVec(f.ResultType(), n)
	}
	for i, s := range slots {
		if err := DecodeKeyInto(keyOf(s), a.KeyTypes, keyCols, i); err != nil {
			return nil, err
		}
		for j, f := range t.Aggs {
			setValue(aggCols[j], i, f.Result(s))
		}
	}
	out.Cols = append(out.Cols, keyCols...)
	if a.Window != nil {
		ws, we := newVec(types.Timestamp, n), newVec(types.Timestamp, n)
		for i := range ws.I {
			ws.I[i], we.I[i] = bounds(i)
		}
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

// maxHotWindowGroups is the most groups a window of a blind, cached
// aggregation keeps in the group table while most of its rows make new
// groups; past it the window goes cold (coolLarge), and its rows are held
// and written as runs of partials (blindrows.go), as if the cache had
// evicted its groups.
//
// Why, even with cache to spare: a table of more groups than the CPU's
// cache holds costs a memory miss per row, and every commit writes each of
// its changed groups whole through Pebble's memtable (flushed and compacted
// again at the next commit), about ten times what a partial in a run costs.
// When most rows make new groups, the table folds nothing for that price.
// Measured (bench/state, 10^6 to 10^7 keys, 2 rows a key in the hour), a
// 1 GB cache ran at a quarter of a 64 MB one, with up to ten times the
// memory. A window of 10^5 keys (20 rows a key) runs as fast in the table
// as held, so the bound is above it; windows of 10^4 keys (the in-memory
// figure) are far from it.
const maxHotWindowGroups = 1 << 17

// SetHotWindowGroups lowers the groups at which a window goes cold (0:
// maxHotWindowGroups): tests and crash audits set a few, so windows go
// cold this way at their scale.
func (a *Aggregator) SetHotWindowGroups(n int) {
	a.hotGroups = maxHotWindowGroups
	if n > 0 {
		a.hotGroups = min(n, maxHotWindowGroups)
	}
}

// coolLarge makes cold each window of a batch (its rows' windows wins,
// the rows that made new groups newRows) that has outgrown its bound
// (maxHotWindowGroups, or SetHotWindowGroups) while most of its rows made
// new groups: the table does not fold them. Counted per window (a batch
// spanning a window boundary, HOP slices or allowed lateness has a window
// whose rows fold beside one whose rows are new), over at least
// coolSample of its rows, across batches (one late row of a new key is
// not a window of new keys). (A window marked cold without a group in
// the store is only read for nothing at its close: cold means "may have
// stored groups".)
func (a *Aggregator) coolLarge(wins []int64, newRows []int) {
	var over []int64 // hot windows of the batch past the bound: few, a batch spans few windows
	last := int64(0)
	for i, w := range wins {
		if i > 0 && w == last {
			continue
		}
		last = w
		if g := a.Table.windows[w]; g != nil && len(g.slots) > a.hotGroups && !a.cold[w] && !slices.Contains(over, w) {
			over = append(over, w)
		}
	}
	for _, w := range over {
		g := a.Table.windows[w]
		for _, x := range wins {
			if x == w {
				g.sampled++
			}
		}
		for _, i := range newRows {
			if wins[i] == w {
				g.fresh++
			}
		}
		if g.sampled < coolSample {
			continue
		}
		if 2*g.fresh > g.sampled {
			a.cold[w] = true
		}
		g.sampled, g.fresh = 0, 0
	}
}

// coolSample is the fewest rows of a window coolLarge decides on.
const coolSample = 256
