package state

import "testing"

// TestBatchCloseAfterCommit: closing a committed batch (the deferred Close
// of every commit path) must not release it to Pebble's pool a second time.
func TestBatchCloseAfterCommit(t *testing.T) {
	st, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b := st.NewBatch("s")
	if err := b.PutPartition(0, PartitionMeta{Offset: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if !b.closed {
		t.Fatal("batch not marked closed")
	}
	b2, b3 := st.NewBatch("s"), st.NewBatch("s")
	if b2.b == b3.b {
		t.Fatal("two live batches share one pebble batch")
	}
	b2.Close()
	b3.Close()
}

func TestPartitionMetaAndGroups(t *testing.T) {
	st, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b := st.NewBatch("s")
	metas := map[int32]PartitionMeta{
		0: {Offset: 7, MaxTime: -3, HasTime: true},
		1: {Offset: 9, MaxTime: 5, HasTime: true, Closed: -100, HasClosed: true},
		2: {Offset: 1 << 40},
		3: {Offset: 4, Applied: 90, Closed: 3, HasClosed: true},
	}
	for p, m := range metas {
		if err := b.PutPartition(p, m); err != nil {
			t.Fatal(err)
		}
	}
	for g := uint16(0); g < 8; g++ {
		if err := b.PutAcc(g, []byte{byte(g)}, int64(g), []byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	got, err := st.Partitions("s")
	if err != nil {
		t.Fatal(err)
	}
	for p, m := range metas {
		if got[p] != m {
			t.Errorf("partition %d: %+v, want %+v", p, got[p], m)
		}
	}
	var seen []uint16
	if err := st.AccsOfGroups("s", []uint16{1, 4, 7, 9}, func(kg uint16, key []byte, w int64, _ []byte) error {
		if key[0] != byte(kg) || w != int64(kg) {
			t.Errorf("group %d: key %v window %d", kg, key, w)
		}
		seen = append(seen, kg)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || seen[0] != 1 || seen[1] != 4 || seen[2] != 7 {
		t.Fatalf("groups read %v, want [1 4 7]", seen)
	}
}
