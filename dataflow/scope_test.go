package dataflow_test

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	. "github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/state"
)

// TestLegacyStateMigratesAtOpen: a data dir written before partition
// scopes (every partition's groups in one range of the stream, prefix 'g')
// keeps working: at its open each task moves the groups it owns into its
// own scope, and its windows close with the counts they had.
func TestLegacyStateMigratesAtOpen(t *testing.T) {
	p := planOf(t, tumbleSQL, "auto")
	h := evHarness(t, 2, chain(func() []Op { return aggChain(p, "", 0) }))
	keys := keysOf(2)
	for q := int32(0); q < 2; q++ {
		task := h.Task(q)
		task.Push(0, keys[q][0]+",x,1,1", keys[q][1]+",x,2,2")
		task.Advance(5_000)
	}
	// Rewrite every group to the layout before scopes: 'g', the stream's
	// name, then what followed the partition's scope.
	h.Offline(func(fs vfs.FS, dir string) error {
		db, err := pebble.Open(dir, &pebble.Options{FS: fs, FormatMajorVersion: pebble.FormatNewest})
		if err != nil {
			return err
		}
		defer db.Close()
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("h"), UpperBound: []byte("i")})
		if err != nil {
			return err
		}
		b := db.NewBatch()
		n := 0
		for it.First(); it.Valid(); it.Next() {
			k := bytes.Clone(it.Key())
			for q := int32(0); q < 2; q++ {
				scoped := append(append([]byte("h"), state.Scope("s", q)...), 0)
				if rest, ok := bytes.CutPrefix(k, scoped); ok {
					if err := b.Delete(k, nil); err != nil {
						return err
					}
					if err := b.Set(append([]byte("gs\x00"), rest...), it.Value(), nil); err != nil {
						return err
					}
					n++
				}
			}
		}
		if err := it.Close(); err != nil {
			return err
		}
		if n != 4 {
			t.Errorf("%d groups written, want 4", n)
		}
		return b.Commit(pebble.Sync)
	})
	for q := int32(0); q < 2; q++ {
		task := h.Task(q)
		task.Push(2, keys[q][0]+",x,10,3")
		task.Advance(20_000)
		got := values(t, task.Take())
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
