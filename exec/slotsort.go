package exec

import (
	"bytes"
	stdcmp "cmp"
	"encoding/binary"
	"slices"
)

// sortedSlots is g's slots sorted by (key group, key): the
// order a cold window's close merges its hot groups with its stored ones
// (windowSource). The slots are first distributed by key group with one
// counting pass, then each key group's slots are
// sorted by their keys' first 16 bytes (msdSort, on records small enough
// for the CPU's cache), longer keys sharing them among themselves. A
// comparison sort over the whole window compared keys in the arena, a
// cache miss per comparison: at 10^7 keys with a 1 GB cache it was a
// quarter of the close.
func (t *GroupTable) sortedSlots(g *windowGroups) []uint32 {
	slots := make([]uint32, len(g.slots))
	if len(slots) < 1<<12 {
		copy(slots, g.slots)
		slices.SortFunc(slots, func(x, y uint32) int { return t.compareSlots(g, x, y) })
		return slots
	}
	counts := make([]uint32, 1<<16+1)
	for _, s := range g.slots {
		counts[int(t.meta[s].KG)+1]++
	}
	for b := 1; b < len(counts); b++ {
		counts[b] += counts[b-1]
	}
	next := slices.Clone(counts[:1<<16])
	for _, s := range g.slots {
		kg := t.meta[s].KG
		slots[next[kg]] = s
		next[kg]++
	}
	var recs []keyRec
	for b := range 1 << 16 {
		lo, hi := counts[b], counts[b+1]
		if hi-lo < 2 {
			continue
		}
		part := slots[lo:hi]
		if len(part) > maxRadixGroup {
			// One key group holds most of the window (a task owning one,
			// or no partition key): its records would take 48 bytes a
			// slot beyond the cache's count; compared, they take none.
			slices.SortFunc(part, func(x, y uint32) int { return t.compareSlots(g, x, y) })
			continue
		}
		recs = slices.Grow(recs[:0], 2*len(part))[:2*len(part)]
		src, scratch := recs[:len(part)], recs[len(part):]
		long := false
		for i, s := range part {
			m := &t.meta[s]
			var pre [16]byte
			copy(pre[:], m.key(g.arena))
			src[i] = keyRec{w: [2]uint64{binary.BigEndian.Uint64(pre[:8]), binary.BigEndian.Uint64(pre[8:])}, i: s}
			long = long || m.klen > 16
		}
		msdSort(src, scratch, 0)
		if long {
			sortTies(src, func(x, y keyRec) int { return t.compareSlots(g, x.i, y.i) })
		}
		for i := range src {
			part[i] = src[i].i
		}
	}
	return slots
}

// maxRadixGroup is the most slots of one key group sortedSlots sorts by
// radix: their records take 48 bytes each, 3 MB at most.
const maxRadixGroup = 1 << 16

// compareSlots orders two slots of window group g by (key group, key).
func (t *GroupTable) compareSlots(g *windowGroups, x, y uint32) int {
	mx, my := &t.meta[x], &t.meta[y]
	if c := stdcmp.Compare(mx.KG, my.KG); c != 0 {
		return c
	}
	return bytes.Compare(mx.key(g.arena), my.key(g.arena))
}
