package state

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestLoadAccsAndEnds checks the session store's reads against a model:
// every entry of each key asked for (committed, pending, deleted in
// pending), nothing of a neighbour (keys ending in 0xff, keys that are
// prefixes of others' bytes), and the index by end up to a bound, then
// deleted up to it.
func TestLoadAccsAndEnds(t *testing.T) {
	st, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rng := rand.New(rand.NewPCG(3, 5))
	keys := [][]byte{{0x01, 0xff}, {0x01, 0xff, 0xff}, {0x02}, {0x02, 0x00}, {0xff}, {0xff, 0xff, 0xff}, []byte("a"), []byte("ab")}
	for i := 0; i < 40; i++ {
		keys = append(keys, []byte(fmt.Sprintf("k%d", i)))
	}
	type ent struct {
		kg  uint16
		key string
		w   int64
	}
	model := map[ent]string{}
	pick := func() ([]byte, ent) {
		k := keys[rng.IntN(len(keys))]
		return k, ent{uint16(len(k) % 3), string(k), rng.Int64N(20) - 10}
	}
	// Committed entries, then pending puts and deletions over them.
	b := st.NewBatch("s")
	for i := 0; i < 300; i++ {
		k, e := pick()
		v := fmt.Sprintf("c%d", i)
		if err := b.PutAcc(e.kg, k, e.w, []byte(v)); err != nil {
			t.Fatal(err)
		}
		model[e] = v
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	p := st.NewPending("s")
	defer p.Close()
	for i := 0; i < 300; i++ {
		k, e := pick()
		if rng.IntN(3) == 0 {
			if err := p.DeleteAcc(e.kg, k, e.w); err != nil {
				t.Fatal(err)
			}
			delete(model, e)
			continue
		}
		v := fmt.Sprintf("p%d", i)
		if err := p.PutAcc(e.kg, k, e.w, []byte(v)); err != nil {
			t.Fatal(err)
		}
		model[e] = v
	}
	var refs []GroupRef
	for _, k := range keys {
		refs = append(refs, GroupRef{KG: uint16(len(k) % 3), Key: k})
	}
	got := map[ent]string{}
	if err := p.LoadAccs(refs, func(i int, w int64, val []byte) error {
		e := ent{refs[i].KG, string(refs[i].Key), w}
		if _, dup := got[e]; dup {
			return fmt.Errorf("%v read twice", e)
		}
		got[e] = string(val)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for e, v := range model {
		if got[e] != v {
			t.Fatalf("%v: read %q, want %q", e, got[e], v)
		}
	}
	for e := range got {
		if _, ok := model[e]; !ok {
			t.Fatalf("%v read, but deleted or never written", e)
		}
	}

	// The index: ends by (end, key group, key), up to a bound.
	ends := map[int64][]string{}
	for i, k := range keys {
		end := int64(i%7) * 100
		if err := p.Put(end, 1, k, binary.BigEndian.AppendUint64(nil, uint64(i))); err != nil {
			t.Fatal(err)
		}
		ends[end] = append(ends[end], string(k))
	}
	scan := func(upTo int64) map[int64][]string {
		out := map[int64][]string{}
		c := p.Ends(upTo)
		last := int64(-1 << 63)
		for {
			w, kg, key, ok := c.Next()
			if !ok {
				break
			}
			if w < last || kg != 1 {
				t.Fatalf("entry (%d, %d, %q) out of order or of the wrong key group", w, kg, key)
			}
			last = w
			out[w] = append(out[w], string(key))
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	got300 := scan(300)
	for end, ks := range ends {
		slices.Sort(ks)
		if end <= 300 && !slices.Equal(got300[end], ks) {
			t.Fatalf("ends at %d: %q, want %q", end, got300[end], ks)
		}
		if end > 300 && got300[end] != nil {
			t.Fatalf("ends at %d read with a bound of 300", end)
		}
	}
	if err := p.DeleteEnds(300); err != nil {
		t.Fatal(err)
	}
	left := scan(1<<63 - 1)
	if w := slices.Sorted(maps.Keys(left)); len(w) == 0 || w[0] != 400 {
		t.Fatalf("after deleting the ends up to 300, ends left at %v", w)
	}
}
