package state

import (
	"encoding/binary"
)

// A group delta is a partial accumulator of a cached aggregation's group,
// written without reading what the store holds of the group (a blind
// write): the group is the merge of its stored accumulator (if any) and
// all its deltas. A group has any number of deltas, each its own key, so
// writing one never needs a read and each is a plain Set: the changelog
// (a compacted topic, one value per key) carries every one, and a range
// deletion of the window removes them with the groups.
//
// A delta lives beside its group, under the same window, with the key
// group's top bit set (the NULL key's group, 0xFFFF, has its deltas
// under 0xFFFE), followed by the group key and the delta's id: a window's
// deltas are one contiguous range after its groups, in (key group, key)
// order (group keys are self-delimiting, so the id never reorders them),
// and no real key group (< 960, or 0xFFFF) is ever mistaken for one.
const (
	deltaKGBit  = 0x8000
	nullDeltaKG = NullGroup - 1
	deltaIDLen  = 16
)

// DeltaID names one delta of a group. Gen and Seq together must never
// repeat among a group's deltas while they are stored: a cached
// aggregation takes Gen from the input offset it restarted at and counts
// Seq from 0 (see dataflow's groupCache).
type DeltaID struct{ Gen, Seq uint64 }

// deltaKG is where the deltas of key group kg are stored.
func deltaKG(kg uint16) uint16 {
	if kg == NullGroup {
		return nullDeltaKG
	}
	return kg | deltaKGBit
}

// isDeltaKG reports whether a stored key group holds deltas.
func isDeltaKG(stored uint16) bool { return stored >= deltaKGBit && stored != NullGroup }

// realKG is the key group whose deltas stored holds (stored itself when
// it is not a delta's).
func realKG(stored uint16) uint16 {
	switch {
	case stored == nullDeltaKG:
		return NullGroup
	case isDeltaKG(stored):
		return stored &^ deltaKGBit
	}
	return stored
}

func appendDeltaKey(dst []byte, stream string, window int64, kg uint16, key []byte, id DeltaID) []byte {
	return appendDeltaKeyID(appendGroupKey(dst, stream, window, deltaKG(kg), key), id)
}

func appendDeltaKeyID(dst []byte, id DeltaID) []byte {
	dst = binary.BigEndian.AppendUint64(dst, id.Gen)
	return binary.BigEndian.AppendUint64(dst, id.Seq)
}

// PutDelta records a delta of an evicted group, written with the next
// commit like the evicted groups.
func (p *Pending) PutDelta(window int64, kg uint16, key []byte, id DeltaID, val []byte) error {
	p.kbuf = appendDeltaKey(p.kbuf[:0], p.stream, window, kg, key, id)
	p.deltas++
	return p.b.Set(p.kbuf, val, nil)
}

// ScanDeltas is ScanWindow over the window's deltas: each comes with its
// group's key group and key (its id stripped), a group's deltas one after
// another, in (key group, key) order.
// The window's runs (runs.go) are merged in.
func (p *Pending) ScanDeltas(window int64, groups []uint16) *DeltaScan {
	return &DeltaScan{p: p, window: window, groups: groups}
}
