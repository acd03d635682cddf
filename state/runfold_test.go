package state

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"testing"
)

// sumFolder folds partials that are decimal counts: their sum.
func sumFolder(dst []byte, encs [][]byte) ([]byte, error) {
	n := 0
	for _, e := range encs {
		v, err := strconv.Atoi(string(e))
		if err != nil {
			return nil, err
		}
		n += v
	}
	return strconv.AppendInt(dst, int64(n), 10), nil
}

// TestFoldRuns: a window at its run bound, with runs, classic partials
// past the bound (in several key groups and the NULL key's) and evicted
// partials pending, is folded by the next commit into one run of one
// partial per group, each the sum of the group's stored partials; the
// pending ones and the commit's own stay apart. Another window is left
// alone. Its changelog rebuilds the same state on an empty disk, and a
// fold the commit never wrote (a crash before its batch) leaves the
// state as it was.
func TestFoldRuns(t *testing.T) {
	const bound = 4
	dir := t.TempDir()
	opts := Options{MinRunPartials: 1, MaxWindowRuns: bound}
	st, err := Open(dir, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { st.Close() }()
	scope := Scope("s", 0)
	key := func(i int) []byte { return binary.BigEndian.AppendUint64([]byte{1}, uint64(i)) }
	kgOf := func(i int) uint16 {
		if i%7 == 0 {
			return NullGroup
		}
		return uint16(i % 3)
	}
	// want is each group's sum per window, from what was committed.
	want := map[int64]map[string]int{7: {}, 8: {}}
	seq := uint64(0)
	nextID := func() DeltaID { seq++; return DeltaID{Gen: 1, Seq: seq} }
	var changelog [][2][]byte
	p := runsPending(t, st, scope)
	defer func() { p.Close() }()
	commit := func(from, to int, wins []int64, fold, whole bool) {
		t.Helper()
		var w GroupWrites
		for i := from; i < to; i++ {
			for _, win := range wins {
				w.PutDelta(win, kgOf(i%25), key(i%25), nextID(), []byte(strconv.Itoa(i)))
				want[win][fmt.Sprintf("%d/%x", kgOf(i%25), key(i%25))] += i
			}
		}
		b := absorbFolding(t, st, p, &w, fold, nextID)
		defer b.Close()
		changelog = append(changelog, commitOrCrash(t, b, whole)...)
	}
	// Window 7 gets two commits past its bound (classic partials), window
	// 8 stays below it.
	for c := range bound + 2 {
		wins := []int64{7}
		if c < 2 {
			wins = append(wins, 8)
		}
		commit(c*30, c*30+30, wins, false, true)
	}
	if n := p.runsIn[7]; n != bound {
		t.Fatalf("window 7 has %d runs before the fold, want %d", n, bound)
	}
	// Partials evicted since the last commit: pending, written by the
	// fold's commit, not folded into its run.
	for i := 0; i < 10; i++ {
		if err := p.PutDelta(7, kgOf(i), key(i), nextID(), []byte("1000")); err != nil {
			t.Fatal(err)
		}
		want[7][fmt.Sprintf("%d/%x", kgOf(i), key(i))] += 1000
	}
	sums := func(st *Store, window int64) (map[string]int, int) {
		t.Helper()
		got := map[string]int{}
		parts := scanPartials(t, st, scope, window)
		for _, e := range parts {
			g, v, _ := cutLast(e, "=")
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			got[g] += n
		}
		return got, len(parts)
	}
	before7, parts7 := sums(st, 7)
	if parts7 != 6*30 {
		t.Fatalf("%d partials of window 7 before the fold, want %d", parts7, 6*30)
	}

	// A fold whose commit crashes between its runs' ingest and its batch.
	p.LimitRuns(1) // both windows due
	b := st.NewScopedBatch("s", 0)
	if n, err := b.FoldRuns(p, sumFolder, nextID, nil); err != nil || n != 2 {
		t.Fatalf("folded %d windows (%v), want 2", n, err)
	}
	if err := b.ingestRuns(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	p.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err = Open(dir, nil, opts); err != nil {
		t.Fatal(err)
	}
	p = runsPending(t, st, scope)
	p.LimitRuns(bound)
	for i := 0; i < 10; i++ { // evicted again after the restart
		if err := p.PutDelta(7, kgOf(i), key(i), nextID(), []byte("1000")); err != nil {
			t.Fatal(err)
		}
	}
	if got, n := sums(st, 7); n != parts7 || !mapsEqual(got, before7) {
		t.Fatalf("after a fold that never committed: %d partials (want %d), sums differ: %v", n, parts7, got)
	}

	commit(500, 520, []int64{7, 8}, true, true) // folds window 7 only
	got7, n7 := sums(st, 7)
	if !mapsEqual(got7, want[7]) {
		t.Fatalf("window 7 after its fold:\n got %v\nwant %v", got7, want[7])
	}
	// One partial per group folded, then the commit's own and the
	// pending ones.
	if groups := len(want[7]); n7 != groups+20+10 {
		t.Fatalf("%d partials of window 7 after its fold, want %d", n7, groups+30)
	}
	if n := p.runsIn[7]; n != 2 {
		t.Fatalf("window 7 has %d runs after its fold, want 2 (the fold's, the commit's)", n)
	}
	got8, n8 := sums(st, 8)
	if !mapsEqual(got8, want[8]) || n8 != 2*30+20 {
		t.Fatalf("window 8, not folded: %d partials (want %d), sums %v", n8, 2*30+20, got8)
	}
	lo, hi := classicRanges(scope, 7)[0][0], classicRanges(scope, 7)[0][1]
	if err := st.eachKeyIn(lo, hi, func(k []byte, _ func() []byte) error { return fmt.Errorf("classic partial %x left after the fold", k) }); err != nil {
		t.Fatal(err)
	}

	// A window the commit closes is not folded, and its counts go:
	// window 8 (3 runs) is at a bound of 3, window 7 (2) below it.
	p.LimitRuns(3)
	b = st.NewScopedBatch("s", 0)
	if n, err := b.FoldRuns(p, sumFolder, nextID, []int64{8}); err != nil || n != 0 || p.runsIn[8] != 0 {
		t.Fatalf("folded %d windows (%v) with window 8 closing, want none (its runs counted: %d)", n, err, p.runsIn[8])
	}
	b.Close()

	// The changelog rebuilds both windows.
	moved := restored(t, changelog)
	for _, win := range []int64{7, 8} {
		if got, want := scanPartials(t, moved, scope, win), scanPartials(t, st, scope, win); !slices.Equal(got, want) {
			t.Fatalf("window %d restored from the changelog:\n got %v\nwant %v", win, got, want)
		}
	}

	// A window deleted by a commit that did not fold (its counts kept) is
	// not "folded" later: nothing of it is stored.
	b = st.NewScopedBatch("s", 0)
	if err := b.DeleteWindowGroups(7, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	p.LimitRuns(2)
	b = st.NewScopedBatch("s", 0)
	defer b.Close()
	if n, err := b.FoldRuns(p, sumFolder, nextID, nil); err != nil || n != 0 {
		t.Fatalf("folded %d windows (%v) after window 7 was deleted, want none", n, err)
	}
	if _, ok := p.runsIn[7]; ok {
		t.Fatal("window 7's runs still counted after it was found empty")
	}
}

func cutLast(s, sep string) (string, string, bool) {
	for i := len(s) - len(sep); i >= 0; i-- {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestRunsCrashAfterIngestRestored: a commit's changelog is written
// before its state, so a crash between its runs' ingest and its batch
// leaves runs on disk whose commit the changelog holds. The restore that
// follows drops them before applying the records (which bring the runs
// back, each partial under its own key, marker included): every partial
// counts once, a fold's (the whole window's) too.
func TestRunsCrashAfterIngestRestored(t *testing.T) {
	for _, fold := range []bool{false, true} {
		t.Run(fmt.Sprint("fold=", fold), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{MinRunPartials: 1, MaxWindowRuns: 2} // the third commit folds
			if !fold {
				opts.MaxWindowRuns = 10 // the third commit writes a run
			}
			st, err := Open(dir, nil, opts)
			if err != nil {
				t.Fatal(err)
			}
			scope := Scope("s", 0)
			key := func(i int) []byte { return binary.BigEndian.AppendUint64([]byte{1}, uint64(i)) }
			seq := uint64(0)
			nextID := func() DeltaID { seq++; return DeltaID{Gen: 1, Seq: seq} }
			p := runsPending(t, st, scope)
			want := 0
			var last [][2][]byte
			commit := func(doFold, whole bool) {
				t.Helper()
				var w GroupWrites
				for i := 0; i < 5; i++ {
					w.PutDelta(7, 1, key(i), nextID(), []byte("1"))
					want++
				}
				b := absorbFolding(t, st, p, &w, doFold, nextID)
				defer b.Close()
				last = changesOf(t, b)
				if whole {
					if err := b.Commit(); err != nil {
						t.Fatal(err)
					}
					return
				}
				if err := b.ingestRuns(); err != nil { // then the crash
					t.Fatal(err)
				}
			}
			commit(false, true)
			commit(false, true)
			commit(fold, false) // logged, its runs ingested, its batch lost
			p.Close()
			st.Close()
			if st, err = Open(dir, nil, opts); err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if n, err := st.DropUnmarkedRuns("s", 0); err != nil || n == 0 {
				t.Fatalf("dropped %d runs (%v): want the crashed commit's", n, err)
			}
			replay(t, st, last)
			got := 0
			for _, e := range scanPartials(t, st, scope, 7) {
				_, v, _ := cutLast(e, "=")
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatal(err)
				}
				got += n
			}
			if got != want {
				t.Fatalf("window 7 sums to %d after the restore, want %d", got, want)
			}
		})
	}
}

// absorbFolding is a commit's batch of stream "s", partition 0: with
// fold, exactly one window folded first, then w's writes.
func absorbFolding(t *testing.T, st *Store, p *Pending, w *GroupWrites, fold bool, nextID func() DeltaID) *Batch {
	t.Helper()
	b := st.NewScopedBatch("s", 0)
	if fold {
		if n, err := b.FoldRuns(p, sumFolder, nextID, nil); err != nil || n != 1 {
			b.Close()
			t.Fatalf("folded %d windows (%v), want 1", n, err)
		}
	}
	if err := b.AbsorbSorted(p, w, nil); err != nil {
		b.Close()
		t.Fatal(err)
	}
	return b
}
