package state

import (
	"bytes"
	"fmt"
	"slices"
)

// A window's partials would otherwise only grow until its close: a run per
// commit that made one (up to the window's run bound, past which they went
// through the memtable) and a classic partial for each other. An hour's or
// a day's window committed every second kept a partial for every group
// each commit touched (its disk grew with its events, not its groups), and
// its close merged them all. Folding rewrites a window's stored partials
// as one run holding a single partial per group, within a commit (so it
// is atomic with the input offsets and logged like any write): the old
// runs and classic partials are range-deleted, which the changelog
// carries as a tombstone per partial (changelog.go), and the new run is
// ingested with the commit's own.

// Folder merges the encodings of one group's partials into one (exec's
// Aggregator.MergedEncoding), appended to dst.
type Folder func(dst []byte, encs [][]byte) ([]byte, error)

// foldClassic is how many classic partials a window takes (committed
// since the task opened or its last fold) before its partials are folded:
// they go through Pebble's memtable, flushes and compactions, and the
// close reads them all.
const foldClassic = 1 << 20

// FoldRuns folds the stored partials of each window of p that reached its
// run bound, or took foldClassic classic partials, into one run (see
// above): those of the store, not p's pending ones (the commit writes
// them). nextID names the folded partials. It reports how many windows it
// folded. Windows in closing (which the commit deletes) are not folded.
// Call it before the commit's AbsorbSorted (whose runs count from the
// folded one).
func (b *Batch) FoldRuns(p *Pending, fold Folder, nextID func() DeltaID, closing []int64) (int, error) {
	if !p.runsOpen {
		return 0, nil
	}
	// The commit deletes the closing windows: their counts go.
	for _, w := range closing {
		delete(p.runsIn, w)
		delete(p.classicIn, w)
		delete(p.foldedIn, w)
	}
	var due []int64
	for w, n := range p.runsIn {
		if n >= p.WindowRuns() {
			due = append(due, w)
		}
	}
	for w, n := range p.classicIn {
		// Past foldClassic, and past what the last fold wrote: a fold
		// rewrites the whole window, so a window of many groups is not
		// rewritten for a few classic partials each.
		if n >= max(foldClassic, p.foldedIn[w]) && !slices.Contains(due, w) {
			due = append(due, w)
		}
	}
	slices.Sort(due)
	folded := 0
	for _, w := range due {
		did, err := b.foldWindow(p, w, fold, nextID)
		if err != nil {
			return 0, fmt.Errorf("fold the partials of %s: %w", p.stream, err)
		}
		if did {
			folded++
		}
	}
	return folded, nil
}

// foldWindow folds window's stored partials into one new run; did is
// false when the window had none (deleted since its counts were kept).
func (b *Batch) foldWindow(p *Pending, window int64, fold Folder, nextID func() DeltaID) (did bool, err error) {
	// The old runs, to delete: found before the new one exists.
	var old [][]byte
	if err := b.s.eachRun(p.stream, window, func(pre []byte, _ uint64, _ bool) error {
		old = append(old, pre)
		return nil
	}); err != nil {
		return false, err
	}
	// The stored partials, runs and classic, by group: read through an
	// empty pending set, so none of p's (this commit's) come.
	stored := b.s.NewPending(p.stream)
	defer stored.Close()
	scan := stored.ScanDeltas(window, nil)
	if b.runs == nil {
		b.runs = &runWriter{s: b.s}
	}
	r := b.runs
	if err := r.finish(); err != nil {
		scan.Close()
		return false, err
	}
	r.scope, r.id = p.stream, p.nextRun
	p.nextRun++
	var (
		kg    uint16
		key   []byte
		ends  []int // where each of the group's partials ends in arena
		arena []byte
		encs  [][]byte
		val   []byte
		// written counts the folded partials.
		written int
	)
	// flush writes the group gathered (its partials' values in arena),
	// folded when it has more than one.
	flush := func() error {
		if len(ends) == 0 {
			return nil
		}
		v := arena
		if len(ends) > 1 {
			encs = encs[:0]
			start := 0
			for _, e := range ends {
				encs = append(encs, arena[start:e])
				start = e
			}
			var err error
			if val, err = fold(val[:0], encs); err != nil {
				return err
			}
			v = val
		}
		ends, arena = ends[:0], arena[:0]
		written++
		return r.addPartial(window, kg, key, nextID(), v)
	}
	for {
		gkg, gkey, gval, ok := scan.Next()
		if !ok {
			break
		}
		if len(ends) > 0 && (gkg != kg || !bytes.Equal(gkey, key)) {
			if err := flush(); err != nil {
				scan.Close()
				return false, err
			}
		}
		if len(ends) == 0 {
			kg, key = gkg, append(key[:0], gkey...)
		}
		arena = append(arena, gval...) // the scan's value lasts until its next step
		ends = append(ends, len(arena))
	}
	if err := scan.Close(); err != nil {
		return false, err
	}
	if err := flush(); err != nil {
		return false, err
	}
	if err := r.finish(); err != nil {
		return false, err
	}
	if written == 0 && len(old) == 0 {
		// Nothing stored (the window went with an earlier commit).
		delete(p.runsIn, window)
		delete(p.classicIn, window)
		return false, nil
	}
	// The new run's marker, then the old runs and classic partials go
	// (the new run's id is past theirs: its range is not among them).
	runs := len(r.marks) // the new run, unless the window had no partial
	for _, m := range r.marks {
		if err := b.b.Set(m, nil, nil); err != nil {
			return false, err
		}
	}
	r.marks = r.marks[:0]
	for _, pre := range old {
		if err := b.b.DeleteRange(pre, bumped(pre), nil); err != nil {
			return false, err
		}
	}
	for _, rg := range classicRanges(p.stream, window) {
		if err := b.b.DeleteRange(rg[0], rg[1], nil); err != nil {
			return false, err
		}
	}
	p.runsIn[window] = runs
	delete(p.classicIn, window)
	p.foldedIn[window] = written
	return true, nil
}

// classicRanges are the key ranges of window's classic partials: their
// stored key groups are deltaKG's, below the runs' (runKG) and, for the
// NULL key group, just above.
func classicRanges(scope string, window int64) [2][2][]byte {
	return [2][2][]byte{
		{GroupKey(scope, window, deltaKGBit, nil), GroupKey(scope, window, runKG, nil)},
		{GroupKey(scope, window, nullDeltaKG, nil), GroupKey(scope, window, nullDeltaKG+1, nil)},
	}
}
