package state

import (
	"bytes"
	stdcmp "cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
)

// GroupWrites gathers a commit's changed groups and partials of a cached
// aggregation, so that they are written in key order together with the
// pending (evicted) ones (Batch.AbsorbSorted).
//
// The writes are a copy of the changed groups, held until the commit's
// batch has them: a commit's memory grows by their size (at most the
// task's cache share), and more than 8 MB of it is not kept for the next.
//
// Why in order: Pebble inserts a batch into its memtable one key at a
// time, and a batch over half a memtable it sorts whole before flushing
// it as a table; a cached aggregation's commit holds up to its whole
// cache share of groups in no order (a commit of 10^7 keys' partials
// spent a sixth of all CPU in that sort). Sorted here, on the decoded
// (window, key group, key) with no common prefix to compare, the batch
// goes into Pebble as one ordered run.
type GroupWrites struct {
	ents  []groupWrite
	arena []byte
	kbuf  []byte
	order []sortRec // ents in key order (sort)
	wins  []int64
	// deltas counts the partials among ents.
	deltas int
	// bucket's scratch: counts and bytes per bucket, the buckets' bounds
	// in ents, and the previous ents and arena (reused by the next).
	counts, bytesPer []uint32
	bounds           []uint32
	spareEnts        []groupWrite
	spareArena       []byte
	// hintEnts and hintArena size the first write's buffers after a
	// large commit let its own go (reset).
	hintEnts, hintArena int
	// unordered: some write came after one that orders after it (a
	// blind aggregation's held rows come in order: exec's blindrows.go).
	unordered bool
}

type groupWrite struct {
	window int64
	kg     uint16 // as stored: deltaKG for a partial
	// pre is the key's first 8 bytes, big-endian (zero-padded): most
	// comparisons end there, on a number, not in bytes.Compare.
	pre      uint64
	id       DeltaID
	key, val span
}

type span struct{ off, n uint32 }

func (w *GroupWrites) add(window int64, kg uint16, id DeltaID, key, val []byte) {
	if w.ents == nil && w.hintEnts > 0 {
		w.ents = make([]groupWrite, 0, w.hintEnts)
		w.arena = make([]byte, 0, w.hintArena)
		w.hintEnts, w.hintArena = 0, 0
	}
	var pre [8]byte
	copy(pre[:], key)
	e := groupWrite{window: window, kg: kg, pre: binary.BigEndian.Uint64(pre[:]), id: id, key: span{uint32(len(w.arena)), uint32(len(key))}}
	w.arena = append(w.arena, key...)
	e.val = span{uint32(len(w.arena)), uint32(len(val))}
	w.arena = append(w.arena, val...)
	if n := len(w.ents); n > 0 && !w.unordered && w.compare(&w.ents[n-1], &e) >= 0 {
		w.unordered = true
	}
	w.ents = append(w.ents, e)
}

// compare orders writes as their store keys (see sort).
func (w *GroupWrites) compare(x, y *groupWrite) int {
	if c := stdcmp.Compare(x.window, y.window); c != 0 {
		return c
	}
	if c := stdcmp.Compare(x.kg, y.kg); c != 0 {
		return c
	}
	if c := stdcmp.Compare(x.pre, y.pre); c != 0 {
		return c
	}
	if c := bytes.Compare(w.bytes(x.key), w.bytes(y.key)); c != 0 {
		return c
	}
	if c := stdcmp.Compare(x.id.Gen, y.id.Gen); c != 0 {
		return c
	}
	return stdcmp.Compare(x.id.Seq, y.id.Seq)
}

func (w *GroupWrites) bytes(s span) []byte { return w.arena[s.off : s.off+s.n] }

// Put records a changed group; a commit's writes hold each group once.
func (w *GroupWrites) Put(window int64, kg uint16, key, val []byte) {
	w.add(window, kg, DeltaID{}, key, val)
}

// PutDelta records a partial of a blind group (deltas.go).
func (w *GroupWrites) PutDelta(window int64, kg uint16, key []byte, id DeltaID, val []byte) {
	w.deltas++
	w.add(window, deltaKG(kg), id, key, val)
}

// Len is the number of writes gathered.
func (w *GroupWrites) Len() int { return len(w.ents) }

// storeKey is e's key in the store of stream (in kbuf).
func (w *GroupWrites) storeKey(stream string, e *groupWrite) []byte {
	w.kbuf = appendGroupKey(w.kbuf[:0], stream, e.window, e.kg, w.bytes(e.key))
	if isDeltaKG(e.kg) {
		w.kbuf = appendDeltaKeyID(w.kbuf, e.id)
	}
	return w.kbuf
}

// sortRec is a write's place in the sort: 24 bytes to move, not the
// whole groupWrite, and most comparisons decided on two numbers.
type sortRec struct {
	hi  uint64 // the rank of the write's window among the commit's, then its stored key group
	pre uint64 // groupWrite.pre
	i   uint32 // index in ents
}

// sort orders the writes (w.order) as their store keys: window (signed,
// as the key's flipped sign bit orders it), stored key group, key (group
// keys are self-delimiting, so no key is a prefix of another and bytes
// order is the store's), then a partial's id.
//
// The writes are first distributed by (window, stored key group), keys
// and values moved with them (bucket): a commit's writes come in the
// order of the groups in memory, and written out in key order straight
// from there, nearly every one was a cache miss (at 10^7 keys, building
// the keys in that order took a sixth of all CPU). In buckets, each
// bucket's writes are sorted and written while they are in cache.
func (w *GroupWrites) sort() {
	w.wins = w.wins[:0]
	for i := range w.ents {
		if n := len(w.wins); n == 0 || w.wins[n-1] != w.ents[i].window {
			w.wins = append(w.wins, w.ents[i].window)
		}
	}
	slices.Sort(w.wins)
	w.wins = slices.Compact(w.wins)
	w.order = w.order[:0]
	if !w.unordered { // written in order: nothing to sort
		w.order = slices.Grow(w.order, len(w.ents))
		for i := range w.ents {
			w.order = append(w.order, sortRec{i: uint32(i)})
		}
		return
	}
	// Decided here, not by bounds: a bucketed commit leaves them empty
	// but not nil, and the next commit, if not bucketed, went unsorted.
	bucketed := len(w.ents) >= minBucketed && len(w.wins) <= maxBucketWindows
	if bucketed {
		w.bucket()
	}
	last, rank := int64(0), -1
	for i := range w.ents {
		e := &w.ents[i]
		if rank < 0 || e.window != last {
			rank, _ = slices.BinarySearch(w.wins, e.window)
			last = e.window
		}
		w.order = append(w.order, sortRec{hi: uint64(rank)<<16 | uint64(e.kg), pre: e.pre, i: uint32(i)})
	}
	cmp := func(a, b sortRec) int {
		if c := stdcmp.Compare(a.hi, b.hi); c != 0 {
			return c
		}
		if c := stdcmp.Compare(a.pre, b.pre); c != 0 {
			return c
		}
		x, y := &w.ents[a.i], &w.ents[b.i]
		if c := bytes.Compare(w.bytes(x.key), w.bytes(y.key)); c != 0 {
			return c
		}
		if c := stdcmp.Compare(x.id.Gen, y.id.Gen); c != 0 {
			return c
		}
		return stdcmp.Compare(x.id.Seq, y.id.Seq)
	}
	if !bucketed {
		slices.SortFunc(w.order, cmp)
		return
	}
	// Bucketed: ents are in bucket order already, each bucket sorted alone.
	for b := 0; b+1 < len(w.bounds); b++ {
		if lo, hi := w.bounds[b], w.bounds[b+1]; hi-lo > 1 {
			slices.SortFunc(w.order[lo:hi], cmp)
		}
	}
	w.bounds = w.bounds[:0]
}

const (
	// minBucketed is the fewest writes bucketed first: fewer fit in cache.
	minBucketed = 1 << 14
	// maxBucketWindows bounds the windows of a bucketed commit (a bucket
	// count per stored key group of each).
	maxBucketWindows = 8
)

// bucket reorders ents (and their keys and values in the arena) by
// (window rank, stored key group), keeping their order within a bucket,
// and sets bounds to the buckets' first entries (and the end).
func (w *GroupWrites) bucket() {
	nb := len(w.wins) << 16
	if cap(w.counts) < nb+1 {
		w.counts = make([]uint32, nb+1)
	}
	counts := w.counts[:nb+1]
	clear(counts)
	bytesPer := w.bytesPer
	if cap(bytesPer) < nb+1 {
		bytesPer = make([]uint32, nb+1)
	}
	bytesPer = bytesPer[:nb+1]
	clear(bytesPer)
	w.bytesPer = bytesPer
	bucketOf := func(e *groupWrite, last *int64, rank *int) int {
		if *rank < 0 || e.window != *last {
			*rank, _ = slices.BinarySearch(w.wins, e.window)
			*last = e.window
		}
		return *rank<<16 | int(e.kg)
	}
	last, rank := int64(0), -1
	for i := range w.ents {
		e := &w.ents[i]
		b := bucketOf(e, &last, &rank)
		counts[b+1]++
		bytesPer[b+1] += e.key.n + e.val.n
	}
	// Prefix sums: counts[b] and bytesPer[b] become bucket b's start.
	w.bounds = w.bounds[:0]
	for b := 1; b <= nb; b++ {
		if counts[b] > 0 {
			w.bounds = append(w.bounds, counts[b-1])
		}
		counts[b] += counts[b-1]
		bytesPer[b] += bytesPer[b-1]
	}
	w.bounds = append(w.bounds, counts[nb])
	ents := slices.Grow(w.spareEnts[:0], len(w.ents))[:len(w.ents)]
	arena := slices.Grow(w.spareArena[:0], len(w.arena))[:len(w.arena)]
	last, rank = 0, -1
	for i := range w.ents {
		e := w.ents[i]
		b := bucketOf(&e, &last, &rank)
		off := bytesPer[b]
		copy(arena[off:], w.bytes(e.key))
		e.key.off = off
		copy(arena[off+e.key.n:], w.bytes(e.val))
		e.val.off = off + e.key.n
		bytesPer[b] += e.key.n + e.val.n
		ents[counts[b]] = e
		counts[b]++
	}
	w.spareEnts, w.ents = w.ents, ents
	w.spareArena, w.arena = w.arena, arena
}

// SortedPartials are partials (deltas.go) that come in store order
// (window, key group, key, id) without being copied into a GroupWrites: a
// cached aggregation's held rows, folded at the commit (exec's
// blindrows.go), at 10^7 keys nearly all of a commit's writes.
type SortedPartials interface {
	// Len is how many partials there are at most.
	Len() int
	// Next sets *p to the next partial (its key and value valid until the
	// next call), false at the end.
	Next(p *Partial) bool
}

// Partial is a partial of the group (KG, Key) of Window.
type Partial struct {
	Window int64
	KG     uint16 // the group's key group (not a stored one)
	Key    []byte
	ID     DeltaID
	Val    []byte
}

// AbsorbSorted is Absorb that also writes w and held (nil: none), the
// pending groups, w's and held's merged in key order (of a key in both
// the pending and w, the pending one first: w's is newer and wins), and
// empties the pending and w. When the commit holds at least
// Options.MinRunPartials partials and p's runs are open (OpenRuns), its
// partials go to runs (runs.go), one table per window, ingested when the
// batch commits; the batch holds the groups and the runs' markers.
func (b *Batch) AbsorbSorted(p *Pending, w *GroupWrites, held SortedPartials) error {
	w.sort()
	nheld := 0
	if held != nil {
		nheld = held.Len()
	}
	var r *runWriter
	if p.runsOpen && p.deltas+w.deltas+nheld >= b.s.minRun {
		if b.runs == nil {
			b.runs = &runWriter{s: b.s}
		}
		// A run of its own for each call (a batch absorbing twice gets two,
		// which must not share keys): its tables start anew.
		r = b.runs
		if err := r.finish(); err != nil {
			return err
		}
		r.scope, r.id = p.stream, p.nextRun
		p.nextRun++
	}
	pl := len(p.stream) + 2
	oldest, wrote := int64(0), false
	// toRun reports whether a partial of window goes to its run.
	toRun := func(window int64) bool {
		if r == nil {
			return false
		}
		if !wrote || window < oldest {
			oldest, wrote = window, true
		}
		switch {
		case r.w != nil && r.window == window: // the window's run goes on
			return true
		case p.runsIn[window] < p.WindowRuns():
			p.runsIn[window]++
			return true
		}
		return false
	}
	put := func(k, v []byte, window int64, storedKG uint16) error {
		if isDeltaKG(storedKG) && storedKG != runKG {
			if toRun(window) {
				return r.add(window, k, v, pl)
			}
			p.noteClassic(window)
		}
		return b.b.Set(k, v, nil)
	}
	var it *pebble.Iterator
	valid := false
	if !p.Empty() {
		var err error
		if it, err = p.b.NewBatchOnlyIter(nil, nil); err != nil {
			return fmt.Errorf("state of %s: %w", b.stream, err)
		}
		valid = it.First()
	}
	fail := func(err error) error {
		if it != nil {
			it.Close()
		}
		return fmt.Errorf("state of %s: %w", b.stream, err)
	}
	putPending := func() error {
		k := it.Key()
		window, kg, _, err := decodeGroupKey(k, pl)
		if err != nil {
			return err
		}
		return put(k, it.Value(), window, kg)
	}
	// pendingTo writes the pending entries up to k (inclusive).
	pendingTo := func(k []byte) error {
		for ; valid && bytes.Compare(it.Key(), k) <= 0; valid = it.Next() {
			if err := putPending(); err != nil {
				return err
			}
		}
		return nil
	}
	var hp Partial
	heldOK := held != nil && held.Next(&hp)
	// putHeld writes the held partial hp (and the pending entries before
	// it), then moves to the next. Its store key is built only to compare
	// with pending entries or to go into the batch: into a run it goes
	// as its parts.
	putHeld := func() error {
		if valid {
			b.hkey = appendDeltaKey(b.hkey[:0], p.stream, hp.Window, hp.KG, hp.Key, hp.ID)
			if err := pendingTo(b.hkey); err != nil {
				return err
			}
		}
		var err error
		if toRun(hp.Window) {
			err = r.addPartial(hp.Window, hp.KG, hp.Key, hp.ID, hp.Val)
		} else {
			b.hkey = appendDeltaKey(b.hkey[:0], p.stream, hp.Window, hp.KG, hp.Key, hp.ID)
			err = b.b.Set(b.hkey, hp.Val, nil)
			p.noteClassic(hp.Window)
		}
		heldOK = held.Next(&hp)
		return err
	}
	for _, rec := range w.order {
		e := &w.ents[rec.i]
		for heldOK && w.compareHeld(e, &hp) > 0 {
			if err := putHeld(); err != nil {
				return fail(err)
			}
		}
		k := w.storeKey(p.stream, e)
		if err := pendingTo(k); err != nil {
			return fail(err)
		}
		if err := put(k, w.bytes(e.val), e.window, e.kg); err != nil {
			return fail(err)
		}
	}
	for heldOK {
		if err := putHeld(); err != nil {
			return fail(err)
		}
	}
	if it != nil {
		for ; valid; valid = it.Next() {
			if err := putPending(); err != nil {
				return fail(err)
			}
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("state of %s: %w", b.stream, err)
		}
		p.b.Reset()
		p.deltas = 0
	}
	if r != nil {
		if err := r.finish(); err != nil {
			return err
		}
		// Windows older than any this commit wrote partials to have
		// closed (or get few more): their counts go, so the map follows
		// the open windows. A count dropped too soon only lets a window
		// have more runs.
		for w := range p.runsIn {
			if wrote && w < oldest {
				delete(p.runsIn, w)
			}
		}
		for _, m := range r.marks {
			if err := b.b.Set(m, nil, nil); err != nil {
				return fmt.Errorf("state of %s: %w", b.stream, err)
			}
		}
		r.marks = r.marks[:0]
	}
	w.reset()
	return nil
}

// compareHeld orders write e against held partial h as their store keys.
func (w *GroupWrites) compareHeld(e *groupWrite, h *Partial) int {
	if c := stdcmp.Compare(e.window, h.Window); c != 0 {
		return c
	}
	if c := stdcmp.Compare(e.kg, deltaKG(h.KG)); c != 0 {
		return c
	}
	if c := bytes.Compare(w.bytes(e.key), h.Key); c != 0 {
		return c
	}
	if c := stdcmp.Compare(e.id.Gen, h.ID.Gen); c != 0 {
		return c
	}
	return stdcmp.Compare(e.id.Seq, h.ID.Seq)
}

// keepWrites is the most memory GroupWrites keeps from one commit to the
// next: a commit of a large cache share's groups lets go of its copy.
const keepWrites = 8 << 20

func (w *GroupWrites) reset() {
	size := func(ents, arena int) int { return arena + ents*int(unsafe.Sizeof(groupWrite{})) }
	if size(cap(w.ents), cap(w.arena))+size(cap(w.spareEnts), cap(w.spareArena))+cap(w.order)*int(unsafe.Sizeof(sortRec{})) > keepWrites {
		// The next commit likely writes as many: it starts at this one's
		// size instead of doubling its way there (copying all it holds
		// at each step).
		*w = GroupWrites{hintEnts: len(w.ents), hintArena: len(w.arena)}
		return
	}
	w.ents, w.arena, w.order, w.deltas, w.unordered = w.ents[:0], w.arena[:0], w.order[:0], 0, false
}
