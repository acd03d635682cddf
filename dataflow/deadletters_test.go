package dataflow

import (
	"testing"
)

// TestDeadLettersClaimEachOffset: a claim is per record, whatever order
// the offsets come in; a claim given back can be taken again; past the
// bound the lowest offsets are forgotten (claimable again: a duplicate at
// worst, never a record refused that nobody wrote).
func TestDeadLettersClaimEachOffset(t *testing.T) {
	src := Letters{"src", "src.dlq"}
	d := NewDeadLetters()
	for _, off := range []int64{9, 3, 5, 4} {
		if !d.Claim(src, 0, off) {
			t.Fatalf("offset %d refused: nobody claimed it", off)
		}
	}
	if !d.Claim(src, 1, 3) || !d.Claim(Letters{"other", "src.dlq"}, 0, 3) || !d.Claim(Letters{"src", "elsewhere"}, 0, 3) {
		t.Fatal("offset 3 of another partition, source or dead-letter topic refused")
	}
	for _, off := range []int64{3, 4, 5, 9} {
		if d.Claim(src, 0, off) {
			t.Fatalf("offset %d claimed twice", off)
		}
	}
	d.Release(src, 0, 4)
	if !d.Claim(src, 0, 4) || d.Claim(src, 0, 3) || d.Claim(src, 0, 5) {
		t.Fatal("Release gave back more or less than offset 4")
	}
	d.Seen(src, 0, 7)
	if d.Claim(src, 0, 7) {
		t.Fatal("an offset seen in the dead-letter topic was claimed")
	}

	b := NewDeadLetters()
	b.MaxPerPartition = 8
	for off := int64(0); off < 20; off++ {
		b.Claim(src, 0, off)
	}
	if n := len(b.claimed[src][0]); n > 8 {
		t.Fatalf("%d offsets kept, bound 8", n)
	}
	if b.Claim(src, 0, 19) || b.Claim(src, 0, 18) {
		t.Fatal("the latest claims were forgotten")
	}
	if !b.Claim(src, 0, 0) {
		t.Fatal("offset 0, forgotten, should be claimable again")
	}
}
