package exec

import (
	"sort"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/turbinesql/turbinesql/agg"
)

// GroupTable is the hash aggregation state of a GROUP BY: one slot per
// (window, group key), each slot one entry in every aggregate's column of
// accumulators. Each window has its own key table, so closing a window drops
// its table whole and recycles its slots, with no per-key deletion.
type GroupTable struct {
	Aggs    []agg.Func
	meta    []SlotMeta
	free    []uint32
	windows map[int64]*windowGroups
	live    int
	dirty   []uint32 // slots changed since the last commit, so a commit does not scan them all
	marked  []bool   // by slot: listed in dirty
	// ref is by slot: updated since the eviction clock last passed it
	// (cache.go).
	ref  []bool
	hand uint32 // the eviction clock's position

	// the window of the previous lookup: rows of a batch mostly share one
	lastW     int64
	lastGroup *windowGroups
}

// windowGroups is one window's groups. Their keys are appended to one arena
// rather than held as a string each, so a million groups are a few large
// allocations the garbage collector need not scan.
type windowGroups struct {
	keys  keyTable
	slots []uint32
	arena []byte
	// garbage is the arena bytes of evicted slots' keys (cache.go
	// compacts the arena when they dominate).
	garbage int
	// sampled and fresh count the window's rows, and those that made new
	// groups, since coolLarge last decided on it.
	sampled, fresh int
}

// SlotMeta describes what a slot holds. It has no pointers, for the same
// reason as the arena.
type SlotMeta struct {
	Window int64  // window start, millis
	KG     uint16 // key group of the partition key
	Stored bool   // its accumulator is in the state store (the caller keeps this)
	// Blind: created in a cold window without reading what the store
	// holds of the group; it holds only the rows since (cache.go).
	Blind bool
	live  bool
	off   uint32 // key bytes in the window's arena
	klen  uint32
	pos   uint32 // index in its window's slots
}

func (m *SlotMeta) key(arena []byte) []byte { return arena[m.off : m.off+m.klen] }

// NewGroupTable builds an empty table over aggs.
func NewGroupTable(aggs []agg.Func) *GroupTable {
	return &GroupTable{Aggs: aggs, windows: map[int64]*windowGroups{}}
}

// Len is the number of live slots.
func (t *GroupTable) Len() int { return t.live }

func (t *GroupTable) window(w int64) *windowGroups {
	if t.lastGroup != nil && t.lastW == w {
		return t.lastGroup
	}
	g := t.windows[w]
	if g == nil {
		g = &windowGroups{}
		t.windows[w] = g
	}
	t.lastW, t.lastGroup = w, g
	return g
}

// Lookup returns the slot of (window, key), creating an empty one (isNew)
// when there is none; the caller then sets its KG.
func (t *GroupTable) Lookup(window int64, key []byte) (slot uint32, isNew bool) {
	p := makeProbeKey(key)
	return t.lookup(window, &p, key)
}

// lookup is Lookup with the probe key prepared; key may be nil when the key
// is inline (p.klen <= inlineKey).
func (t *GroupTable) lookup(window int64, p *probeKey, key []byte) (slot uint32, isNew bool) {
	g := t.window(window)
	s, at, ok := g.keys.find(p, key, g.arena, t.meta)
	if ok {
		return s, false
	}
	if p.klen <= inlineKey {
		key = p.bytes()
	}
	s = t.newSlot(window, g, key)
	g.keys.insert(at, p, s)
	return s, true
}

// assign finds or creates the slot of every row: row i has window wins[i]
// (NoWindow when wins is empty) and probe key probes[i]; rows holds the
// encoded keys of rows whose key is not inline. It returns the rows that
// created a slot, for the caller to set their key groups. The probe loop
// is written out here, not a call per row: this is the grouper's inner
// loop.
func (t *GroupTable) assign(wins []int64, probes []probeKey, rows *RowKeys, slots []uint32) (newRows []int) {
	if len(probes) == 0 {
		return nil
	}
	w := NoWindow
	if len(wins) > 0 {
		w = wins[0]
	}
	g := t.window(w)
	for i := range probes {
		if len(wins) > 0 && wins[i] != w {
			w = wins[i]
			g = t.window(w)
		}
		p := &probes[i]
		if g.keys.entries == nil {
			g.keys.entries = make([]keyEntry, keyTableMinSize)
		}
		entries := g.keys.entries
		mask := len(entries) - 1
		j := int(p.hash) & mask
		for {
			e := &entries[j]
			if e.slot == 0 {
				var key []byte
				if p.klen > inlineKey {
					key = rows.Row(i)
				} else {
					key = p.bytes()
				}
				s := t.newSlot(w, g, key)
				g.keys.insert(j, p, s)
				slots[i] = s
				newRows = append(newRows, i)
				break
			}
			if e.hash == p.hash && e.w0 == p.w0 && e.w1 == p.w1 && e.klen == p.klen &&
				(p.klen <= inlineKey || string(t.meta[e.slot-1].key(g.arena)) == string(rows.Row(i))) {
				slots[i] = e.slot - 1
				break
			}
			j = (j + 1) & mask
		}
	}
	return newRows
}

// Slot is Lookup that also records the key group of a new slot.
func (t *GroupTable) Slot(window int64, key []byte, kg uint16) uint32 {
	s, isNew := t.Lookup(window, key)
	if isNew {
		t.meta[s].KG = kg
	}
	return s
}

// AppendSlot is a slot for the group (window, key), known to be new to
// the table, in key group kg: one of the window's slots (Key, CloseWindow)
// but not in its key table, so Lookup never finds it. A cold window's
// close, whose groups come once each in order, needs no hash table.
func (t *GroupTable) AppendSlot(window int64, key []byte, kg uint16) uint32 {
	s := t.newSlot(window, t.window(window), key)
	t.meta[s].KG = kg
	return s
}

func (t *GroupTable) newSlot(window int64, g *windowGroups, key []byte) uint32 {
	var s uint32
	if n := len(t.free); n > 0 {
		s = t.free[n-1]
		t.free = t.free[:n-1]
		for _, a := range t.Aggs {
			a.Reset(s)
		}
	} else {
		s = uint32(len(t.meta))
		t.meta = append(t.meta, SlotMeta{})
		t.marked = append(t.marked, false)
		t.ref = append(t.ref, false)
		for _, a := range t.Aggs {
			a.Grow(len(t.meta))
		}
	}
	t.meta[s] = SlotMeta{Window: window, live: true, off: uint32(len(g.arena)), klen: uint32(len(key)), pos: uint32(len(g.slots))}
	g.arena = append(g.arena, key...)
	g.slots = append(g.slots, s)
	t.live++
	return s
}

// allocBare returns a slot outside every key table (a session's: the
// caller keeps its key), empty and live.
func (t *GroupTable) allocBare(window int64) uint32 {
	s := t.newSlot(window, &windowGroups{}, nil)
	return s
}

// freeBare recycles a slot from allocBare.
func (t *GroupTable) freeBare(s uint32) {
	t.meta[s].live = false
	t.marked[s] = false
	t.free = append(t.free, s)
	t.live--
}

// markDirty flags s as changed since the last commit.
func (t *GroupTable) markDirty(s uint32) {
	t.ref[s] = true
	if !t.marked[s] {
		t.marked[s] = true
		t.dirty = append(t.dirty, s)
	}
}

// Meta returns a slot's description.
func (t *GroupTable) Meta(s uint32) *SlotMeta { return &t.meta[s] }

// Key returns the encoded group key (AppendKey's format) of a live slot.
// The bytes are the table's: valid until the slot's window closes.
func (t *GroupTable) Key(s uint32) []byte {
	m := &t.meta[s]
	return m.key(t.window(m.Window).arena)
}

// Update folds a batch into the slots: row i goes to slots[i]; args[j] are
// aggregate j's argument columns.
func (t *GroupTable) Update(slots []uint32, args [][]arrow.Array) {
	for j, a := range t.Aggs {
		a.Update(slots, args[j])
	}
	marked, ref := t.marked, t.ref
	for _, s := range slots {
		ref[s] = true
		if !marked[s] {
			marked[s] = true
			t.dirty = append(t.dirty, s)
		}
	}
}

// Encode appends every aggregate's accumulator of slot s.
func (t *GroupTable) Encode(dst []byte, s uint32) []byte {
	for _, a := range t.Aggs {
		dst = appendEncoded(dst, a, s)
	}
	return dst
}

// Merge folds an encoding written by Encode into slot s.
func (t *GroupTable) Merge(s uint32, enc []byte) error {
	for _, a := range t.Aggs {
		part, rest, err := readLen(enc)
		if err != nil {
			return err
		}
		if err := a.Merge(s, part); err != nil {
			return err
		}
		enc = rest
	}
	return nil
}

// DueWindows lists window starts whose end (start + size) is at or before
// wm, in ascending order.
func (t *GroupTable) DueWindows(wm, size int64) []int64 {
	var out []int64
	for w := range t.windows {
		if w+size <= wm {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// WindowSlots lists the slots of one window, ordered by key for a stable output.
func (t *GroupTable) WindowSlots(w int64) []uint32 {
	g := t.windows[w]
	if g == nil {
		return nil
	}
	ss := append([]uint32(nil), g.slots...)
	sort.Slice(ss, func(i, j int) bool {
		return string(t.meta[ss[i]].key(g.arena)) < string(t.meta[ss[j]].key(g.arena))
	})
	return ss
}

// CloseWindow forgets every slot of window w, recycling them.
func (t *GroupTable) CloseWindow(w int64) {
	g := t.windows[w]
	if g == nil {
		return
	}
	for _, s := range g.slots {
		t.meta[s].live = false
		t.marked[s] = false
		t.free = append(t.free, s)
	}
	t.live -= len(g.slots)
	delete(t.windows, w)
	if t.lastGroup == g {
		t.lastGroup = nil
	}
}

// Dirty lists the live slots changed since the last call, and clears the
// marks. A slot closed (and perhaps reused) since it was marked is listed
// only if it is live and marked again.
func (t *GroupTable) Dirty() []uint32 {
	out := make([]uint32, 0, len(t.dirty))
	for _, s := range t.dirty {
		if t.meta[s].live && t.marked[s] {
			out = append(out, s)
		}
		t.marked[s] = false
	}
	t.dirty = t.dirty[:0]
	return out
}

// PeekDirty lists the live slots changed since the last Dirty, without
// clearing the marks.
func (t *GroupTable) PeekDirty() []uint32 {
	out := make([]uint32, 0, len(t.dirty))
	for _, s := range t.dirty {
		// A slot evicted while listed and then reused is listed twice:
		// unmarking it on the way lists it once.
		if t.meta[s].live && t.marked[s] {
			out = append(out, s)
			t.marked[s] = false
		}
	}
	for _, s := range out {
		t.marked[s] = true
	}
	return out
}

// windowStarts lists the windows holding groups, ascending.
func (t *GroupTable) windowStarts() []int64 {
	ws := make([]int64, 0, len(t.windows))
	for w := range t.windows {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
	return ws
}

// CloseWindowSlot forgets one slot just created (a failed merge): its
// window goes when it holds nothing else.
func (t *GroupTable) CloseWindowSlot(s uint32) {
	w := t.meta[s].Window
	if g := t.windows[w]; g != nil && len(g.slots) == 1 && g.slots[0] == s {
		t.CloseWindow(w)
	}
}

// AllSlots lists every live slot ordered by window then key (a bounded
// query emits them all at the end).
func (t *GroupTable) AllSlots() []uint32 {
	ws := make([]int64, 0, len(t.windows))
	for w := range t.windows {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
	out := make([]uint32, 0, t.live)
	for _, w := range ws {
		out = append(out, t.WindowSlots(w)...)
	}
	return out
}
