package state

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// scanAll lists a cursor's entries as "kg/key=val".
func scanAll(t *testing.T, sc interface {
	Next() (uint16, []byte, []byte, bool)
	Close() error
}) []string {
	t.Helper()
	var out []string
	for {
		kg, key, val, ok := sc.Next()
		if !ok {
			break
		}
		out = append(out, fmt.Sprintf("%d/%x=%s", kg, key, val))
	}
	if err := sc.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// byGroup sorts each group's consecutive entries ("kg/key=val") by value.
func byGroup(l []string) []string {
	out := slices.Clone(l)
	group := func(x string) string { return x[:strings.IndexByte(x, '=')] }
	for i := 0; i < len(out); {
		j := i + 1
		for j < len(out) && group(out[j]) == group(out[i]) {
			j++
		}
		slices.Sort(out[i:j])
		i = j
	}
	return out
}

// TestGroupDeltas: a window's groups and deltas, some committed and some
// pending, in several key groups and the NULL key's: ScanWindow sees the
// groups only, ScanDeltas the deltas only, each under its group's key
// group and key, in (key group, key) order, a group's deltas together;
// DeleteWindowGroups and DropMovedGroups take deltas with their groups.
//
// With runs, the commit's partials are ingested as runs (runs.go), the
// evicted ones stay classic: the scans merge both.
func TestGroupDeltas(t *testing.T) {
	for _, runs := range []bool{false, true} {
		t.Run(fmt.Sprintf("runs=%v", runs), func(t *testing.T) { testGroupDeltas(t, runs) })
	}
}

func testGroupDeltas(t *testing.T, runs bool) {
	st, err := Open(t.TempDir(), nil, Options{MinRunPartials: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	scope := Scope("s", 0)
	key := func(i int) []byte { return binary.BigEndian.AppendUint64([]byte{1}, uint64(i)) } // self-delimiting, as exec's keys
	kgs := []uint16{3, 5, NullGroup}
	var wantGroups, wantDeltas []string
	p := st.NewPending(scope)
	defer p.Close()
	b := st.NewScopedBatch("s", 0)
	var w GroupWrites
	seq := uint64(0)
	for _, kg := range kgs {
		for i := 0; i < 3; i++ {
			k := key(int(kg)*10 + i)
			if i != 1 { // key 1 has deltas only
				if err := b.PutGroup(7, kg, k, []byte("base")); err != nil {
					t.Fatal(err)
				}
				wantGroups = append(wantGroups, fmt.Sprintf("%d/%x=base", kg, k))
			}
			for d := 0; d < i+1; d++ { // ids out of order: a later gen first
				seq++
				id := DeltaID{Gen: uint64(2 - d), Seq: seq}
				v := []byte(fmt.Sprintf("d%d", seq))
				if d%2 == 0 {
					if err := p.PutDelta(7, kg, k, id, v); err != nil {
						t.Fatal(err)
					}
				} else {
					w.PutDelta(7, kg, k, id, v) // with the commit
				}
			}
		}
	}
	// An other window's group and delta, which no scan of window 7 sees.
	if err := b.PutGroup(8, 3, key(1), []byte("other")); err != nil {
		t.Fatal(err)
	}
	w.PutDelta(8, 3, key(1), DeltaID{}, []byte("other"))
	none := st.NewPending(scope)
	defer none.Close()
	if runs {
		if _, err := none.OpenRuns(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.AbsorbSorted(none, &w, nil); err != nil {
		t.Fatal(err)
	}
	if got := b.runs != nil && len(b.runs.paths) == 2; got != runs {
		t.Fatalf("runs written: %v, want %v", got, runs)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if dropped, err := st.NewPending(scope).OpenRuns(); err != nil || dropped != 0 {
		t.Fatalf("committed runs dropped at open: %d, %v", dropped, err)
	}
	// The deltas as ScanDeltas must list them: by (kg, key), then by id.
	type d struct {
		kg  uint16
		key []byte
		id  DeltaID
		v   string
	}
	var ds []d
	seq = 0
	for _, kg := range kgs {
		for i := 0; i < 3; i++ {
			for j := 0; j < i+1; j++ {
				seq++
				ds = append(ds, d{kg, key(int(kg)*10 + i), DeltaID{Gen: uint64(2 - j), Seq: seq}, fmt.Sprintf("d%d", seq)})
			}
		}
	}
	slices.SortStableFunc(ds, func(x, y d) int {
		if x.kg != y.kg {
			return int(x.kg) - int(y.kg)
		}
		if c := slices.Compare(x.key, y.key); c != 0 {
			return c
		}
		return int(x.id.Gen) - int(y.id.Gen)
	})
	for _, x := range ds {
		wantDeltas = append(wantDeltas, fmt.Sprintf("%d/%x=%s", x.kg, x.key, x.v))
	}
	for _, groups := range [][]uint16{nil, kgs} {
		if got := scanAll(t, p.ScanWindow(7, groups)); !slices.Equal(got, wantGroups) {
			t.Fatalf("groups %v: ScanWindow\n got %v\nwant %v", groups, got, wantGroups)
		}
		// A group's partials come together, in no set order: they merge
		// exactly (runs come by group key, each run's after the classic).
		if got := scanAll(t, p.ScanDeltas(7, groups)); !slices.Equal(byGroup(got), byGroup(wantDeltas)) {
			t.Fatalf("groups %v: ScanDeltas\n got %v\nwant %v", groups, got, wantDeltas)
		}
	}
	if got := scanAll(t, p.ScanDeltas(7, []uint16{5})); len(got) != 6 || got[0] != wantDeltas[6] {
		t.Fatalf("key group 5's deltas: %v", got)
	}
	b = st.NewScopedBatch("s", 0)
	if err := b.Absorb(p); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}

	// A partition count on which partition 0 owns key group 3 and not 5:
	// 5's deltas go, the NULL key's stay.
	n := 0
	for c := 2; c <= 960; c++ {
		if Divides(c) && OwnerOf(3, c) == 0 && OwnerOf(5, c) != 0 {
			n = c
			break
		}
	}
	if n == 0 {
		t.Fatal("no partition count separates key groups 3 and 5")
	}
	if _, _, err := st.DropMovedGroups("s", 0, n); err != nil {
		t.Fatal(err)
	}
	got := scanAll(t, st.NewPending(scope).ScanDeltas(7, nil))
	for _, x := range got {
		if x[:2] == "5/" {
			t.Fatalf("a delta of a moved key group stayed: %v", got)
		}
	}
	if len(got) != 12 {
		t.Fatalf("deltas of key groups 3 and NULL after the drop: %v", got)
	}

	b = st.NewScopedBatch("s", 0)
	if err := b.DeleteWindowGroups(7, []uint16{3}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	q := st.NewPending(scope)
	defer q.Close()
	if got := scanAll(t, q.ScanDeltas(7, nil)); len(got) != 6 || got[0][:6] != "65535/" {
		t.Fatalf("after deleting key group 3 of window 7, the NULL key's deltas should remain: %v", got)
	}
	if got := scanAll(t, q.ScanDeltas(8, nil)); len(got) != 1 {
		t.Fatalf("window 8's delta: %v", got)
	}
}
