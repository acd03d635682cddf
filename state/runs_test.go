package state

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestRunsAtomicWithOffsets: a commit's partials go to a run, ingested
// before the batch holding the input offset and the run's marker. A crash
// between the two (simulated: the run ingested, the batch never written,
// the store closed) must leave, once the task reopens, neither the
// partials nor the offset; a commit written whole must leave both, and
// its changelog (EachChange) must carry every partial, so a store rebuilt
// from it scans the same.
func TestRunsAtomicWithOffsets(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir, nil, Options{MinRunPartials: 8})
	if err != nil {
		t.Fatal(err)
	}
	scope := Scope("s", 0)
	key := func(i int) []byte { return binary.BigEndian.AppendUint64([]byte{1}, uint64(i)) }
	var changelog [][2][]byte
	commit := func(from, to int, offset int64, whole bool) {
		t.Helper()
		p := runsPending(t, st, scope)
		defer p.Close()
		var w GroupWrites
		for i := from; i < to; i++ {
			w.PutDelta(7, uint16(i%3), key(i%20), DeltaID{Gen: uint64(offset), Seq: uint64(i)}, []byte(fmt.Sprint(i)))
		}
		b := st.NewScopedBatch("s", 0)
		defer b.Close()
		if err := b.AbsorbSorted(p, &w, nil); err != nil {
			t.Fatal(err)
		}
		if err := b.PutPartition(0, PartitionMeta{Offset: offset}); err != nil {
			t.Fatal(err)
		}
		if b.runs == nil || len(b.runs.paths) != 1 {
			t.Fatal("no run written")
		}
		changelog = append(changelog, commitOrCrash(t, b, whole)...)
	}
	scan := func(st *Store) []string { return scanPartials(t, st, scope, 7) }
	offset := func(st *Store) int64 {
		t.Helper()
		parts, err := st.Partitions("s")
		if err != nil {
			t.Fatal(err)
		}
		return parts[0].Offset
	}

	commit(0, 30, 100, true)
	want := scan(st)
	if len(want) != 30 {
		t.Fatalf("%d partials after the first commit, want 30", len(want))
	}
	commit(30, 60, 200, false) // crashes after its ingest
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err = Open(dir, nil, Options{MinRunPartials: 8}); err != nil {
		t.Fatal(err)
	}
	defer func() { st.Close() }()
	if got := scan(st); !slices.Equal(got, want) || offset(st) != 100 {
		t.Fatalf("after a crash between a run's ingest and its batch: offset %d (want 100), partials\n got %v\nwant %v", offset(st), got, want)
	}
	// The input since offset 100 is read again and committed whole.
	commit(30, 60, 200, true)
	want = scan(st)
	if len(want) != 60 || offset(st) != 200 {
		t.Fatalf("after the replayed commit: offset %d, %d partials (want 200, 60)", offset(st), len(want))
	}

	moved := restored(t, changelog)
	if got := scan(moved); !slices.Equal(got, want) || offset(moved) != 200 {
		t.Fatalf("restored from the changelog: offset %d, partials\n got %v\nwant %v", offset(moved), got, want)
	}
}

// commitOrCrash commits b and returns its changelog records when whole;
// else it ingests b's runs only, as a crash between the two leaves them
// (nothing logged).
func commitOrCrash(t *testing.T, b *Batch, whole bool) [][2][]byte {
	t.Helper()
	if !whole {
		if err := b.ingestRuns(); err != nil {
			t.Fatal(err)
		}
		return nil
	}
	changes := changesOf(t, b)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	return changes
}

// changesOf is b's changelog records (EachChange), copied.
func changesOf(t *testing.T, b *Batch) [][2][]byte {
	t.Helper()
	var out [][2][]byte
	if err := b.EachChange(func(k, v []byte) error {
		out = append(out, [2][]byte{slices.Clone(k), slices.Clone(v)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// restored is a store on an empty disk with partition 0 of "s" rebuilt
// from changelog (a commit's records, as EachChange gives them), as
// another node restores it.
func restored(t *testing.T, changelog [][2][]byte) *Store {
	t.Helper()
	st, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	replay(t, st, changelog)
	return st
}

// replay applies changelog to partition 0 of "s" in st.
func replay(t *testing.T, st *Store, changelog [][2][]byte) {
	t.Helper()
	r := st.NewRestore("s", 0)
	defer r.Close()
	for _, c := range changelog {
		if err := r.Apply(c[0], EncodeChange(c[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Write(int64(len(changelog))); err != nil {
		t.Fatal(err)
	}
}

// TestWindowRunsBounded: a window gets at most MaxWindowRuns runs (or
// the bound LimitRuns sets), across a restart too; later commits'
// partials of it go into their batches, and the close still sees every
// partial.
func TestWindowRunsBounded(t *testing.T) {
	for _, limit := range []int{0, 6} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) { testWindowRunsBounded(t, limit) })
	}
}

func testWindowRunsBounded(t *testing.T, limit int) {
	bound := MaxWindowRuns
	if limit > 0 {
		bound = limit
	}
	dir := t.TempDir()
	st, err := Open(dir, nil, Options{MinRunPartials: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { st.Close() }()
	scope := Scope("s", 0)
	runs := func() int {
		t.Helper()
		lo, hi := runsOf(scope, 7)
		it, err := st.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		n := 0
		for it.First(); it.Valid(); it.Next() {
			if len(it.Key()) == len(lo)+8 {
				n++
			}
		}
		return n
	}
	n := 0
	commits := func(p *Pending, count int) {
		t.Helper()
		for range count {
			var w GroupWrites
			w.PutDelta(7, 1, []byte{1, byte(n >> 8), byte(n)}, DeltaID{Seq: uint64(n)}, []byte("x"))
			n++
			b := st.NewScopedBatch("s", 0)
			if err := b.AbsorbSorted(p, &w, nil); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	open := func() *Pending {
		t.Helper()
		p := st.NewPending(scope)
		if limit > 0 {
			p.LimitRuns(limit)
		}
		if _, err := p.OpenRuns(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := open()
	commits(p, bound-2)
	p.Close()
	if got := runs(); got != bound-2 {
		t.Fatalf("%d runs after %d commits", got, bound-2)
	}
	p = open() // restarted
	defer p.Close()
	commits(p, 5)
	if got := runs(); got != bound {
		t.Fatalf("%d runs, want the bound %d", got, bound)
	}
	if got := scanAll(t, p.ScanDeltas(7, nil)); len(got) != n {
		t.Fatalf("%d partials scanned, want %d", len(got), n)
	}
}

// scanPartials is window's partials in scope as its close reads them
// (runs opened first), a group's in value order.
func scanPartials(t *testing.T, st *Store, scope string, window int64) []string {
	t.Helper()
	p := runsPending(t, st, scope)
	defer p.Close()
	return byGroup(scanAll(t, p.ScanDeltas(window, nil)))
}

// runsPending is a task's pending groups of scope, its runs opened.
func runsPending(t *testing.T, st *Store, scope string) *Pending {
	t.Helper()
	p := st.NewPending(scope)
	if _, err := p.OpenRuns(); err != nil {
		p.Close()
		t.Fatal(err)
	}
	return p
}

// TestRunsMergedInOrder: a window's close reads the partials of any number
// of runs (1 to 40, of random sizes, so they run out in any order) merged
// with its classic ones in (key group, key) order, each exactly once.
func TestRunsMergedInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, k := range []int{1, 2, 3, 5, 8, 17, 40} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			st, err := Open(t.TempDir(), nil, Options{MinRunPartials: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			scope := Scope("s", 0)
			var want []string
			seq := uint64(0)
			for run := 0; run <= k; run++ {
				p := runsPending(t, st, scope)
				var w GroupWrites
				n := rng.IntN(30)
				for range n {
					kg, key := uint16(rng.IntN(3)), []byte{1, byte(rng.IntN(12)), byte(rng.IntN(4))}
					val := fmt.Sprintf("r%02d-%d", run, seq)
					seq++
					if run == k { // the last commit's are classic: fewer than MinRunPartials
						if err := p.PutDelta(7, kg, key, DeltaID{Gen: 1, Seq: seq}, []byte(val)); err != nil {
							t.Fatal(err)
						}
					} else {
						w.PutDelta(7, kg, key, DeltaID{Gen: 1, Seq: seq}, []byte(val))
					}
					want = append(want, fmt.Sprintf("%d/%x=%s", kg, key, val))
				}
				b := st.NewScopedBatch("s", 0)
				if run == k {
					if err := b.Absorb(p); err != nil {
						t.Fatal(err)
					}
				} else if err := b.AbsorbSorted(p, &w, nil); err != nil {
					t.Fatal(err)
				}
				if err := b.Commit(); err != nil {
					t.Fatal(err)
				}
				p.Close()
			}
			slices.Sort(want)
			slices.SortStableFunc(want, cmpGroupOf)
			if got := scanPartials(t, st, scope, 7); !slices.Equal(got, want) {
				t.Fatalf("%d runs: the close reads\n%v\nwant\n%v", k, got, want)
			}
		})
	}
}
