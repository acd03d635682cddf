package exec

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"slices"
)

// keyTable maps encoded group keys to slots: open addressing with linear
// probing over a power-of-two array of entries. A key of up to 16 bytes
// (any single number, a short text, most composite keys) is held inline in
// its entry, so a probe compares two words in the cache line it already
// loaded; a longer key is confirmed against the window's key arena. Entries
// are never deleted one by one: a whole table goes when its window closes.
type keyTable struct {
	entries []keyEntry
	n       int
}

type keyEntry struct {
	hash   uint64
	w0, w1 uint64 // the key's first 16 bytes, zero-padded
	slot   uint32 // slot + 1; 0 marks an empty entry
	klen   uint32
}

const (
	keyTableMinSize = 64
	inlineKey       = 16
)

var hashSeed = maphash.MakeSeed()

// probeKey is a key prepared for probing: its hash and inline words. A key
// of at most inlineKey bytes is entirely in (w0, w1, klen).
type probeKey struct {
	hash   uint64
	w0, w1 uint64
	klen   uint32
}

// bytes returns an inline key's encoded bytes.
func (p *probeKey) bytes() []byte {
	var buf [inlineKey]byte
	binary.LittleEndian.PutUint64(buf[:8], p.w0)
	binary.LittleEndian.PutUint64(buf[8:], p.w1)
	return buf[:p.klen]
}

func makeProbeKey(key []byte) probeKey {
	p := probeKey{klen: uint32(len(key))}
	if len(key) > inlineKey {
		p.hash = maphash.Bytes(hashSeed, key)
		p.w0 = binary.LittleEndian.Uint64(key)
		p.w1 = binary.LittleEndian.Uint64(key[8:])
		return p
	}
	var buf [inlineKey]byte
	copy(buf[:], key)
	p.w0 = binary.LittleEndian.Uint64(buf[:8])
	p.w1 = binary.LittleEndian.Uint64(buf[8:])
	p.hash = inlineHash(p.w0, p.w1, p.klen)
	return p
}

// probeShortTexts is probeRows for a single TEXT key column whose values
// are all short enough (len <= inlineKey-2) to be inline: the encoding is
// a tag byte 1, the length as one uvarint byte, then the bytes, so the
// words are built from the string without encoding it first. ok is false
// when some value is too long; the caller then encodes the rows.
func probeShortTexts(dst []probeKey, v *Vec, n int) (_ []probeKey, ok bool) {
	dst = slices.Grow(dst[:0], n)[:n]
	var buf [inlineKey]byte
	buf[0] = 1
	for i, x := range v.S[:n] {
		if len(x) > inlineKey-2 {
			return dst, false
		}
		buf[1] = byte(len(x))
		clear(buf[2+copy(buf[2:], x):])
		w0 := binary.LittleEndian.Uint64(buf[:8])
		w1 := binary.LittleEndian.Uint64(buf[8:])
		klen := uint32(2 + len(x))
		dst[i] = probeKey{hash: inlineHash(w0, w1, klen), w0: w0, w1: w1, klen: klen}
	}
	if v.Null != nil {
		for i, null := range v.Null[:n] {
			if null {
				dst[i] = probeKey{hash: inlineHash(0, 0, 1), klen: 1}
			}
		}
	}
	return dst, true
}

func inlineHash(w0, w1 uint64, klen uint32) uint64 {
	return mix(w0^uint64(klen)*0x9E3779B97F4A7C15, w1^0xA0761D6478BD642F)
}

// probeRows prepares the probe key of every row of rk.
func probeRows(dst []probeKey, rk *RowKeys, n int) []probeKey {
	dst = slices.Grow(dst[:0], n)[:n]
	for i := range dst {
		dst[i] = makeProbeKey(rk.Row(i))
	}
	return dst
}

// probeInts is probeRows for a single BIGINT or TIMESTAMP key column,
// computed from the integers without encoding them: the encoding is a tag
// byte 1 then the value big-endian (0 alone for NULL), so the inline words
// follow from the value directly and equal what makeProbeKey gives.
func probeInts(dst []probeKey, v *Vec, n int) []probeKey {
	dst = slices.Grow(dst[:0], n)[:n]
	for i, x := range v.I[:n] {
		w0 := 1 | bits.ReverseBytes64(uint64(x))<<8
		w1 := uint64(x) & 0xff
		dst[i] = probeKey{hash: inlineHash(w0, w1, 9), w0: w0, w1: w1, klen: 9}
	}
	if v.Null != nil {
		for i, null := range v.Null[:n] {
			if null {
				dst[i] = probeKey{hash: inlineHash(0, 0, 1), klen: 1}
			}
		}
	}
	return dst
}

// mix is a 128→64-bit mixer (the wyhash folding multiply): cheap, and good
// enough that linear probing over its low bits stays short.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a^0xE7037ED1A0B428DB, b^0x8EBC6AF09C88C6E3)
	return hi ^ lo
}

// find returns the slot of key, or the entry index where it would go. A
// key longer than inlineKey is confirmed against arena, where meta says the
// slot's key is.
func (t *keyTable) find(p *probeKey, key, arena []byte, meta []SlotMeta) (slot uint32, at int, ok bool) {
	if t.entries == nil {
		t.entries = make([]keyEntry, keyTableMinSize)
	}
	mask := len(t.entries) - 1
	for i := int(p.hash) & mask; ; i = (i + 1) & mask {
		e := &t.entries[i]
		if e.slot == 0 {
			return 0, i, false
		}
		if e.hash == p.hash && e.w0 == p.w0 && e.w1 == p.w1 && e.klen == p.klen &&
			(p.klen <= inlineKey || string(meta[e.slot-1].key(arena)) == string(key)) {
			return e.slot - 1, i, true
		}
	}
}

// insert records slot at entry index at (from a failed find), growing the
// table when it gets three-quarters full.
func (t *keyTable) insert(at int, p *probeKey, slot uint32) {
	t.entries[at] = keyEntry{hash: p.hash, w0: p.w0, w1: p.w1, slot: slot + 1, klen: p.klen}
	t.n++
	if t.n*4 >= len(t.entries)*3 {
		t.grow()
	}
}

func (t *keyTable) grow() {
	old := t.entries
	t.entries = make([]keyEntry, 2*len(old))
	mask := len(t.entries) - 1
	for _, e := range old {
		if e.slot == 0 {
			continue
		}
		i := int(e.hash) & mask
		for t.entries[i].slot != 0 {
			i = (i + 1) & mask
		}
		t.entries[i] = e
	}
}
