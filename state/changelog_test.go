package state

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	st, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// scopeDump is partition p's state as "key=value" lines, in key order.
func scopeDump(t *testing.T, st *Store, stream string, p int32) string {
	t.Helper()
	var b bytes.Buffer
	if err := st.EachScopeKey(stream, p, func(k, v []byte) error {
		fmt.Fprintf(&b, "%x=%x\n", k, v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A task's commits, replayed from their changes onto an empty disk, give
// the same state: range deletions (a window's groups going at its close)
// become a tombstone per key, including keys the same commit set first.
func TestChangesRebuildTheState(t *testing.T) {
	src, dst := openStore(t), openStore(t)
	var log []Change
	commit := func(fill func(b *Batch)) {
		b := src.NewScopedBatch("s", 2)
		fill(b)
		if err := b.EachChange(func(k, v []byte) error {
			var val []byte
			if v != nil {
				val = append([]byte{}, v...)
			}
			log = append(log, Change{Key: bytes.Clone(k), Value: val})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	commit(func(b *Batch) {
		for i := 0; i < 50; i++ {
			must(t, b.PutGroup(int64(i%3)*1000, uint16(i%7), []byte(fmt.Sprint("k", i)), []byte(fmt.Sprint("v", i))))
		}
		must(t, b.PutAcc(3, []byte("sess"), 5, []byte("acc")))
		must(t, b.PutPartition(2, PartitionMeta{Offset: 10, MaxTime: 99, HasTime: true}))
		must(t, b.PutTaskValue(2, "placement", []byte{}))
	})
	commit(func(b *Batch) {
		must(t, b.PutGroup(1000, 4, []byte("new"), []byte("x")))   // set, then removed by the window's close
		must(t, b.DeleteWindowGroups(1000, nil))                   // whole window
		must(t, b.PutGroup(2000, 1, []byte("after"), []byte("y"))) // set after the range: stays
		must(t, b.DeleteWindowGroups(0, []uint16{0, 1, 2}))        // some key groups
		must(t, b.PutGroup(0, 1, []byte("back"), []byte("z")))     // set again after its deletion
		must(t, b.DeleteAcc(3, []byte("sess"), 5))
		must(t, b.PutPartition(2, PartitionMeta{Offset: 20, MaxTime: 150, HasTime: true, Closed: 100, HasClosed: true}))
	})
	tombs := 0
	r := dst.NewRestore("s", 2)
	defer r.Close()
	for _, c := range log {
		if c.Value == nil {
			tombs++
		}
		must(t, r.Apply(c.Key, EncodeChange(c.Value)))
	}
	must(t, r.Write(int64(len(log))))
	if want, got := scopeDump(t, src, "s", 2), scopeDump(t, dst, "s", 2); want != got || want == "" {
		t.Fatalf("restored state differs:\nwant\n%s\ngot\n%s", want, got)
	}
	if tombs < 20 {
		t.Fatalf("only %d tombstones: range deletions were not expanded", tombs)
	}
	if n, ok, err := dst.ChangelogPosition("s", 2); err != nil || !ok || n != int64(len(log)) {
		t.Fatalf("position %d %v %v", n, ok, err)
	}
	// A record of another partition's scope is refused, not applied.
	other := GroupKey(Scope("s", 3), 0, 1, []byte("k"))
	if err := r.Apply(other, EncodeChange([]byte("v"))); err == nil {
		t.Fatal("a key of partition 3 was applied to partition 2")
	}
	// A record of a newer layout (a later release bumps the first byte
	// when the store's values change meaning) is refused, named as such,
	// not applied as if it were of this one.
	mine := GroupKey(Scope("s", 2), 0, 1, []byte("k"))
	newer := append([]byte{ChangeVersion + 1}, []byte("v")...)
	if err := r.Apply(mine, newer); !errors.Is(err, ErrChangeVersion) {
		t.Fatalf("a changelog record of version %d: %v, want ErrChangeVersion", ChangeVersion+1, err)
	}
	if _, err := DecodeChange([]byte{}); !errors.Is(err, ErrChangeVersion) {
		t.Fatalf("an empty changelog value: %v, want ErrChangeVersion", err)
	}
	// Dropping the scope empties it and forgets the position.
	must(t, dst.DropScope("s", 2))
	if has, err := dst.HasScope("s", 2); err != nil || has {
		t.Fatalf("scope still there: %v %v", has, err)
	}
	if _, ok, _ := dst.ChangelogPosition("s", 2); ok {
		t.Fatal("position survived DropScope")
	}
}

// Writes made outside a task's commit (an operator's open cleaning up) are
// collected for the partition they concern only.
func TestWatchCollectsOutOfBandWrites(t *testing.T) {
	st := openStore(t)
	b := st.NewScopedBatch("s", 1)
	must(t, b.PutGroup(0, 5, []byte("a"), []byte("1")))
	must(t, b.Commit())
	stop1 := st.Watch("s", 1)
	stop2 := st.Watch("s", 2)
	ob := st.NewBatch("s")
	must(t, ob.PutTaskValue(1, "placement", []byte("h")))
	must(t, ob.PutTaskValue(2, "placement", []byte("g")))
	must(t, ob.b.DeleteRange(GroupKey(Scope("s", 1), 0, 0, nil), GroupKey(Scope("s", 1), 1, 0, nil), nil))
	must(t, ob.Commit())
	got1, got2 := stop1(), stop2()
	if len(got1) != 2 || got1[1].Value != nil || !bytes.Equal(got1[1].Key, GroupKey(Scope("s", 1), 0, 5, []byte("a"))) {
		t.Fatalf("partition 1 saw %q", got1)
	}
	if len(got2) != 1 || string(got2[0].Value) != "g" {
		t.Fatalf("partition 2 saw %q", got2)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
