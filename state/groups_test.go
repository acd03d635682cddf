package state

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestPendingLoad checks the sorted batched read of groups against what
// was written: committed, pending (newer), and never written.
func TestPendingLoad(t *testing.T) {
	st, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	want := map[string]string{}
	key := func(i int) []byte { return []byte(fmt.Sprintf("key-%d", i)) }
	for round := 0; round < 5; round++ {
		p := st.NewPending("s")
		b := st.NewBatch("s")
		inPending := map[int]bool{}
		for j := 0; j < 2000; j++ {
			i := rng.IntN(5000)
			v := fmt.Sprintf("v%d-%d", round, j)
			// Once pending, a group's newer versions are pending too (the
			// commit that writes older ones absorbs the pending first).
			if !inPending[i] && rng.IntN(2) == 0 {
				if err := b.PutGroup(int64(i%3), uint16(i%7), key(i), []byte(v)); err != nil {
					t.Fatal(err)
				}
			} else if err := p.Put(int64(i%3), uint16(i%7), key(i), []byte(v)); err != nil {
				t.Fatal(err)
			} else {
				inPending[i] = true
			}
			want[fmt.Sprint(i)] = v
		}
		if err := b.Commit(); err != nil { // the pending ones stay pending: newer
			t.Fatal(err)
		}
		var refs []GroupRef
		var ids []int
		for j := 0; j < 3000; j++ {
			i := rng.IntN(6000)
			refs = append(refs, GroupRef{Window: int64(i % 3), KG: uint16(i % 7), Key: key(i)})
			ids = append(ids, i)
		}
		got := map[int]string{}
		if err := p.Load(refs, func(j int, val []byte) error { got[j] = string(val); return nil }); err != nil {
			t.Fatal(err)
		}
		for j, i := range ids {
			if w, ok := want[fmt.Sprint(i)]; got[j] != w || (ok != (got[j] != "")) {
				t.Fatalf("round %d key %d: got %q want %q", round, i, got[j], w)
			}
		}
		b = st.NewBatch("s")
		if err := b.Absorb(p); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		p.Close()
	}
}
