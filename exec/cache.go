package exec

import (
	"bytes"
	stdcmp "cmp"
	"slices"

	"github.com/turbinesql/turbinesql/agg"
)

// This file bounds the memory of an aggregation's groups (TUMBLE, HOP and
// unwindowed; not SESSION): hot groups stay in the group table, in the
// grouper's form, and cold ones live only in a GroupStore. A window (or
// HOP slice) any group of which may be in the store and not in memory is
// cold: a new group of a cold window is looked up in the store before it
// is folded into (or, writing blind, started empty and stored as a
// partial: see UseStore), and a cold window closes by reading its groups
// and partials from the store in order, merged with the hot ones, a chunk
// at a time. A window that never lost a group to the store costs nothing
// extra.

// GroupStore is where cold groups live.
type GroupStore interface {
	// Load reads the stored accumulators of refs in one sorted pass,
	// calling found with the index into refs of each one stored.
	Load(refs []StateRef, found func(i int, val []byte) error) error
	// Evict keeps a group changed since the last commit that leaves
	// memory; it is written with the next commit.
	Evict(ref StateRef, val []byte) error
	// Scan lists the stored groups of one window (or slice) in (key
	// group, key) order.
	Scan(window int64) GroupCursor
	// ScanDeltas lists the stored partials of blind groups (Evict and
	// Changes with StateRef.Partial) of one window in (key group, key)
	// order, each under its group's key, a group's partials together.
	ScanDeltas(window int64) GroupCursor
}

// GroupCursor walks stored groups; key and val are valid until the next
// call.
type GroupCursor interface {
	Next() (kg uint16, key, val []byte, ok bool)
	Close() error
}

// chunkRows is how many groups of a cold window one emitted batch holds.
const chunkRows = 4096

// UseStore makes the aggregation keep at most the groups EvictTo allows in
// memory, the rest in st. cold lists the windows the store may hold groups
// of (at start: every window it holds).
//
// A windowed aggregation whose aggregates all merge exactly
// (agg.MergesExactly) writes blind: a group new to memory in a cold
// window is not read from the store but started empty (SlotMeta.Blind),
// and what it gathers is stored as a partial beside the group
// (StateRef.Partial) when it is evicted or committed; the window's close
// merges the group with its partials (windowSource). A miss then costs no
// read at all, which is what bounds a cold window's throughput otherwise.
// Upsert streams (no window) emit each changed group whole at every
// commit, so they read.
func (a *Aggregator) UseStore(st GroupStore, cold []int64) {
	a.store = st
	a.evicted = map[int64]*keyFilter{}
	a.cold = map[int64]bool{}
	for _, w := range cold {
		a.cold[w] = true
	}
	a.blind = a.Window != nil && a.sessions == nil
	for _, f := range a.Table.Aggs {
		a.blind = a.blind && agg.MergesExactly(f)
	}
}

// BlindWrites reports whether the aggregation writes blind (UseStore).
func (a *Aggregator) BlindWrites() bool { return a.blind }

// ReadMisses makes a cached aggregation read its misses even when its
// aggregates merge exactly: a combine's merge stage replaces a source's
// latest partial of a group, which a blind partial cannot say. Its windows
// then keep filters of the keys that left memory (MayBeStored), so a key
// new to a window that cooled during the run costs no read.
func (a *Aggregator) ReadMisses() { a.blind = false }

// GroupForgetter is a GroupStore that keeps more of a group than its
// accumulators (a merge stage keeps each source's latest partial): EvictTo
// tells it of every group that leaves memory, after Evict for a changed one.
type GroupForgetter interface {
	Forget(ref StateRef)
}

// Hot reports whether group (window, key) is in memory.
func (a *Aggregator) Hot(window int64, key []byte) bool {
	_, ok := a.Table.find(window, key)
	return ok
}

// MayBeStored reports whether group (window, key), not in memory, may be
// in the store: its window is cold, and the key left memory (when the
// window cooled during this run, its filter knows which keys did; a key
// it never saw leave was never stored).
func (a *Aggregator) MayBeStored(window int64, key []byte) bool {
	if !a.cold[window] {
		return false
	}
	f := a.evicted[window]
	return f == nil || f.mayHold(key)
}

// KeyGroupOf is the key group of a group placed by its encoded key (a
// combine's partials, and so a merge stage's groups).
func (a *Aggregator) KeyGroupOf(key []byte) uint16 { return a.keyGroup(key) }

// PartitionKeyGroup is the key group of the group whose encoded key is
// key, as Consume gives it: its partition-key column's (0 without one).
// What re-keys state stored under other groups (state.RekeyScope).
func (a *Aggregator) PartitionKeyGroup(key []byte) (uint16, error) {
	if a.PK < 0 {
		return 0, nil
	}
	cols := make([]*Vec, len(a.KeyTypes))
	for i, t := range a.KeyTypes {
		cols[i] = newVec(t, 1)
	}
	if err := DecodeKeyInto(key, a.KeyTypes, cols, 0); err != nil {
		return 0, err
	}
	return a.rowGroup(cols[a.PK], 0), nil
}

// MergedEncoding appends to dst the encoding of the merge of encs (a merge
// stage's stored group is each source's latest partial; its close reads
// their merge).
func (a *Aggregator) MergedEncoding(dst []byte, encs [][]byte) ([]byte, error) {
	if a.scratch == nil {
		t, err := a.newTable()
		if err != nil {
			return nil, err
		}
		a.scratch = t
	}
	t := a.scratch
	s := t.Slot(0, nil, 0)
	defer t.CloseWindow(0)
	for _, enc := range encs {
		if err := t.Merge(s, enc); err != nil {
			return nil, err
		}
	}
	return t.Encode(dst, s), nil
}

// Cold reports whether window (or slice) w may have groups only in the
// store.
func (a *Aggregator) Cold(w int64) bool { return a.cold[w] }

// loadMisses fills the slots a batch just created in cold windows from
// the store, in one sorted pass. rows are the batch rows that created a
// slot.
func (a *Aggregator) loadMisses(newRows []int, slots []uint32) error {
	if a.blind {
		for _, i := range newRows {
			if m := a.Table.Meta(slots[i]); a.cold[m.Window] {
				m.Blind = true
			}
		}
		return nil
	}
	var refs []StateRef
	var at []uint32
	for _, i := range newRows {
		s := slots[i]
		m := a.Table.Meta(s)
		if !a.MayBeStored(m.Window, a.Table.Key(s)) {
			continue
		}
		refs = append(refs, StateRef{KG: m.KG, Key: a.Table.Key(s), Window: m.Window})
		at = append(at, s)
	}
	if len(refs) == 0 {
		return nil
	}
	return a.store.Load(refs, func(i int, val []byte) error {
		s := at[i]
		a.Table.Meta(s).Stored = true
		return a.Table.Merge(s, val)
	})
}

// EvictTo evicts groups until at most max are in memory: a clock sweep
// that passes over the groups updated since it last came by (clearing
// their mark) and evicts the others, writing the changed ones to the
// store. It returns the mean encoded size of the groups it wrote (0:
// none), for the caller's estimate of a group's memory.
func (a *Aggregator) EvictTo(max int) (meanBytes int, err error) {
	t := a.Table
	if a.sessions != nil && a.sessions.store != nil && t.live > max {
		return a.evictSessions(max)
	}
	if a.store == nil || a.sessions != nil || t.live <= max {
		return 0, nil
	}
	total, written := 0, 0
	forget, _ := a.store.(GroupForgetter)
	n := uint32(len(t.meta))
	for pass := uint32(0); t.live > max && pass < 2*n+1; pass++ {
		s := t.hand
		if t.hand++; t.hand >= n {
			t.hand = 0
		}
		m := &t.meta[s]
		if !m.live {
			continue
		}
		if t.ref[s] {
			t.ref[s] = false
			continue
		}
		if t.marked[s] {
			a.encBuf = t.Encode(a.encBuf[:0], s)
			if err := a.store.Evict(StateRef{KG: m.KG, Key: t.Key(s), Window: m.Window, Partial: m.Blind}, a.encBuf); err != nil {
				return 0, err
			}
			total += len(a.encBuf) + int(m.klen)
			written++
		}
		if forget != nil {
			forget.Forget(StateRef{KG: m.KG, Key: t.Key(s), Window: m.Window})
		}
		a.noteEvicted(m.Window, t.Key(s))
		t.evict(s)
	}
	if written == 0 {
		return 0, nil
	}
	return total / written, nil
}

// noteEvicted records that window w lost key to the store: the window is
// cold, and, unless it was cold since start, its filter holds the key.
func (a *Aggregator) noteEvicted(w int64, key []byte) {
	f := a.evicted[w]
	if !a.cold[w] {
		a.cold[w] = true
		if !a.blind { // a blind aggregation never reads a miss: no filter
			f = &keyFilter{}
			a.evicted[w] = f
		}
	}
	if f != nil {
		f.add(key)
	}
}

// FilterBytes is the memory of the evicted-key filters.
func (a *Aggregator) FilterBytes() int {
	n := 0
	for _, f := range a.evicted {
		n += f.bytes()
	}
	if a.sessions != nil && a.sessions.written != nil {
		n += a.sessions.written.bytes()
	}
	return n
}

// evict removes live slot s from its window's key table and recycles it.
// The window stays (possibly empty): the caller marks it cold.
func (t *GroupTable) evict(s uint32) {
	m := &t.meta[s]
	g := t.windows[m.Window]
	key := m.key(g.arena)
	p := makeProbeKey(key)
	g.keys.remove(&p, s)
	last := g.slots[len(g.slots)-1]
	g.slots[m.pos] = last
	t.meta[last].pos = m.pos
	g.slots = g.slots[:len(g.slots)-1]
	g.garbage += int(m.klen)
	m.live = false
	t.marked[s] = false
	t.ref[s] = false
	t.free = append(t.free, s)
	t.live--
	if g.garbage > 64<<10 && g.garbage > len(g.arena)/2 {
		g.compact(t.meta)
	}
}

// evictMany is evict of many slots. A window losing at least a quarter
// of its slots rebuilds its key table from the slots that stay (one pass
// in memory order) instead of removing each key (a cache miss apiece: a
// commit of 10^7 keys' partials, whose slots all leave, spent a tenth of
// its CPU in removals).
func (t *GroupTable) evictMany(slots []uint32) {
	leaving := map[int64]int{}
	for _, s := range slots {
		leaving[t.meta[s].Window]++
	}
	for w, n := range leaving {
		if g := t.windows[w]; n*4 < g.keys.n {
			delete(leaving, w) // few: one by one
		}
	}
	for _, s := range slots {
		m := &t.meta[s]
		if _, bulk := leaving[m.Window]; !bulk {
			t.evict(s)
			continue
		}
		t.windows[m.Window].garbage += int(m.klen)
		m.live = false
		t.marked[s] = false
		t.ref[s] = false
		t.free = append(t.free, s)
		t.live--
	}
	for w := range leaving {
		g := t.windows[w]
		kept := g.slots[:0]
		for _, s := range g.slots {
			if t.meta[s].live {
				t.meta[s].pos = uint32(len(kept))
				kept = append(kept, s)
			}
		}
		g.slots = kept
		if len(kept) == 0 {
			// Every slot left (a blind window's commit): keep would look
			// up each entry's slot, a cache miss apiece, to drop them all.
			g.keys.reset()
		} else {
			g.keys.keep(func(slot uint32) bool { return t.meta[slot].live && t.meta[slot].Window == w })
		}
		if g.garbage > 64<<10 && g.garbage > len(g.arena)/2 {
			g.compact(t.meta)
		}
	}
}

// reset empties the table (same size).
func (t *keyTable) reset() {
	clear(t.entries)
	t.n = 0
}

// keep drops every entry whose slot live rejects, rebuilding the table
// (same size) from the others.
func (t *keyTable) keep(live func(slot uint32) bool) {
	n := 0
	for _, e := range t.entries {
		if e.slot != 0 && live(e.slot-1) {
			n++
		}
	}
	if n == 0 {
		t.reset()
		return
	}
	old := t.entries
	t.entries = make([]keyEntry, len(old))
	t.n = n
	mask := len(t.entries) - 1
	for _, e := range old {
		if e.slot == 0 || !live(e.slot-1) {
			continue
		}
		i := int(e.hash) & mask
		for t.entries[i].slot != 0 {
			i = (i + 1) & mask
		}
		t.entries[i] = e
	}
}

// compact rewrites the arena with the live slots' keys only.
func (g *windowGroups) compact(meta []SlotMeta) {
	arena := make([]byte, 0, len(g.arena)-g.garbage)
	for _, s := range g.slots {
		m := &meta[s]
		off := uint32(len(arena))
		arena = append(arena, m.key(g.arena)...)
		m.off = off
	}
	g.arena, g.garbage = arena, 0
}

// remove deletes slot's entry (whose key probes as p), shifting back the
// entries after it in its probe run, so lookups need no tombstones.
func (t *keyTable) remove(p *probeKey, slot uint32) {
	mask := len(t.entries) - 1
	i := int(p.hash) & mask
	for t.entries[i].slot != slot+1 {
		if t.entries[i].slot == 0 {
			panic("exec: evicting a slot its key table does not hold") // a bug in the table
		}
		i = (i + 1) & mask
	}
	for j := i; ; {
		j = (j + 1) & mask
		e := t.entries[j]
		if e.slot == 0 {
			break
		}
		h := int(e.hash) & mask
		// e stays when its home is cyclically in (i, j].
		if (i <= j && i < h && h <= j) || (i > j && (i < h || h <= j)) {
			continue
		}
		t.entries[i] = e
		i = j
	}
	t.entries[i] = keyEntry{}
	t.n--
}

// find returns the live slot of (window, key) without creating one.
func (t *GroupTable) find(window int64, key []byte) (uint32, bool) {
	g := t.windows[window]
	if g == nil || g.keys.entries == nil {
		return 0, false
	}
	p := makeProbeKey(key)
	s, _, ok := g.keys.find(&p, key, g.arena, t.meta)
	return s, ok
}

// windowSource is one slice of a cold window as a sorted stream of
// groups: its hot slots and its stored groups, merged by (key group, key).
// A stored group is skipped when it is hot and not blind (the hot slot
// holds it and is newer); a blind slot is only the rows since it was
// created, so its stored group comes too and the two are merged. A
// slice's stored partials are a source of their own (deltas: no hot
// slots, nothing skipped).
type windowSource struct {
	a      *Aggregator
	slice  int64
	deltas bool
	hot    []uint32
	cur    GroupCursor
	ckg    uint16
	ckey   []byte
	cval   []byte
	cok    bool
	kg     uint16
	key    []byte
	enc    []byte
	ok     bool
	encBuf []byte
}

func (a *Aggregator) newWindowSource(slice int64) *windowSource {
	src := &windowSource{a: a, slice: slice, cur: a.store.Scan(slice)}
	if g := a.Table.windows[slice]; g != nil {
		src.hot = a.Table.sortedSlots(g)
	}
	src.advanceCold()
	src.next()
	return src
}

// newDeltaSource is the stored partials of slice as a source.
func (a *Aggregator) newDeltaSource(slice int64) *windowSource {
	src := &windowSource{a: a, slice: slice, deltas: true, cur: a.store.ScanDeltas(slice)}
	src.advanceCold()
	src.next()
	return src
}

// advanceCold moves the store cursor to its next group.
func (w *windowSource) advanceCold() {
	w.ckg, w.ckey, w.cval, w.cok = w.cur.Next()
}

// next sets (kg, key, enc) to the source's next group: the lesser of its
// next hot slot and its next stored group. A stored group that is hot and
// not blind is skipped (the hot slot holds it and is newer): the two meet
// here, both lists being in (key group, key) order, so no lookup in the
// key table is needed to tell (at 10^7 keys in a 1 GB cache a lookup per
// stored group, a cache miss apiece, was half the close).
func (w *windowSource) next() {
	t := w.a.Table
	for {
		takeHot := len(w.hot) > 0
		if takeHot && w.cok {
			m := &t.meta[w.hot[0]]
			c := stdcmp.Compare(m.KG, w.ckg)
			if c == 0 {
				c = bytes.Compare(t.Key(w.hot[0]), w.ckey)
			}
			if c == 0 && !w.deltas && !m.Blind {
				w.advanceCold()
				continue
			}
			takeHot = c < 0
		}
		switch {
		case takeHot:
			s := w.hot[0]
			w.hot = w.hot[1:]
			w.kg = t.meta[s].KG
			w.key = append(w.key[:0], t.Key(s)...)
			w.encBuf = t.Encode(w.encBuf[:0], s)
			w.enc, w.ok = w.encBuf, true
		case w.cok:
			w.kg, w.key = w.ckg, append(w.key[:0], w.ckey...)
			w.encBuf = append(w.encBuf[:0], w.cval...)
			w.enc, w.ok = w.encBuf, true
			w.advanceCold()
		default:
			w.ok = false
		}
		return
	}
}

func (w *windowSource) less(o *windowSource) bool {
	if w.kg != o.kg {
		return w.kg < o.kg
	}
	return bytes.Compare(w.key, o.key) < 0
}

// coldWindow emits a cold window's rows a chunk at a time.
type coldWindow struct {
	a          *Aggregator
	start, end int64
	srcs       []*windowSource
	tab        *GroupTable
	done       bool
}

// WindowChunks builds the rows of window w (start w) as it stands now, a
// chunk at a time when any of its slices is cold: first is the first
// chunk (nil when the window is empty), more yields the next (nil at the
// end; nil more: first is all). Chunks come in (key group, key) order.
func (a *Aggregator) WindowChunks(w int64) (first *Batch, more func() (*Batch, error), err error) {
	// Held rows (blindrows.go) are only ever of cold windows, and every
	// read of a cold window comes here: they are written out first, to be
	// read as stored partials.
	if err := a.settle(); err != nil {
		return nil, nil, err
	}
	spec := a.Window
	cold := false
	sl := []int64{w}
	if a.emitTab != nil {
		sl = spec.SlicesOfWindow(w)
	}
	for _, s := range sl {
		cold = cold || a.cold[s]
	}
	if !cold {
		b, err := a.EmitWindow(w)
		return b, nil, err
	}
	tab, err := a.newTable()
	if err != nil {
		return nil, nil, err
	}
	cw := &coldWindow{a: a, start: w, end: w + spec.Size, tab: tab}
	for _, s := range sl {
		cw.srcs = append(cw.srcs, a.newWindowSource(s), a.newDeltaSource(s))
	}
	first, err = cw.next()
	if err != nil || first == nil {
		return nil, nil, err
	}
	return first, cw.next, nil
}

// next merges up to chunkRows groups across the window's slices and emits
// them; nil at the end, when the store cursors are closed.
func (cw *coldWindow) next() (*Batch, error) {
	if cw.done {
		return nil, nil
	}
	t := cw.tab
	var slots []uint32
	for len(slots) < chunkRows {
		var lo *windowSource
		for _, s := range cw.srcs {
			if s.ok && (lo == nil || s.less(lo)) {
				lo = s
			}
		}
		if lo == nil {
			break
		}
		kg := lo.kg
		dst := t.AppendSlot(cw.start, lo.key, kg)
		key := t.Key(dst) // lo's own is overwritten as it moves on
		slots = append(slots, dst)
		for _, s := range cw.srcs {
			for s.ok && s.kg == kg && bytes.Equal(s.key, key) {
				if err := t.Merge(dst, s.enc); err != nil {
					return nil, cw.close(err)
				}
				s.next()
			}
		}
	}
	if len(slots) == 0 {
		cw.done = true
		return nil, cw.close(nil)
	}
	b, err := cw.a.emit(t, slots, cw.start, cw.end)
	t.CloseWindow(cw.start)
	if err != nil {
		return nil, cw.close(err)
	}
	return b, nil
}

func (cw *coldWindow) close(err error) error {
	cw.done = true
	for _, s := range cw.srcs {
		if cerr := s.cur.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// PendingChanges emits an unwindowed aggregation's groups that changed and
// were evicted since the last commit (they are in the store's pending
// writes, given by each), skipping those back in memory (their hot slot is
// newer and is emitted with the dirty ones).
func (a *Aggregator) PendingChanges(each func(fn func(kg uint16, key, val []byte) error) error) (*Batch, error) {
	tab, err := a.newTable()
	if err != nil {
		return nil, err
	}
	var slots []uint32
	err = each(func(kg uint16, key, val []byte) error {
		if _, hot := a.Table.find(NoWindow, key); hot {
			return nil
		}
		s := tab.Slot(NoWindow, slices.Clone(key), kg)
		slots = append(slots, s)
		return tab.Merge(s, val)
	})
	if err != nil || len(slots) == 0 {
		return nil, err
	}
	return a.emit(tab, slots, 0, 0)
}

// ExpireGroup forgets the unwindowed group key whose stored copy has
// expired (state_ttl), unless it changed since the last commit (then it
// is not expired: the commit stores it anew). It reports whether the
// group expired.
func (a *Aggregator) ExpireGroup(key []byte) bool {
	s, hot := a.Table.find(NoWindow, key)
	if !hot {
		return true
	}
	if a.Table.marked[s] {
		return false
	}
	a.Table.evict(s)
	return true
}

// KeyColumns decodes encoded group keys into the key columns of a batch
// (the keys of groups with no rows to emit: expired ones).
func (a *Aggregator) KeyColumns(keys [][]byte) (*Batch, error) {
	out := &Batch{N: len(keys), Cols: make([]*Vec, len(a.KeyTypes))}
	for j, kt := range a.KeyTypes {
		out.Cols[j] = newVec(kt, len(keys))
	}
	for i, k := range keys {
		if err := DecodeKeyInto(k, a.KeyTypes, out.Cols, i); err != nil {
			return nil, err
		}
	}
	return out, nil
}
