package state

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// legacyGroupKey is a group key as written before partition scopes.
func legacyGroupKey(stream string, window int64, kg uint16, key []byte) []byte {
	k := GroupKey(stream, window, kg, key)
	k[0] = legacyGroup
	return k
}

// scopeGroups lists what partition p's scope holds: "window/kg/key".
func scopeGroups(t *testing.T, st *Store, stream string, p int32) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	pn := st.NewPending(Scope(stream, p))
	defer pn.Close()
	ws, err := st.GroupWindows(Scope(stream, p))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		sc := pn.ScanWindow(w, nil)
		for {
			kg, key, _, ok := sc.Next()
			if !ok {
				break
			}
			out[fmt.Sprintf("%d/%d/%s", w, kg, key)] = true
		}
		if err := sc.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Accs(Scope(stream, p), func(kg uint16, key []byte, w int64, _ []byte) error {
		out[fmt.Sprintf("acc %d/%d/%s", w, kg, key)] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMigrateLegacy: groups written before scopes move, each into the
// scope of the partition that owns it, and nothing is lost.
func TestMigrateLegacy(t *testing.T) {
	st, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for kg := uint16(0); kg < 8; kg++ {
		for _, w := range []int64{1000, 2000} {
			if err := st.db.Set(legacyGroupKey("s", w, kg, []byte(fmt.Sprint("k", kg))), []byte("v"), pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}
		ak := AccKey("s", kg, []byte("a"), 7)
		ak[0] = legacyAcc
		if err := st.db.Set(ak, []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for p := int32(0); p < 4; p++ {
		n, err := st.MigrateLegacy("s", p, OwnedGroups(p, 4))
		if err != nil {
			t.Fatal(err)
		}
		total += n
		got := scopeGroups(t, st, "s", p)
		for _, kg := range []uint16{uint16(p), uint16(p) + 4} {
			for _, k := range []string{fmt.Sprintf("1000/%d/k%d", kg, kg), fmt.Sprintf("2000/%d/k%d", kg, kg), fmt.Sprintf("acc 7/%d/a", kg)} {
				if !got[k] {
					t.Errorf("partition %d lacks %s after migration: %v", p, k, got)
				}
			}
		}
		if len(got) != 6 {
			t.Errorf("partition %d holds %d entries, want 6: %v", p, len(got), got)
		}
	}
	if total != 24 {
		t.Fatalf("moved %d entries, want 24", total)
	}
	if n, err := st.MigrateLegacy("s", 0, OwnedGroups(0, 4)); err != nil || n != 0 {
		t.Fatalf("second migration moved %d (%v)", n, err)
	}
}

// TestDropMovedGroups: after 4 -> 8, partition 1 deletes exactly the
// groups that moved to partition 5 (1 + 4k with k odd), keeps its own and
// the NULL key's group.
func TestDropMovedGroups(t *testing.T) {
	// Two windows go by ranges; a hundred (a session index has a window
	// per end) one entry at a time.
	for _, nw := range []int{2, 100} {
		t.Run(fmt.Sprintf("%d windows", nw), func(t *testing.T) { testDropMovedGroups(t, nw) })
	}
}

func testDropMovedGroups(t *testing.T, nw int) {
	st, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b := st.NewScopedBatch("s", 1)
	for _, kg := range append(OwnedGroups(1, 4), NullGroup) {
		for i := range nw {
			if err := b.PutGroup(int64(i)*60_000, kg, []byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.PutAcc(kg, []byte("s"), 5, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	entries, groups, err := st.DropMovedGroups("s", 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	if groups != 120 || entries != 120*(nw+1) {
		t.Fatalf("dropped %d entries of %d groups, want %d of 120", entries, groups, 120*(nw+1))
	}
	got := scopeGroups(t, st, "s", 1)
	for k := range got {
		var w int64
		var kg uint16
		if _, err := fmt.Sscanf(k, "%d/%d/", &w, &kg); err != nil {
			if _, err := fmt.Sscanf(k, "acc %d/%d/", &w, &kg); err != nil {
				t.Fatal(k, err)
			}
		}
		if kg != NullGroup && kg%8 != 1 {
			t.Errorf("group %d of partition 1 survived the cleanup", kg)
		}
	}
	if len(got) != (nw+1)*121 {
		t.Fatalf("%d entries left, want %d", len(got), (nw+1)*121)
	}
	// A count that does not divide 960 drops nothing.
	if e, _, err := st.DropMovedGroups("s", 1, 7); err != nil || e != 0 {
		t.Fatalf("non-divisor count dropped %d (%v)", e, err)
	}
}

func TestScopesAreApart(t *testing.T) {
	st, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for p := int32(0); p < 3; p++ {
		b := st.NewScopedBatch("s", p)
		if err := b.PutGroup(10, NullGroup, nil, binary.AppendUvarint(nil, uint64(p))); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for p := int32(0); p < 3; p++ {
		v, err := st.Group(Scope("s", p), 10, NullGroup, nil)
		if err != nil || len(v) == 0 || v[0] != byte(p) {
			t.Fatalf("partition %d's null group: %v %v", p, v, err)
		}
	}
	b := st.NewScopedBatch("s", 1)
	if err := b.DeleteWindowGroups(10, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if v, _ := st.Group(Scope("s", 1), 10, NullGroup, nil); v != nil {
		t.Fatal("window 10 of partition 1 survived its deletion")
	}
	if v, _ := st.Group(Scope("s", 2), 10, NullGroup, nil); v == nil {
		t.Fatal("deleting partition 1's window took partition 2's")
	}
	if err := st.DropStream("s"); err != nil {
		t.Fatal(err)
	}
	if v, _ := st.Group(Scope("s", 2), 10, NullGroup, nil); v != nil {
		t.Fatal("DropStream left a partition's scope")
	}
}

func TestOwnedCount(t *testing.T) {
	for _, n := range []int{1, 2, 7, 8, 960, 1000} {
		for p := int32(0); p < int32(n); p++ {
			if got, want := OwnedCount(p, n), len(OwnedGroups(p, n)); got != want {
				t.Fatalf("OwnedCount(%d, %d) = %d, want %d", p, n, got, want)
			}
		}
	}
}
