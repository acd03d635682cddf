package state

import (
	"fmt"
	"slices"
	"testing"
)

// TestRekeyScope: state written the way releases before KeyGroupsKey
// wrote it on 7 partitions (key group = hash mod 7) holds accumulators,
// groups, classic partials, partials in runs and the NULL key's group.
// RekeyScope puts each under its key's group of 960, the NULL key's where
// it was, every value kept, and records KeyGroupsKey; the changelog (the
// watch of the partition's state) carries the moves; a second run moves
// nothing.
func TestRekeyScope(t *testing.T) {
	st, err := Open(t.TempDir(), nil, Options{MinRunPartials: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	scope := Scope("s", 0)
	keys := make([][]byte, 30)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key%d", i)
	}
	old := func(k []byte) uint16 { return uint16(PositiveHash(k) % 7) }
	// Accumulators and groups, and a few classic partials.
	b := st.NewScopedBatch("s", 0)
	for i, k := range keys {
		if err := b.PutAcc(old(k), k, 5, fmt.Appendf(nil, "acc%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PutAcc(NullGroup, nil, 5, []byte("accnull")); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	commit := func(w *GroupWrites) {
		t.Helper()
		p := runsPending(t, st, scope)
		defer p.Close()
		b := st.NewScopedBatch("s", 0)
		defer b.Close()
		if err := b.AbsorbSorted(p, w, nil); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	var w GroupWrites
	for i, k := range keys {
		w.Put(7, old(k), k, fmt.Appendf(nil, "base%d", i))
	}
	w.Put(7, NullGroup, nil, []byte("basenull"))
	for i := range 3 {
		w.PutDelta(7, old(keys[i]), keys[i], DeltaID{Gen: 1, Seq: uint64(i)}, fmt.Appendf(nil, "classic%d", i))
	}
	commit(&w)
	// Enough partials for runs (chunks of one group's partials).
	var r GroupWrites
	for i := range 60 {
		k := keys[i%len(keys)]
		r.PutDelta(7, old(k), k, DeltaID{Gen: 2, Seq: uint64(i)}, fmt.Appendf(nil, "run%d", i))
	}
	r.PutDelta(7, NullGroup, nil, DeltaID{Gen: 2, Seq: 99}, []byte("runnull"))
	commit(&r)
	runs, err := st.GroupWindows(scope)
	if err != nil || !slices.Contains(runs, 7) {
		t.Fatalf("windows %v, %v", runs, err)
	}

	// What each scan should give with every key under its right group:
	// the same entries, values and order as state written that way.
	type entry struct {
		kg       uint16
		key, val string
	}
	expect := func(f func(k []byte) uint16) (accs, groups, partials []string) {
		ref, err := Open(t.TempDir(), nil, Options{MinRunPartials: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		defer ref.Close()
		rb := ref.NewScopedBatch("s", 0)
		for i, k := range keys {
			rb.PutAcc(f(k), k, 5, fmt.Appendf(nil, "acc%d", i))
		}
		rb.PutAcc(NullGroup, nil, 5, []byte("accnull"))
		if err := rb.Commit(); err != nil {
			t.Fatal(err)
		}
		var all GroupWrites
		for i, k := range keys {
			all.Put(7, f(k), k, fmt.Appendf(nil, "base%d", i))
		}
		all.Put(7, NullGroup, nil, []byte("basenull"))
		for i := range 3 {
			all.PutDelta(7, f(keys[i]), keys[i], DeltaID{Gen: 1, Seq: uint64(i)}, fmt.Appendf(nil, "classic%d", i))
		}
		for i := range 60 {
			k := keys[i%len(keys)]
			all.PutDelta(7, f(k), k, DeltaID{Gen: 2, Seq: uint64(i)}, fmt.Appendf(nil, "run%d", i))
		}
		all.PutDelta(7, NullGroup, nil, DeltaID{Gen: 2, Seq: 99}, []byte("runnull"))
		p := runsPending(t, ref, scope)
		b := ref.NewScopedBatch("s", 0)
		if err := b.AbsorbSorted(p, &all, nil); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		p.Close()
		return scanState(t, ref, scope)
	}
	wantAccs, wantGroups, wantPartials := expect(KeyGroup)
	if a, g, _ := scanState(t, st, scope); slices.Equal(a, wantAccs) || slices.Equal(g, wantGroups) {
		t.Fatal("the state written by hash mod 7 already reads as by 960: the test shows nothing")
	}

	stop := st.Watch("s", 0)
	moved, err := st.RekeyScope("s", 0, func(k []byte) (uint16, error) { return KeyGroup(k), nil })
	changes := stop()
	if err != nil {
		t.Fatal(err)
	}
	if moved == 0 || len(changes) < 2*moved {
		t.Fatalf("%d entries moved, %d changes logged", moved, len(changes))
	}
	accs, groups, partials := scanState(t, st, scope)
	for _, c := range []struct {
		what      string
		got, want []string
	}{{"accumulators", accs, wantAccs}, {"groups", groups, wantGroups}, {"partials", partials, wantPartials}} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s after RekeyScope:\n got %v\nwant %v", c.what, c.got, c.want)
		}
	}
	if ok, err := st.HasKeyGroups("s", 0); !ok || err != nil {
		t.Fatalf("KeyGroupsKey not recorded: %v %v", ok, err)
	}
	if again, err := st.RekeyScope("s", 0, func(k []byte) (uint16, error) { return KeyGroup(k), nil }); again != 0 || err != nil {
		t.Fatalf("a second run moved %d (%v)", again, err)
	}
}

// scanState reads partition scope's accumulators, window 7's groups and
// its partials (runs merged in), as "kg/key=val".
func scanState(t *testing.T, st *Store, scope string) (accs, groups, partials []string) {
	t.Helper()
	if err := st.Accs(scope, func(kg uint16, key []byte, w int64, val []byte) error {
		accs = append(accs, fmt.Sprintf("%d/%x/%d=%s", kg, key, w, val))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	p := runsPending(t, st, scope)
	defer p.Close()
	return accs, scanAll(t, p.ScanWindow(7, nil)), byGroup(scanAll(t, p.ScanDeltas(7, nil)))
}
