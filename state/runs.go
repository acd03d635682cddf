package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A run is one commit's partials (deltas.go) of one window, written as a
// table of their own and ingested into Pebble instead of going through
// its memtable. Partials are write-once (written at a commit, read once
// in order at the window's close, then range-deleted), yet through the
// memtable they were flushed to L0 and compacted again and again: at 10^7
// keys that was half of all CPU. A run's keys are
//
//	(scope, window, runKG, run id 8B, stored key group, key, delta id)
//
// the run id ahead of the group key, so no other key lies inside a run's
// range: the ingested table overlaps nothing and lands in the bottom-most
// level it can, where nothing compacts it again. Within a run the entries
// are the window's partials in the classic order (stored key group, key,
// id), so the window's close merges its runs (one iterator each) with the
// classic partials by group key.
//
// Atomicity with the input offsets: a commit ingests its runs, then
// writes its batch, which holds each run's marker (the run's prefix alone,
// its first key). A crash between the two leaves runs without a marker:
// OpenRuns deletes them before the task reads anything, so the state is
// the last committed batch's, as if the ingest had never happened.
//
// runKG lies in the range of stored delta key groups (isDeltaKG) and is
// the deltaKG of no key group (those are 0x8000|kg for kg < 960 and
// nullDeltaKG): a window's groups scan skips it with the deltas.
const runKG = 0xFFFD

// minRunPartials is the fewest partials a commit ingests as runs: fewer
// go into its batch as classic partials (deltas.go), so a task committing
// every second with a handful of partials does not make a table (and a
// close iterator) per commit.
const minRunPartials = 4096

// MaxWindowRuns bounds a window's runs: its close holds an iterator (and
// a block) per run. A task committing every second would otherwise make
// thousands in an hour's window; past the bound, a commit's partials of
// that window go into its batch (through the memtable) instead, where
// they are flushed and compacted again and again. At 10^7 keys, a commit
// every 40,000 rows (500 runs) made 3.6 million events per CPU-second
// with the bound at 512, and 0.7 million with it at 64; the close of 500
// runs took 6.3 s (4.7 s for 40) and the process's peak RSS stayed at
// 272 MB. (A HOP window's slices share it: Pending.LimitRuns.)
const MaxWindowRuns = 512

// runPrefix is the key prefix of run id of window: also the run's marker.
func runPrefix(dst []byte, scope string, window int64, id uint64) []byte {
	dst = appendGroupKey(dst, scope, window, runKG, nil)
	return binary.BigEndian.AppendUint64(dst, id)
}

// runsOf is the range of every run of window.
func runsOf(scope string, window int64) (lo, hi []byte) {
	return GroupKey(scope, window, runKG, nil), GroupKey(scope, window, runKG+1, nil)
}

// RunKey is the key of an entry of run of scope's window: a partial of
// the group (kg, key) with id (for consumers that parse state keys, and
// their tests).
func RunKey(scope string, window int64, run uint64, kg uint16, key []byte, id DeltaID) []byte {
	k := runPrefix(nil, scope, window, run)
	k = binary.BigEndian.AppendUint16(k, deltaKG(kg))
	return appendDeltaKeyID(append(k, key...), id)
}

// RunMarker is the marker of run of scope's window (see RunKey).
func RunMarker(scope string, window int64, run uint64) []byte {
	return runPrefix(nil, scope, window, run)
}

// RunEntryAsDelta is a run entry's key (a KindGroup key with Run set) as
// a classic partial's key: the run's key group and id dropped.
func RunEntryAsDelta(stream string, key []byte) []byte {
	at := len(stream) + 2 + 4 + 1 + 8 // kind, stream, 0, partition, 0, window
	out := slices.Clone(key[:at])
	return append(out, key[at+2+8:]...)
}

// runWriter writes one commit's runs: a table per window.
type runWriter struct {
	s      *Store
	scope  string
	id     uint64
	w      *sstable.Writer
	window int64
	paths  []string
	wins   []int64 // the window of each table in paths
	marks  [][]byte
	kbuf   []byte
	idb    []byte
	chunk  chunkWriter
}

var runFiles atomic.Uint64 // names the tables being written

// A run's table is written in the store's directory (Pebble links it in
// from there); Open removes any a crash left behind.
const (
	runFilePrefix = "turbine-run-"
	runFileSuffix = ".sst.tmp"
)

// start makes sure the table being written is window's.
func (r *runWriter) start(window int64) error {
	if r.w == nil || window != r.window {
		if err := r.finish(); err != nil {
			return err
		}
		path := r.s.fs.PathJoin(r.s.dir, runFilePrefix+strconv.FormatUint(runFiles.Add(1), 10)+runFileSuffix)
		f, err := r.s.fs.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			return fmt.Errorf("write a run of %s: %w", r.scope, err)
		}
		r.paths = append(r.paths, path)
		r.wins = append(r.wins, window)
		opts := r.s.runOpts
		w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), opts)
		r.w = w
		r.chunk.flush = func(key, val []byte) error { return w.Set(key, val) }
		r.window = window
		mark := runPrefix(nil, r.scope, window, r.id)
		r.marks = append(r.marks, mark)
		r.kbuf = append(r.kbuf[:0], mark...)
	}
	return nil
}

// add adds the partial whose classic key (deltas.go, under a stream
// prefix of length pl) is classicKey to window's table.
func (r *runWriter) add(window int64, classicKey, val []byte, pl int) error {
	if err := r.start(window); err != nil {
		return err
	}
	// classicKey is (prefix, window, stored key group, key, id): the
	// partial goes into a chunk (runchunk.go) under the run's prefix.
	rest := classicKey[pl+8:]
	if len(rest) < 2+deltaIDLen {
		return fmt.Errorf("write a run of %s: %w", r.scope, errCorruptKey)
	}
	kg := realKG(binary.BigEndian.Uint16(rest))
	if err := r.chunk.add(r.kbuf, kg, rest[2:len(rest)-deltaIDLen], rest[len(rest)-deltaIDLen:], val); err != nil {
		return fmt.Errorf("write a run of %s: %w", r.scope, err)
	}
	return nil
}

// addPartial is add of the partial (kg, key, id) of window, given as its
// parts rather than its key.
func (r *runWriter) addPartial(window int64, kg uint16, key []byte, id DeltaID, val []byte) error {
	if err := r.start(window); err != nil {
		return err
	}
	r.idb = appendDeltaKeyID(r.idb[:0], id)
	if err := r.chunk.add(r.kbuf, kg, key, r.idb, val); err != nil {
		return fmt.Errorf("write a run of %s: %w", r.scope, err)
	}
	return nil
}

func (r *runWriter) finish() error {
	if r.w == nil {
		return nil
	}
	w := r.w
	r.w = nil
	if err := r.chunk.finish(); err != nil {
		_ = w.Close()
		return fmt.Errorf("write a run of %s: %w", r.scope, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write a run of %s: %w", r.scope, err)
	}
	return nil
}

// dropWindow forgets the run of a window the same commit deletes (its
// close): its partials were read at the close, and an ingested run would
// be deleted by the batch anyway, yet appear in the changelog without the
// tombstones a range deletion gives the keys it covers in the store.
func (r *runWriter) dropWindow(window int64) {
	for i := 0; i < len(r.wins); i++ {
		if r.wins[i] == window && (r.w == nil || i < len(r.wins)-1) {
			_ = r.s.fs.Remove(r.paths[i])
			r.paths = slices.Delete(r.paths, i, i+1)
			r.wins = slices.Delete(r.wins, i, i+1)
			i--
		}
	}
}

// deleteRunEntries deletes the entries in key groups groups of window's
// runs, stored ones and this batch's own (ingested before the deletions).
func (b *Batch) deleteRunEntries(window int64, groups []uint16) error {
	set := make(map[uint16]bool, len(groups))
	for _, g := range groups {
		set[g] = true
	}
	lo, hi := runsOf(b.scope, window)
	pl := len(lo) + 8 // where an entry's stored key group starts
	// v: a chunk's value when it is in one of the batch's runs (nil:
	// stored, read back when logged).
	del := func(k, v []byte) error {
		if len(k) >= pl+2 && set[realKG(binary.BigEndian.Uint16(k[pl:]))] {
			if chunkAt(k, pl) {
				return b.deleteChunk(k, v)
			}
			return b.b.Delete(k, nil)
		}
		return nil
	}
	it, err := b.s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		if err := del(it.Key(), nil); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	if b.runs == nil {
		return nil
	}
	if err := b.runs.finish(); err != nil {
		return err
	}
	for i, path := range b.runs.paths {
		if b.runs.wins[i] == window {
			if err := b.s.eachTableEntry(path, func(k, v []byte) error { return del(k, bytes.Clone(v)) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// discard removes the tables of runs never ingested.
func (r *runWriter) discard() {
	if r.w != nil {
		_ = r.w.Close()
		r.w = nil
		r.chunk.n = 0
	}
	for _, p := range r.paths {
		_ = r.s.fs.Remove(p)
	}
	r.paths = nil
}

// OpenRuns makes scope's stored runs the committed ones before its task
// reads anything: a run whose marker is missing was ingested by a commit
// whose batch never landed (a crash between the two), and is deleted.
// It sets the scope's next run id past every run seen.
func (p *Pending) OpenRuns() (dropped int, err error) {
	p.runsOpen = true
	p.runsIn = map[int64]int{}
	p.classicIn = map[int64]int{}
	p.foldedIn = map[int64]int{}
	return p.s.sweepRuns(p.stream, func(window int64, id uint64, marked bool) {
		p.nextRun = max(p.nextRun, id+1)
		if marked {
			p.runsIn[window]++
		}
	})
}

// DropUnmarkedRuns deletes partition p's runs of stream without a marker
// (see OpenRuns) before its changelog is applied (a task's restore, a
// standby copy's start): that commit's records may be in the
// changelog (it is written before the state), and applying them would
// bring the run's marker back beside the run the crash left, whose
// partials would then count twice (each restored under its own key, and
// again in the ingested chunks).
func (s *Store) DropUnmarkedRuns(stream string, p int32) (int, error) {
	return s.sweepRuns(Scope(stream, p), func(int64, uint64, bool) {})
}

// eachRun calls fn for each run of scope's window on the store, in id
// order: its prefix (the marker's key), its id, and whether the marker is
// there (it is the run's first key). One iterator skips from one run to
// the next.
func (s *Store) eachRun(scope string, window int64, fn func(pre []byte, id uint64, marked bool) error) error {
	lo, hi := runsOf(scope, window)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	pl := len(lo)
	for valid := it.First(); valid; {
		k := it.Key()
		if len(k) < pl+8 {
			it.Close()
			return errCorruptKey
		}
		pre := slices.Clone(k[:pl+8])
		if err := fn(pre, binary.BigEndian.Uint64(k[pl:]), len(k) == pl+8); err != nil {
			it.Close()
			return err
		}
		valid = it.SeekGE(bumped(pre))
	}
	return it.Close()
}

// sweepRuns deletes scope's runs without a marker, calling seen for every
// run (marked or not) first.
func (s *Store) sweepRuns(scope string, seen func(window int64, id uint64, marked bool)) (dropped int, err error) {
	windows, err := s.GroupWindows(scope)
	if err != nil {
		return 0, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, w := range windows {
		if err := s.eachRun(scope, w, func(pre []byte, id uint64, marked bool) error {
			seen(w, id, marked)
			if marked {
				return nil
			}
			dropped++
			return b.DeleteRange(pre, bumped(pre), nil)
		}); err != nil {
			return 0, err
		}
	}
	if dropped == 0 {
		return 0, nil
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("drop uncommitted runs of %s: %w", scope, err)
	}
	return dropped, nil
}

// Runs is the number of run tables (one per window of a commit's runs)
// the batch has written so far.
func (b *Batch) Runs() int {
	if b.runs == nil {
		return 0
	}
	return len(b.runs.paths)
}

// ingestRuns ingests the batch's runs (before the batch, which holds
// their markers, is written).
func (b *Batch) ingestRuns() error {
	if b.runs == nil {
		return nil
	}
	r := b.runs
	if err := r.finish(); err != nil {
		return err
	}
	if len(r.paths) == 0 {
		return nil
	}
	if err := b.s.db.Ingest(context.Background(), r.paths); err != nil {
		return fmt.Errorf("ingest runs of %s: %w", b.stream, err)
	}
	r.paths = nil
	return nil
}

// eachRunChange calls fn for every partial of the batch's runs, read back
// from their tables (the changelog carries every partial, each under its
// own key: runchunk.go).
func (b *Batch) eachRunChange(fn func(key, val []byte) error) error {
	if b.runs == nil {
		return nil
	}
	if err := b.runs.finish(); err != nil {
		return err
	}
	pl := len(runPrefix(nil, b.runs.scope, 0, 0)) // where an entry's key group starts
	for _, path := range b.runs.paths {
		if err := b.s.eachTableEntry(path, func(k, v []byte) error { return eachPartialOf(k, v, pl, fn) }); err != nil {
			return err
		}
	}
	return nil
}

// eachTableEntry reads a table written by a runWriter.
func (s *Store) eachTableEntry(path string, fn func(key, val []byte) error) error {
	f, err := s.fs.Open(path)
	if err != nil {
		return fmt.Errorf("read a run: %w", err)
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		f.Close()
		return fmt.Errorf("read a run: %w", err)
	}
	r, err := sstable.NewReader(context.Background(), readable, s.runReadOpt)
	if err != nil {
		readable.Close()
		return fmt.Errorf("read a run: %w", err)
	}
	defer r.Close()
	it, err := r.NewIter(sstable.NoTransforms, nil, nil, sstable.AssertNoBlobHandles)
	if err != nil {
		return fmt.Errorf("read a run: %w", err)
	}
	defer it.Close()
	for kv := it.First(); kv != nil; kv = it.Next() {
		v, _, err := kv.Value(nil)
		if err != nil {
			return fmt.Errorf("read a run: %w", err)
		}
		if err := fn(kv.K.UserKey, v); err != nil {
			return err
		}
	}
	return it.Error()
}

// runScan is one run's entries of a window, in (key group, key) order.
type runScan struct {
	it       *pebble.Iterator
	pl       int // where the stored key group starts
	kg       uint16
	pre      uint64 // the key's first 8 bytes, big-endian (zero-padded)
	key, val []byte
	// chunk reads the chunk at the iterator (runchunk.go), inChunk set.
	chunk   chunkReader
	inChunk bool
}

// before orders runs by their current entries' (key group, key).
func (r *runScan) before(o *runScan) bool {
	if r.kg != o.kg {
		return r.kg < o.kg
	}
	if r.pre != o.pre {
		return r.pre < o.pre
	}
	return bytes.Compare(r.key, o.key) < 0
}

func (r *runScan) next(groups map[uint16]bool, first bool) (bool, error) {
	for {
		if r.inChunk {
			ok, err := r.chunk.next()
			if err != nil {
				return false, err
			}
			if ok {
				r.key, r.val = r.chunk.key, r.chunk.val
				r.setPre()
				return true, nil
			}
			r.inChunk = false
		}
		var valid bool
		if first {
			valid, first = r.it.First(), false
		} else {
			valid = r.it.Next()
		}
		if !valid {
			return false, r.it.Error()
		}
		k := r.it.Key()
		if len(k) < r.pl+2+deltaIDLen {
			return false, errCorruptKey
		}
		stored := binary.BigEndian.Uint16(k[r.pl:])
		r.kg = realKG(stored)
		if groups != nil && !groups[r.kg] {
			continue
		}
		if isChunkKG(stored) {
			if err := r.chunk.reset(r.it.Value()); err != nil {
				return false, err
			}
			r.inChunk = true
			continue
		}
		r.key, r.val = k[r.pl+2:len(k)-deltaIDLen], r.it.Value()
		r.setPre()
		return true, nil
	}
}

func (r *runScan) setPre() {
	var pre [8]byte
	copy(pre[:], r.key)
	r.pre = binary.BigEndian.Uint64(pre[:])
}

// DeltaScan is ScanDeltas's cursor: the window's classic partials and its
// runs merged by group key, a group's partials one after another.
type DeltaScan struct {
	p       *Pending
	window  int64
	groups  []uint16
	classic *WindowScan
	cok     bool
	ckg     uint16
	ckey    []byte
	cval    []byte
	runs    runHeap
	set     map[uint16]bool
	top     *runScan // the run whose entry was returned last (advanced by Next)
	fromC   bool     // the classic scan's entry was returned last
	started bool
	err     error
}

// runHeap is a min-heap of runs by their current entries (its own, not
// container/heap's: no interface calls on the close's hottest path).
type runHeap []*runScan

func (h runHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// down restores the order below i after h[i] moved forward.
func (h runHeap) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].before(h[c]) {
			c++
		}
		if !h[c].before(h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// pop removes the least run.
func (h *runHeap) pop() {
	old := *h
	n := len(old) - 1
	old[0] = old[n]
	*h = old[:n]
	h.down(0)
}

func (d *DeltaScan) start() error {
	d.started = true
	set := d.groupSet()
	// An iterator per run reads it: on the store, as runs are never
	// pending.
	err := d.p.s.eachRun(d.p.stream, d.window, func(pre []byte, _ uint64, _ bool) error {
		rit, err := d.p.s.db.NewIter(&pebble.IterOptions{LowerBound: append(slices.Clone(pre), 0), UpperBound: bumped(pre)})
		if err != nil {
			return err
		}
		rs := &runScan{it: rit, pl: len(pre)}
		ok, err := rs.next(set, true)
		if err != nil || !ok {
			rit.Close()
			return err
		}
		d.runs = append(d.runs, rs)
		return nil
	})
	if err != nil {
		return err
	}
	d.runs.init()
	d.classic = &WindowScan{p: d.p, window: d.window, groups: d.groups, deltas: true}
	d.ckg, d.ckey, d.cval, d.cok = d.classic.Next()
	return nil
}

// Next moves to the next partial; false at the end or on error (Err).
func (d *DeltaScan) Next() (kg uint16, key, val []byte, ok bool) {
	if d.err != nil {
		return 0, nil, nil, false
	}
	if !d.started {
		if d.err = d.start(); d.err != nil {
			return 0, nil, nil, false
		}
	} else if d.fromC {
		d.ckg, d.ckey, d.cval, d.cok = d.classic.Next()
	} else if d.top != nil {
		ok, err := d.top.next(d.groupSet(), false)
		if err != nil {
			d.err = err
			return 0, nil, nil, false
		}
		if ok {
			d.runs.down(0)
		} else {
			d.runs.pop()
			if err := d.top.it.Close(); err != nil {
				d.err = err
				return 0, nil, nil, false
			}
		}
	}
	d.fromC, d.top = false, nil
	if !d.cok && d.classic.err != nil {
		d.err = d.classic.err
		return 0, nil, nil, false
	}
	if len(d.runs) == 0 {
		if !d.cok {
			return 0, nil, nil, false
		}
		d.fromC = true
		return d.ckg, d.ckey, d.cval, true
	}
	r := d.runs[0]
	if d.cok && (d.ckg < r.kg || d.ckg == r.kg && bytes.Compare(d.ckey, r.key) <= 0) {
		d.fromC = true
		return d.ckg, d.ckey, d.cval, true
	}
	d.top = r
	return r.kg, r.key, r.val, true
}

// groupSet is the key groups filter of the runs (nil: all).
func (d *DeltaScan) groupSet() map[uint16]bool {
	if d.groups == nil {
		return nil
	}
	if d.set == nil {
		d.set = make(map[uint16]bool, len(d.groups))
		for _, g := range d.groups {
			d.set[g] = true
		}
	}
	return d.set
}

// Close releases the cursor; it returns the first error met.
func (d *DeltaScan) Close() error {
	for _, r := range d.runs {
		if err := r.it.Close(); err != nil && d.err == nil {
			d.err = err
		}
	}
	d.runs = nil
	if d.classic != nil {
		if err := d.classic.Close(); err != nil && d.err == nil {
			d.err = err
		}
	}
	return d.err
}
