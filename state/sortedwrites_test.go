package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestAbsorbSorted: pending groups and a commit's writes (groups and
// partials, windows of both signs, the NULL key's group) go into the batch
// merged in store-key order, a key in both keeps the commit's value, and
// what is stored afterwards is exactly what was written.
func TestAbsorbSorted(t *testing.T) {
	// 3,000 writes are sorted whole, 40,000 bucketed first (sort).
	for _, n := range []int{3000, 40000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { testAbsorbSorted(t, n) })
	}
}

func testAbsorbSorted(t *testing.T, n int) {
	st, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	scope := Scope("s", 0)
	rng := rand.New(rand.NewPCG(3, 4))
	p := st.NewPending(scope)
	defer p.Close()
	var w GroupWrites
	// A commit's writes are newer than anything evicted before it: of a
	// key in both, the write is what must be stored.
	pend, wrote := map[string]string{}, map[string]string{}
	key := func(i int) []byte { return binary.BigEndian.AppendUint64([]byte{1}, uint64(i)) }
	for i := 0; i < n; i++ {
		win := int64(rng.IntN(3)-1) * 3600_000
		kg := uint16(rng.IntN(4))
		if rng.IntN(10) == 0 {
			kg = NullGroup
		}
		k := key(rng.IntN(n / 6))
		v := fmt.Sprintf("v%d", i)
		switch rng.IntN(4) {
		case 0: // evicted
			if err := p.Put(win, kg, k, []byte(v)); err != nil {
				t.Fatal(err)
			}
			pend[string(GroupKey(scope, win, kg, k))] = v
		case 1: // evicted partial
			id := DeltaID{Gen: 9, Seq: uint64(i)}
			if err := p.PutDelta(win, kg, k, id, []byte(v)); err != nil {
				t.Fatal(err)
			}
			pend[string(appendDeltaKey(nil, scope, win, kg, k, id))] = v
		case 2: // changed group (once per commit, as Changes lists it)
			if _, dup := wrote[string(GroupKey(scope, win, kg, k))]; dup {
				continue
			}
			w.Put(win, kg, k, []byte(v))
			wrote[string(GroupKey(scope, win, kg, k))] = v
		default: // changed blind group's partial
			id := DeltaID{Gen: 9, Seq: uint64(i)}
			w.PutDelta(win, kg, k, id, []byte(v))
			wrote[string(appendDeltaKey(nil, scope, win, kg, k, id))] = v
		}
	}
	want := pend
	for k, v := range wrote {
		want[k] = v
	}
	b := st.NewScopedBatch("s", 0)
	if err := b.AbsorbSorted(p, &w); err != nil {
		t.Fatal(err)
	}
	var prev []byte
	if err := b.EachChange(func(k, _ []byte) error {
		if prev != nil && bytes.Compare(prev, k) > 0 {
			return fmt.Errorf("out of order: %x after %x", k, prev)
		}
		prev = append(prev[:0], k...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if !p.Empty() || w.Len() != 0 {
		t.Fatal("pending or writes not emptied")
	}
	got := map[string]string{}
	if err := st.EachScopeKey("s", 0, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d keys stored, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("key %x: stored %q, want %q", k, got[k], v)
		}
	}
}
