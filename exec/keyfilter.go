package exec

import (
	"hash/maphash"
	"math/bits"
)

// keyFilter is a Bloom filter of the keys a window lost to the store
// during this run: a group of that window whose key the filter does not
// hold was never stored, so a miss on it needs no read (a window that
// went cold at start, restored lazily, has none: any key may be stored).
// It grows by adding segments, each twice the last, so it needs no size
// up front; ~10 bits a key, 4 probes: ~1-2% false positives, each costing
// one read that finds nothing.
type keyFilter struct {
	segs []filterSeg
}

type filterSeg struct {
	bits []uint64
	n    int // keys added
	max  int // keys it is sized for
}

const filterFirstKeys = 1 << 14

func (f *keyFilter) add(key []byte) {
	if len(f.segs) == 0 || f.segs[len(f.segs)-1].n >= f.segs[len(f.segs)-1].max {
		keys := filterFirstKeys << len(f.segs)
		f.segs = append(f.segs, filterSeg{bits: make([]uint64, keys*10/64), max: keys})
	}
	s := &f.segs[len(f.segs)-1]
	h := maphash.Bytes(hashSeed, key)
	m := uint64(len(s.bits) * 64)
	a, b := h, bits.RotateLeft64(h, 32)|1
	for i := 0; i < 4; i++ {
		p := (a + uint64(i)*b) % m
		s.bits[p/64] |= 1 << (p % 64)
	}
	s.n++
}

func (f *keyFilter) mayHold(key []byte) bool {
	h := maphash.Bytes(hashSeed, key)
	a, b := h, bits.RotateLeft64(h, 32)|1
	for _, s := range f.segs {
		m := uint64(len(s.bits) * 64)
		hit := true
		for i := 0; i < 4 && hit; i++ {
			p := (a + uint64(i)*b) % m
			hit = s.bits[p/64]&(1<<(p%64)) != 0
		}
		if hit {
			return true
		}
	}
	return false
}

func (f *keyFilter) bytes() int {
	n := 0
	for _, s := range f.segs {
		n += len(s.bits) * 8
	}
	return n
}
