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
