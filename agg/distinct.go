package agg

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/turbinesql/turbinesql/types"
)

// distinct is AGG(DISTINCT x) for COUNT, SUM, AVG and the variance family:
// each slot keeps the set of distinct non-NULL values, merged by set union.
// COUNT(DISTINCT x) is the set's size; the others run the plain aggregate
// over the set, in ascending order, when the result is asked for. Feeding
// it sorted makes even SUM(DISTINCT double) independent of arrival order and
// of how partials were merged.
//
// Equality is SQL's: -0 and +0 are one value, and so are all NaNs (as in
// PostgreSQL, where NaN = NaN for sorting and grouping). The set is exact,
// so memory grows with the number of distinct values per group and window;
// APPROX_COUNT_DISTINCT is the bounded alternative.
type distinct struct {
	typ   types.Type
	ks    []map[uint64]struct{} // non-text values, as order keys
	ss    []map[string]struct{} // text values
	inner Func                  // nil: COUNT; else a one-slot plain aggregate

	kbuf  []uint64 // scratch, reused across batches
	sbuf  []string
	zeros []uint32
}

func newDistinct(t types.Type, inner Func) *distinct {
	if inner != nil {
		inner.Grow(1)
	}
	return &distinct{typ: t, inner: inner}
}

func (d *distinct) text() bool { return d.typ == types.Text }

func (d *distinct) Grow(n int) {
	if d.text() {
		d.ss = growSlice(d.ss, n)
	} else {
		d.ks = growSlice(d.ks, n)
	}
}

// Reset drops the slot's set rather than clearing it: a recycled slot
// should not keep the memory of a large set from an earlier window.
func (d *distinct) Reset(slot uint32) {
	if d.text() {
		d.ss[slot] = nil
	} else {
		d.ks[slot] = nil
	}
}

func (d *distinct) ResultType() types.Type {
	if d.inner == nil {
		return types.Int
	}
	return d.inner.ResultType()
}

func (d *distinct) Mergeable() bool { return true }

func (d *distinct) Update(slots []uint32, args []arrow.Array) {
	v, none := validOf(args[0])
	if none {
		return
	}
	if d.text() {
		vals := strs(args[0], &d.sbuf)
		for i, sl := range slots {
			if v.ok(i) {
				d.addText(sl, vals[i], true)
			}
		}
		return
	}
	vals := keys(args[0], true, &d.kbuf)
	for i, sl := range slots {
		if v.ok(i) {
			d.addKey(sl, vals[i])
		}
	}
}

func (d *distinct) addKey(slot uint32, k uint64) {
	m := d.ks[slot]
	if m == nil {
		m = map[uint64]struct{}{}
		d.ks[slot] = m
	}
	m[k] = struct{}{}
}

// addText adds s; alias says s points into Arrow memory and must be cloned
// if kept.
func (d *distinct) addText(slot uint32, s string, alias bool) {
	m := d.ss[slot]
	if m == nil {
		m = map[string]struct{}{}
		d.ss[slot] = m
	}
	if _, ok := m[s]; !ok {
		if alias {
			s = strings.Clone(s)
		}
		m[s] = struct{}{}
	}
}

// sorted returns the slot's set in ascending order.
func (d *distinct) sorted(slot uint32) ([]uint64, []string) {
	if d.text() {
		ss := make([]string, 0, len(d.ss[slot]))
		for s := range d.ss[slot] {
			ss = append(ss, s)
		}
		slices.Sort(ss)
		return nil, ss
	}
	ks := make([]uint64, 0, len(d.ks[slot]))
	for k := range d.ks[slot] {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks, nil
}

func (d *distinct) Result(slot uint32) any {
	if d.inner == nil {
		if d.text() {
			return int64(len(d.ss[slot]))
		}
		return int64(len(d.ks[slot]))
	}
	ks, ss := d.sorted(slot)
	col := keysArray(d.typ, ks, ss)
	defer col.Release()
	d.zeros = growSlice(d.zeros[:0], col.Len())
	clear(d.zeros)
	d.inner.Reset(0)
	d.inner.Update(d.zeros, []arrow.Array{col})
	return d.inner.Result(0)
}

// Encode writes the set sorted, so equal sets encode to equal bytes: the
// count, then each key as the uvarint difference from the previous one
// (the first from 0), or each string length-prefixed.
func (d *distinct) Encode(dst []byte, slot uint32) []byte {
	ks, ss := d.sorted(slot)
	dst = append(dst, encV1)
	if d.text() {
		dst = binary.AppendUvarint(dst, uint64(len(ss)))
		for _, s := range ss {
			dst = binary.AppendUvarint(dst, uint64(len(s)))
			dst = append(dst, s...)
		}
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(len(ks)))
	prev := uint64(0)
	for _, k := range ks {
		dst = binary.AppendUvarint(dst, k-prev)
		prev = k
	}
	return dst
}

func (d *distinct) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil {
		return err
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) { // every element takes at least a byte
		return errCorrupt
	}
	b = b[k:]
	prev := uint64(0)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 {
			return errCorrupt
		}
		b = b[k:]
		if d.text() {
			if uint64(len(b)) < l {
				return errCorrupt
			}
			d.addText(slot, string(b[:l]), false)
			b = b[l:]
			continue
		}
		prev += l
		d.addKey(slot, prev)
	}
	return nil
}
