package exec

import (
	"bytes"
	stdcmp "cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/types"
)

// This file is the cold path of an aggregation that writes blind (see
// UseStore). A row of a cold window does not go to the group table: it is
// appended as it came (window, key group, encoded key, the aggregates'
// arguments) and folded with the others when they are written (flushBlind,
// at the commit or before anything reads the window): sorted by group, one
// fresh slot per group in that order, one Update over all of them, and a
// partial per group, stored beside the window's other partials.
//
// Why: in a cold window most rows are keys not in memory (the window went
// cold because its keys did not fit). Through the table each such row
// cost a probe that missed the CPU cache in a table of hundreds of
// thousands of groups, a slot, an eviction and an encoding at the commit:
// at 10^7 keys, half the ingest's CPU. Appended, a row costs a copy; the
// sort and the fold then walk memory in order. The partials are the same
// ones the table would have written (a blind slot's rows since it was
// created), so nothing downstream changes: the close merges a group's
// partials, in memory or stored, as it always did.
//
// Bound: the rows held count in the task's cache share (BufferedBytes);
// past SetBufferLimit they are written to the store as evicted partials
// are (GroupStore.Evict), and the caller asks for a commit well before
// that (dataflow's Due).

// blindRows are the held rows; row i of every column of args is the row
// of the entry whose row is i (ents are sorted in place at the flush).
type blindRows struct {
	ents []blindEnt
	keys []byte
	// spare, counts and wins are the sort's scratch.
	spare  []blindEnt
	counts []uint32
	wins   []int64
	recs   []keyRec
	// args[j][k] is aggregate j's argument k over the held rows.
	args  [][]*Vec
	bytes int
	// kept is the memory the buffers keep between flushes (dropHeld).
	kept int
}

// blindEnt is a held row as the sort sees it: everything the sort, the
// grouping and the partial's key need, so the flush never follows an
// index to memory elsewhere (at 10^7 keys such a miss per row cost more
// than the sort).
type blindEnt struct {
	window int64
	// w0 and w1 are the key's first 16 bytes, big-endian, zero-padded:
	// keys are prefix-free, so two keys of at most 16 bytes are equal when
	// these are, and order as these do.
	w0, w1 uint64
	koff   uint32
	klen   uint32
	row    uint32
	kg     uint16
}

// key is the row's key: in keys when longer than 16 bytes, else rebuilt
// from w0 and w1 in dst (no read of memory the sort did not bring in).
func (e *blindEnt) key(keys, dst []byte) []byte {
	if e.klen > 16 {
		return keys[e.koff : e.koff+e.klen]
	}
	dst = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(dst[:0], e.w0), e.w1)
	return dst[:e.klen]
}

// compare orders held rows as the store orders their partials: window,
// key group, key.
func (h *blindRows) compare(x, y *blindEnt) int {
	if c := stdcmp.Compare(x.window, y.window); c != 0 {
		return c
	}
	if c := stdcmp.Compare(x.kg, y.kg); c != 0 {
		return c
	}
	if c := stdcmp.Compare(x.w0, y.w0); c != 0 {
		return c
	}
	if c := stdcmp.Compare(x.w1, y.w1); c != 0 {
		return c
	}
	if x.klen <= 16 && y.klen <= 16 {
		return 0
	}
	return bytes.Compare(x.key(h.keys, nil), y.key(h.keys, nil)) // both long
}

// sort returns the held rows in store order (compare). They are first
// distributed by (window, key group), moving each row once, and each such
// bucket is then sorted alone while it is in the CPU's cache: sorted
// whole, a commit's rows (tens of MB) were moved across memory at every
// level of the sort, three times the CPU.
func (h *blindRows) sort() []blindEnt {
	cmp := func(x, y blindEnt) int { return h.compare(&x, &y) }
	h.wins = h.wins[:0]
	for i := range h.ents {
		if w := h.ents[i].window; len(h.wins) == 0 || h.wins[len(h.wins)-1] != w {
			h.wins = append(h.wins, w)
		}
	}
	slices.Sort(h.wins)
	h.wins = slices.Compact(h.wins)
	if len(h.ents) < 1<<12 || len(h.wins) > 8 {
		slices.SortFunc(h.ents, cmp)
		return h.ents
	}
	nb := len(h.wins) << 16
	if cap(h.counts) < nb+1 {
		h.counts = make([]uint32, nb+1)
	}
	counts := h.counts[:nb+1]
	clear(counts)
	bucket := func(e *blindEnt) int {
		r := 0
		for h.wins[r] != e.window {
			r++
		}
		return r<<16 | int(e.kg)
	}
	for i := range h.ents {
		counts[bucket(&h.ents[i])+1]++
	}
	for b := 1; b <= nb; b++ {
		counts[b] += counts[b-1]
	}
	out := slices.Grow(h.spare[:0], len(h.ents))[:len(h.ents)]
	for i := range h.ents {
		b := bucket(&h.ents[i])
		out[counts[b]] = h.ents[i]
		counts[b]++
	}
	// counts[b] is now bucket b's end, and the next one's start. Within a
	// bucket the window and key group are one: its rows sort by key, on
	// 24-byte records rather than the rows themselves, then move once.
	lo := uint32(0)
	for b := 0; b < nb; b++ {
		hi := counts[b]
		if hi-lo > 1 {
			h.sortBucket(out[lo:hi], h.ents[lo:hi])
		}
		lo = hi
	}
	h.spare, h.ents = h.ents, out
	return out
}

// keyRec is a row of a bucket as its sort moves it.
type keyRec struct {
	w [2]uint64 // w0, w1
	i uint32
}

// sortBucket sorts the rows of one (window, key group) bucket by key,
// using tmp (as long) as scratch, on 24-byte records of the key's first
// 16 bytes (w0, w1) rather than the rows themselves (msdSort); keys
// longer than 16 bytes that share their first 16 are then sorted among
// themselves.
func (h *blindRows) sortBucket(rows, tmp []blindEnt) {
	n := len(rows)
	recs := slices.Grow(h.recs[:0], 2*n)[:2*n]
	h.recs = recs
	src, scratch := recs[:n], recs[n:]
	long := false
	for i := range rows {
		src[i] = keyRec{w: [2]uint64{rows[i].w0, rows[i].w1}, i: uint32(i)}
		long = long || rows[i].klen > 16
	}
	cmp := func(x, y keyRec) int {
		if x.w[0] != y.w[0] {
			return stdcmp.Compare(x.w[0], y.w[0])
		}
		if x.w[1] != y.w[1] || !long {
			return stdcmp.Compare(x.w[1], y.w[1])
		}
		return h.compare(&rows[x.i], &rows[y.i])
	}
	msdSort(src, scratch, 0)
	if long {
		sortTies(src, cmp)
	}
	copy(tmp, rows)
	for k, r := range src {
		rows[k] = tmp[r.i]
	}
}

// sortTies sorts by cmp each run of recs (sorted by msdSort) that share
// their first 16 bytes: keys are prefix-free, so two of at most 16 bytes
// with the same first 16 are equal, and only longer ones need comparing
// whole.
func sortTies(recs []keyRec, cmp func(x, y keyRec) int) {
	for lo := 0; lo < len(recs); {
		hi := lo + 1
		for hi < len(recs) && recs[hi].w == recs[lo].w {
			hi++
		}
		if hi-lo > 1 {
			slices.SortFunc(recs[lo:hi], cmp)
		}
		lo = hi
	}
}

// msdSmall is the most records msdSort sorts by insertion.
const msdSmall = 32

// msdSort sorts recs by (w0, w1) from key byte d on (0: w0's most
// significant), using scratch (as long): one counting pass on the most
// significant byte that varies among them spreads them over up to 256
// parts, each then sorted alone the same way, down to parts of a few
// records sorted by insertion. A bucket holds the keys of one key group,
// spread over the key space: for random 8-byte keys one pass leaves parts
// of a few records (where sorting from the least significant byte took a
// pass per byte, eight, each with its own 256 counts to sum).
func msdSort(recs, scratch []keyRec, d int) {
	if len(recs) <= msdSmall {
		for i := 1; i < len(recs); i++ {
			x := recs[i]
			j := i
			for ; j > 0 && (x.w[0] < recs[j-1].w[0] || x.w[0] == recs[j-1].w[0] && x.w[1] < recs[j-1].w[1]); j-- {
				recs[j] = recs[j-1]
			}
			recs[j] = x
		}
		return
	}
	var diff0, diff1 uint64
	for i := range recs {
		diff0 |= recs[i].w[0] ^ recs[0].w[0]
		diff1 |= recs[i].w[1] ^ recs[0].w[1]
	}
	byteAt := func(r *keyRec, d int) byte { return byte(r.w[d>>3] >> (56 - 8*(d&7))) }
	for ; d < 16; d++ {
		diff := diff0
		if d >= 8 {
			diff = diff1
		}
		if byte(diff>>(56-8*(d&7))) != 0 {
			break
		}
	}
	if d == 16 {
		return // all equal in their first 16 bytes (sortBucket sorts longer keys)
	}
	var pos [257]uint32
	for i := range recs {
		pos[int(byteAt(&recs[i], d))+1]++
	}
	for b := 1; b <= 256; b++ {
		pos[b] += pos[b-1]
	}
	next := pos
	for i := range recs {
		b := byteAt(&recs[i], d)
		scratch[next[b]] = recs[i]
		next[b]++
	}
	copy(recs, scratch[:len(recs)])
	for b := 0; b < 256; b++ {
		if lo, hi := pos[b], pos[b+1]; hi-lo > 1 {
			msdSort(recs[lo:hi], scratch[lo:hi], d+1)
		}
	}
}

// blindEntBytes is a held row's memory beyond its key and arguments: its
// entry, and its place in the sort's second array.
const blindEntBytes = 2 * 48

// SetBufferLimit sets the task's cache share: the memory the held rows of
// cold windows may take before they are written to the store (0: none are
// held; every row goes to the group table), at most maxHeldBytes, and
// what sizes a cold close's reads of stored sessions (closeReadKeys).
func (a *Aggregator) SetBufferLimit(n int) { a.bufLimit = min(n, maxHeldBytes) }

// maxHeldBytes bounds the held rows whatever the cache: a held row finds
// its key (when longer than 16 bytes) and its arguments by 32-bit offsets
// (blindEnt.koff, row), which a cache share of many GB would overflow.
// Past it the rows go to the store as evicted partials, as past a smaller
// limit.
const maxHeldBytes = 1 << 31

// BufferedBytes is the memory of the held rows, or of the buffers kept
// for them when that is more.
func (a *Aggregator) BufferedBytes() int {
	if a.held == nil {
		return 0
	}
	return max(a.held.bytes, a.held.kept)
}

// HeldRows is the number of rows held since the aggregator started.
func (a *Aggregator) HeldRows() uint64 { return a.heldRows }

// HeldBytes is the size of the rows held now (what a commit writes out).
func (a *Aggregator) HeldBytes() int {
	if a.held == nil {
		return 0
	}
	return a.held.bytes
}

// holding reports whether rows of cold windows are held (blind, cached,
// with a limit, and not off: see heldOff).
func (a *Aggregator) holding() bool {
	return a.blind && a.store != nil && a.bufLimit > 0 && len(a.cold) > 0 && !a.heldOff
}

// Rows are held for keys not in memory. When a cold window's rows come
// many to a group (a window cold since a restart, with few keys), the
// grouper folds them in a slot per group where holding keeps a row each:
// a flush that found at least heldRowsPerGroup rows a group turns holding
// off, and a batch of cold windows' rows of which most made a new slot
// turns it on again.
const heldRowsPerGroup = 4

// noteNewSlots turns holding back on when most of a batch's rows, folded
// by the grouper while holding was off, made a new group.
func (a *Aggregator) noteNewSlots(newRows, rows int) {
	if a.heldOff && 2*newRows > rows {
		a.heldOff = false
	}
}

// foldCold holds the rows of b in cold windows and returns the others
// (b itself when none is cold) with their windows.
func (a *Aggregator) foldCold(b *Batch, wins []int64) (*Batch, []int64, error) {
	sel := slices.Grow(a.coldSel[:0], b.N)[:b.N]
	a.coldSel = sel
	nc := 0
	lastW, lastCold := int64(0), false
	for i, w := range wins[:b.N] {
		if i == 0 || w != lastW {
			lastW, lastCold = w, a.cold[w]
		}
		sel[i] = lastCold
		if lastCold {
			nc++
		}
	}
	if nc == 0 {
		return b, wins, nil
	}
	if nc == b.N {
		return nil, nil, a.hold(b, wins)
	}
	cw, hw := make([]int64, 0, nc), make([]int64, 0, b.N-nc)
	for i, w := range wins[:b.N] {
		if sel[i] {
			cw = append(cw, w)
		} else {
			hw = append(hw, w)
		}
	}
	if err := a.hold(b.Select(sel, nc), cw); err != nil {
		return nil, nil, err
	}
	for i := range sel {
		sel[i] = !sel[i]
	}
	return b.Select(sel, b.N-nc), hw, nil
}

// hold appends the rows of b (all in cold windows wins) to the held rows.
func (a *Aggregator) hold(b *Batch, wins []int64) error {
	h := a.held
	if h == nil {
		h = &blindRows{args: make([][]*Vec, len(a.Args))}
		for j, exprs := range a.Args {
			h.args[j] = make([]*Vec, len(exprs))
			for k, e := range exprs {
				h.args[j][k] = &Vec{T: e.Type()}
			}
		}
		a.held = h
	}
	n := b.N
	keys, err := evalAll(b, a.Keys)
	if err != nil {
		return err
	}
	a.heldRows += uint64(n)
	for j, exprs := range a.Args {
		for k, e := range exprs {
			v, err := e.Eval(b)
			if err != nil {
				return err
			}
			h.bytes += appendVec(h.args[j][k], v, n)
		}
	}
	a.rows.Encode(keys, n)
	var kgs []uint16
	if a.PK >= 0 {
		kgs = a.rowGroups(keys[a.PK], n)
	}
	for i := 0; i < n; i++ {
		key := a.rows.Row(i)
		var kg uint16
		if kgs != nil {
			kg = kgs[i]
		}
		var pre [16]byte
		copy(pre[:], key)
		h.ents = append(h.ents, blindEnt{window: wins[i], w0: binary.BigEndian.Uint64(pre[:8]), w1: binary.BigEndian.Uint64(pre[8:]),
			koff: uint32(len(h.keys)), klen: uint32(len(key)), row: uint32(len(h.ents)), kg: kg})
		h.bytes += blindEntBytes
		if len(key) > 16 { // a shorter one is whole in w0 and w1
			h.keys = append(h.keys, key...)
			h.bytes += len(key)
		}
	}
	if h.bytes > a.bufLimit {
		return a.settle()
	}
	return nil
}

// appendVec appends src's first n rows to dst (copied: src may be the
// input's own memory, reused for the next batch), returning their size.
// dst's type decides: a src without values of it (an untyped NULL) adds
// zeros under its NULLs.
func appendVec(dst, src *Vec, n int) int {
	size := 0
	switch dst.T {
	case types.Int, types.Timestamp, types.Interval:
		dst.I = appendN(dst.I, src.I, n)
		size = 8 * n
	case types.Double:
		dst.F = appendN(dst.F, src.F, n)
		size = 8 * n
	case types.Text:
		dst.S = appendN(dst.S, src.S, n)
		size = 16 * n
		held := dst.S[len(dst.S)-n:]
		for i, s := range held {
			// A decoded string may share the input's buffer: a copy keeps
			// no more than its bytes.
			held[i] = strings.Clone(s)
			size += len(s)
		}
	case types.Bool:
		dst.B = appendN(dst.B, src.B, n)
		size = n
	}
	if src.Null != nil || dst.Null != nil {
		if dst.Null == nil {
			dst.Null = make([]bool, dst.N, dst.N+n)
		}
		dst.Null = appendN(dst.Null, src.Null, n)
		size += n
	}
	dst.N += n
	return size
}

// appendN appends src[:n] to dst, or n zero values when src has fewer.
func appendN[T any](dst, src []T, n int) []T {
	if len(src) >= n {
		return append(dst, src[:n]...)
	}
	return append(dst, make([]T, n)...)
}

// settle writes the held rows to the store, as evicted partials: before
// anything reads a cold window (WindowChunks), and when they outgrow their
// limit.
func (a *Aggregator) settle() error {
	return a.flushBlind(func(ref StateRef, val []byte) error { return a.store.Evict(ref, val) })
}

// flushBlind folds the held rows into one partial per group and hands
// each to put, in (window, key group, key) order, then lets them go.
func (a *Aggregator) flushBlind(put func(ref StateRef, val []byte) error) error {
	hp, err := a.TakeHeld()
	if hp == nil || err != nil {
		return err
	}
	defer hp.Close()
	var p state.Partial
	for hp.Next(&p) {
		if err := put(StateRef{KG: p.KG, Key: p.Key, Window: p.Window, Partial: true}, p.Val); err != nil {
			return fmt.Errorf("write held rows: %w", err)
		}
	}
	return nil
}

// HeldPartials are the held rows folded into one partial per group, given
// one at a time in store order (window, key group, key): a commit writes
// them straight into its runs (as state.SortedPartials) with no copy
// between.
type HeldPartials struct {
	// NextID names each partial (nil: the zero id).
	NextID func() state.DeltaID
	a      *Aggregator
	h      *blindRows
	ents   []blindEnt
	funcs  []agg.Func
	// firsts[g] is where group g (slot g) starts in ents, and firsts' last
	// is len(ents).
	firsts []uint32
	g      int // the next group
	// lastW and lastCold: the last row's window, and whether it is cold.
	lastW          int64
	lastCold, seen bool
	kbuf           []byte
	val            []byte
}

// TakeHeld sorts and folds the held rows (nil when there are none): rows
// of the same group, sorted together, take the same fresh slot, and one
// Update per aggregate folds them all. The aggregator holds no rows until
// the partials' Close.
func (a *Aggregator) TakeHeld() (*HeldPartials, error) {
	h := a.held
	if h == nil || len(h.ents) == 0 {
		return nil, nil
	}
	a.held = nil
	hp := &HeldPartials{a: a, h: h, firsts: make([]uint32, 0, len(h.ents)+1)}
	hp.ents = h.sort()
	// Groups in sorted order take slots 0, 1, ...: row r folds into
	// slots[r].
	slots := make([]uint32, len(hp.ents))
	for k := range hp.ents {
		if k == 0 || h.compare(&hp.ents[k-1], &hp.ents[k]) != 0 {
			hp.firsts = append(hp.firsts, uint32(k))
		}
		slots[hp.ents[k].row] = uint32(len(hp.firsts) - 1)
	}
	groups := len(hp.firsts)
	hp.firsts = append(hp.firsts, uint32(len(hp.ents)))
	a.heldOff = len(hp.ents) >= heldRowsPerGroup*groups
	funcs, err := newFuncs(a.Specs)
	if err != nil {
		hp.Close()
		return nil, err
	}
	hp.funcs = funcs
	for j, f := range funcs {
		f.Grow(groups)
		args := make([]arrow.Array, 0, len(h.args[j]))
		for _, v := range h.args[j] {
			args = append(args, arrowView(v, a.mem))
		}
		f.Update(slots, args)
		for _, x := range args {
			x.Release()
		}
	}
	return hp, nil
}

// Len is the number of groups: at most that many partials.
func (hp *HeldPartials) Len() int { return len(hp.firsts) - 1 }

// Next sets *p to the next group's partial (its key and value valid until
// the next call); false at the end. Groups of windows no longer cold
// (expired by ExpireCold: their rows were late) are skipped.
func (hp *HeldPartials) Next(p *state.Partial) bool {
	for hp.g+1 < len(hp.firsts) {
		s := uint32(hp.g)
		e := &hp.ents[hp.firsts[hp.g]] // any row of the group names it
		hp.g++
		if !hp.seen || e.window != hp.lastW { // rows come window by window
			hp.lastW, hp.lastCold, hp.seen = e.window, hp.a.cold[e.window], true
		}
		if !hp.lastCold {
			continue
		}
		hp.val = hp.val[:0]
		for _, f := range hp.funcs {
			hp.val = appendEncoded(hp.val, f, s)
		}
		key := e.key(hp.h.keys, hp.kbuf)
		if e.klen <= 16 {
			hp.kbuf = key // its own buffer, not the held keys
		}
		p.Window, p.KG, p.Key, p.Val = e.window, e.kg, key, hp.val
		if hp.NextID != nil {
			p.ID = hp.NextID()
		}
		return true
	}
	return false
}

// Close lets the held rows go; their buffers serve the next ones.
func (hp *HeldPartials) Close() {
	if hp.h == nil {
		return
	}
	hp.a.dropHeld(hp.h)
	hp.h, hp.ents, hp.funcs = nil, nil, nil
}

// dropHeld lets the held rows go. Their buffers are kept for the next
// rows (their size is bounded by the limit); ones that outgrew it (a
// burst written to the store) go.
func (a *Aggregator) dropHeld(h *blindRows) {
	if h.bytes > a.bufLimit || a.held != nil {
		return
	}
	a.held = h
	h.ents, h.keys, h.bytes = h.ents[:0], h.keys[:0], 0
	h.kept = (cap(h.ents)+cap(h.spare))*int(unsafe.Sizeof(blindEnt{})) + cap(h.keys) +
		cap(h.recs)*int(unsafe.Sizeof(keyRec{})) + 4*cap(h.counts)
	for _, vs := range h.args {
		for _, v := range vs {
			clear(v.S) // the strings go
			*v = Vec{T: v.T, I: v.I[:0], F: v.F[:0], S: v.S[:0], B: v.B[:0], Null: v.Null[:0]}
			h.kept += 8*(cap(v.I)+cap(v.F)) + 16*cap(v.S) + cap(v.B) + cap(v.Null)
		}
	}
}
