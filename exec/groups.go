package exec

import (
	"encoding/binary"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/turbinesql/turbinesql/agg"
)

// GroupTable is the hash aggregation state of a windowed GROUP BY: one slot
// per (window, group key), each slot one entry in every aggregate's column
// of accumulators. Slots of closed windows are recycled.
type GroupTable struct {
	Aggs     []agg.Func
	index    map[string]uint32 // window start (8 bytes) + encoded key → slot
	meta     []SlotMeta
	free     []uint32
	byWindow map[int64][]uint32
	dirty    []uint32 // slots marked Dirty, so a commit does not scan them all
}

// SlotMeta describes what a slot holds.
type SlotMeta struct {
	Window int64  // window start, millis
	Key    string // encoded group key (AppendKey)
	KG     uint16 // key group of the partition key
	Dirty  bool   // changed since the last commit
	live   bool
}

// NewGroupTable builds an empty table over aggs.
func NewGroupTable(aggs []agg.Func) *GroupTable {
	return &GroupTable{Aggs: aggs, index: map[string]uint32{}, byWindow: map[int64][]uint32{}}
}

// Len is the number of live slots.
func (t *GroupTable) Len() int { return len(t.index) }

// Slot returns the slot of (window, key), creating an empty one.
func (t *GroupTable) Slot(window int64, key []byte, kg uint16, scratch []byte) (uint32, []byte) {
	scratch = indexKey(scratch, window, key)
	if s, ok := t.index[string(scratch)]; ok {
		return s, scratch
	}
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
		for _, a := range t.Aggs {
			a.Grow(len(t.meta))
		}
	}
	t.meta[s] = SlotMeta{Window: window, Key: string(key), KG: kg, live: true}
	t.index[string(scratch)] = s
	t.byWindow[window] = append(t.byWindow[window], s)
	return s, scratch
}

// Meta returns a slot's description.
func (t *GroupTable) Meta(s uint32) *SlotMeta { return &t.meta[s] }

// Update folds a batch into the slots: row i goes to slots[i]; args[j] are
// aggregate j's argument columns.
func (t *GroupTable) Update(slots []uint32, args [][]arrow.Array) {
	for j, a := range t.Aggs {
		a.Update(slots, args[j])
	}
	for _, s := range slots {
		if !t.meta[s].Dirty {
			t.meta[s].Dirty = true
			t.dirty = append(t.dirty, s)
		}
	}
}

// indexKey is the index key of (window, key): the window start big-endian,
// then the encoded group key.
func indexKey[K string | []byte](dst []byte, window int64, key K) []byte {
	dst = binary.BigEndian.AppendUint64(dst[:0], uint64(window))
	return append(dst, key...)
}

// Encode appends every aggregate's accumulator of slot s.
func (t *GroupTable) Encode(dst []byte, s uint32) []byte {
	for _, a := range t.Aggs {
		enc := a.Encode(nil, s)
		dst = appendLen(dst, enc)
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
	for w := range t.byWindow {
		if w+size <= wm {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// WindowSlots lists the slots of one window, ordered by key for a stable output.
func (t *GroupTable) WindowSlots(w int64) []uint32 {
	ss := append([]uint32(nil), t.byWindow[w]...)
	sort.Slice(ss, func(i, j int) bool { return t.meta[ss[i]].Key < t.meta[ss[j]].Key })
	return ss
}

// CloseWindow forgets every slot of window w, recycling them.
func (t *GroupTable) CloseWindow(w int64) {
	var scratch []byte
	for _, s := range t.byWindow[w] {
		m := &t.meta[s]
		scratch = indexKey(scratch, w, m.Key)
		delete(t.index, string(scratch))
		m.live = false
		t.free = append(t.free, s)
	}
	delete(t.byWindow, w)
}

// Dirty lists the live slots changed since the last call, and clears the
// marks. A slot closed (and perhaps reused) since it was marked is listed
// only if it is live and marked again.
func (t *GroupTable) Dirty() []uint32 {
	out := make([]uint32, 0, len(t.dirty))
	for _, s := range t.dirty {
		if m := &t.meta[s]; m.live && m.Dirty {
			out = append(out, s)
			m.Dirty = false
		}
	}
	t.dirty = t.dirty[:0]
	return out
}

// AllSlots lists every live slot ordered by window then key (a bounded
// query emits them all at the end).
func (t *GroupTable) AllSlots() []uint32 {
	ws := make([]int64, 0, len(t.byWindow))
	for w := range t.byWindow {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
	var out []uint32
	for _, w := range ws {
		out = append(out, t.WindowSlots(w)...)
	}
	return out
}
