package agg

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/cespare/xxhash/v2"

	"github.com/turbinesql/turbinesql/types"
)

// hll is APPROX_COUNT_DISTINCT(x): a HyperLogLog sketch per slot, precision
// 14 (16384 registers), standard error 1.04/sqrt(16384) ≈ 0.81% of the true
// count over the whole range (Ertl's estimator, below). NULLs are ignored;
// no row gives 0, like COUNT. Values are equal as in COUNT(DISTINCT): -0 and
// +0 are one value, all NaNs are one.
//
// Why not a library: the candidates switch between sparse and dense forms
// at points that depend on insertion history, so the same set of values
// could encode differently, and estimate differently, under a local plan
// and under a combine plan. Here the registers are a function of the set
// of values alone (each is a max), the in-memory form and the encoding are
// chosen from the registers alone, and the estimate reads the registers
// alone: merged and single-stage results are equal bit for bit, whatever
// the order of rows, batches and partials.
//
// The hash is part of the encoding (state persists sketches, and partials
// cross the combine hop): XXH64 with seed 0 of the 8-byte little-endian
// order key for non-text values, of the UTF-8 bytes for text. Changing it
// needs a new encoding version.
type hll struct {
	typ    types.Type
	sparse [][]uint32 // per slot while few registers are set: idx<<8 | rho, sorted by idx
	dense  [][]uint8  // per slot once more are: hllM registers

	hashes []uint64 // scratch, reused across batches
	ks     []uint64
	ss     []string
}

const (
	hllP = 14
	hllM = 1 << hllP
	hllQ = 64 - hllP // bits left for rho; a register holds 0..hllQ+1
	// hllSparseMax is the number of set registers past which a slot goes
	// dense. A sparse entry takes 4 bytes in memory against 1 per dense
	// register; 1024 entries (4 KiB) also bound the cost of keeping the list
	// sorted by insertion.
	hllSparseMax = 1024
)

func (h *hll) Grow(n int)             { h.sparse, h.dense = growSlice(h.sparse, n), growSlice(h.dense, n) }
func (h *hll) Reset(slot uint32)      { h.sparse[slot], h.dense[slot] = nil, nil }
func (h *hll) ResultType() types.Type { return types.Int }
func (h *hll) Mergeable() bool        { return true }

func (h *hll) Update(slots []uint32, args []arrow.Array) {
	v, none := validOf(args[0])
	if none {
		return
	}
	hs := h.hash(args[0])
	for i, sl := range slots {
		if v.ok(i) {
			x := hs[i]
			// Top hllP bits pick the register; rho is the position of the
			// first 1 in the rest. The sentinel bit caps rho at hllQ+1.
			h.insert(sl, uint32(x>>hllQ), uint8(bits.LeadingZeros64(x<<hllP|1<<(hllP-1))+1))
		}
	}
}

// hash hashes a column (see the type comment for the definition).
func (h *hll) hash(a arrow.Array) []uint64 {
	h.hashes = growSlice(h.hashes[:0], a.Len())
	if h.typ == types.Text {
		for i, s := range strs(a, &h.ss) {
			h.hashes[i] = xxhash.Sum64String(s)
		}
		return h.hashes
	}
	for i, k := range keys(a, true, &h.ks) {
		h.hashes[i] = xxh64Uint64(k)
	}
	return h.hashes
}

// xxh64Uint64 is XXH64 (seed 0) of the 8 little-endian bytes of v, the
// same value as xxhash.Sum64 of them without building a slice per row.
func xxh64Uint64(v uint64) uint64 {
	const (
		p1 = 0x9E3779B185EBCA87
		p2 = 0xC2B2AE3D27D4EB4F
		p3 = 0x165667B19E3779F9
		p4 = 0x85EBCA77C2B2AE63
		p5 = 0x27D4EB2F165667C5
	)
	h := uint64(p5 + 8)
	h ^= bits.RotateLeft64(v*p2, 31) * p1
	h = bits.RotateLeft64(h, 27)*p1 + p4
	h ^= h >> 33
	h *= p2
	h ^= h >> 29
	h *= p3
	h ^= h >> 32
	return h
}

func (h *hll) insert(slot, idx uint32, rho uint8) {
	if d := h.dense[slot]; d != nil {
		d[idx] = max(d[idx], rho)
		return
	}
	sp := h.sparse[slot]
	// Binary search by hand: slices.BinarySearchFunc's callback is not
	// inlined and dominated the per-row cost.
	i, j := 0, len(sp)
	for i < j {
		m := int(uint(i+j) >> 1)
		if sp[m]>>8 < idx {
			i = m + 1
		} else {
			j = m
		}
	}
	if i < len(sp) && sp[i]>>8 == idx {
		if uint8(sp[i]) < rho {
			sp[i] = idx<<8 | uint32(rho)
		}
		return
	}
	sp = slices.Insert(sp, i, idx<<8|uint32(rho))
	if len(sp) <= hllSparseMax {
		h.sparse[slot] = sp
		return
	}
	d := make([]uint8, hllM)
	for _, e := range sp {
		d[e>>8] = uint8(e)
	}
	h.sparse[slot], h.dense[slot] = nil, d
}

// registers returns the histogram of register values, all the estimator
// needs, and how many registers are set.
func (h *hll) registers(slot uint32) (hist [hllQ + 2]int, set int) {
	if d := h.dense[slot]; d != nil {
		for _, r := range d {
			hist[r]++
		}
	} else {
		for _, e := range h.sparse[slot] {
			hist[uint8(e)]++
		}
		hist[0] += hllM - len(h.sparse[slot])
	}
	return hist, hllM - hist[0]
}

// Result is Ertl's improved raw estimator ("New cardinality estimation
// algorithms for HyperLogLog sketches", 2017, algorithm 6). It needs no
// bias tables or range switches: it is as good as linear counting for small
// sets and as plain HyperLogLog for large ones.
func (h *hll) Result(slot uint32) any {
	hist, set := h.registers(slot)
	if set == 0 {
		return int64(0)
	}
	const m = float64(hllM)
	z := m * hllTau(1-float64(hist[hllQ+1])/m)
	for k := hllQ; k >= 1; k-- {
		z = 0.5 * (z + float64(hist[k]))
	}
	z += m * hllSigma(float64(hist[0])/m)
	return int64(math.Round(m * m / (2 * math.Ln2) / z))
}

func hllSigma(x float64) float64 {
	if x == 1 {
		return math.Inf(1)
	}
	y, z := 1.0, x
	for {
		x *= x
		prev := z
		z += x * y
		y += y
		if z == prev {
			return z
		}
	}
}

func hllTau(x float64) float64 {
	if x == 0 || x == 1 {
		return 0
	}
	y, z := 1.0, 1-x
	for {
		x = math.Sqrt(x)
		prev := z
		y *= 0.5
		z -= (1 - x) * (1 - x) * y
		if z == prev {
			return z / 3
		}
	}
}

// Encoding: a form byte, then
//
//	0 (sparse): the number of set registers, then for each in index order
//	  the uvarint difference from the previous index (the first from 0)
//	  and the register value;
//	1 (dense): all hllM registers, 6 bits each, four to three bytes
//	  (r0 | r1<<6 | r2<<12 | r3<<18, little-endian).
//
// The form follows from the number of set registers alone, so equal
// sketches encode to equal bytes.
const hllDenseBytes = hllM / 4 * 3

func (h *hll) Encode(dst []byte, slot uint32) []byte {
	dst = append(dst, encV1)
	if d := h.dense[slot]; d != nil {
		dst = append(dst, 1)
		for i := 0; i < hllM; i += 4 {
			w := uint32(d[i]) | uint32(d[i+1])<<6 | uint32(d[i+2])<<12 | uint32(d[i+3])<<18
			dst = append(dst, byte(w), byte(w>>8), byte(w>>16))
		}
		return dst
	}
	sp := h.sparse[slot]
	dst = binary.AppendUvarint(append(dst, 0), uint64(len(sp)))
	prev := uint32(0)
	for _, e := range sp {
		dst = binary.AppendUvarint(dst, uint64(e>>8-prev))
		dst = append(dst, byte(e))
		prev = e >> 8
	}
	return dst
}

func (h *hll) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil || len(b) < 1 {
		return errCorrupt
	}
	form, b := b[0], b[1:]
	switch form {
	case 1:
		if len(b) != hllDenseBytes {
			return errCorrupt
		}
		for i := 0; i < hllM; i += 4 {
			j := i / 4 * 3
			w := uint32(b[j]) | uint32(b[j+1])<<8 | uint32(b[j+2])<<16
			for k := range 4 {
				if r := uint8(w >> (6 * k) & 63); r != 0 {
					if r > hllQ+1 {
						return errCorrupt
					}
					h.insert(slot, uint32(i+k), r)
				}
			}
		}
		return nil
	case 0:
		n, k := binary.Uvarint(b)
		if k <= 0 || n > hllM {
			return errCorrupt
		}
		b = b[k:]
		idx := uint64(0)
		for e := range n {
			d, k := binary.Uvarint(b)
			if k <= 0 || len(b) < k+1 || (e > 0 && d == 0) {
				return errCorrupt
			}
			idx += d
			r := b[k]
			if idx >= hllM || r == 0 || r > hllQ+1 {
				return errCorrupt
			}
			h.insert(slot, uint32(idx), r)
			b = b[k+1:]
		}
		return nil
	}
	return errCorrupt
}
