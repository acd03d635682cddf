package dataflow

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/turbinesql/turbinesql/state"
)

// TestLegacyStateMigratesAtOpen: a data dir written before partition
// scopes (every partition's groups in one range of the stream, prefix 'g')
// keeps working: at its open each task moves the groups it owns into its
// own scope, and its windows close with the counts they had.
func TestLegacyStateMigratesAtOpen(t *testing.T) {
	p := planOf(t, tumbleSQL, "auto")
	dir := t.TempDir()
	store, err := state.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[int32][]string{}
	for i := 0; len(keys[0]) < 2 || len(keys[1]) < 2; i++ {
		k := fmt.Sprintf("key%d", i)
		q := state.PartitionFor([]byte(k), 2)
		keys[q] = append(keys[q], k)
	}
	// Both tasks write unscoped, under the stream's name.
	for q := int32(0); q < 2; q++ {
		r := newRigIn(t, store, q, 2, "", aggChain(p, "", 0)...)
		r.feed(ev(q, 0, keys[q][0]+",x,1,1", keys[q][1]+",x,2,2"))
		r.watermark(5_000, false)
		r.commit(2)
		for _, op := range r.ops {
			op.Close()
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	// Rewrite every group to the layout before scopes.
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest})
	if err != nil {
		t.Fatal(err)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("h"), UpperBound: []byte("i")})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		k := append([]byte(nil), it.Key()...)
		if err := b.Delete(k, nil); err != nil {
			t.Fatal(err)
		}
		k[0] = 'g'
		if err := b.Set(k, it.Value(), nil); err != nil {
			t.Fatal(err)
		}
		n++
	}
	it.Close()
	if n != 4 {
		t.Fatalf("%d groups written, want 4", n)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	store, err = state.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for q := int32(0); q < 2; q++ {
		r := newRig(t, store, q, 2, aggChain(p, "", 0)...)
		r.feed(ev(q, 2, keys[q][0]+",x,10,3"))
		r.watermark(20_000, false)
		got := values(t, r.out.take())
		if len(got) != 2 {
			t.Fatalf("task %d emitted %v, want its 2 keys", q, got)
		}
		for _, m := range got {
			want := 1.0
			if m["k"] == keys[q][0] {
				want = 2
			}
			if m["n"].(float64) != want {
				t.Fatalf("task %d: pane %v, want n %v (the migrated count plus the new row)", q, m, want)
			}
		}
	}
}
