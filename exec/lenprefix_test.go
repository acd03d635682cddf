package exec

import (
	"bytes"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/types"
)

// TestAppendEncoded: an accumulator encoded in place with its length
// prefix is byte for byte appendLen of its encoding, for encodings shorter
// than, at and past the prefix's one-byte bound (MIN of strings of 0 to
// 20,000 bytes), after bytes already in dst.
func TestAppendEncoded(t *testing.T) {
	f, err := agg.New(agg.Spec{Name: "MIN", ArgTypes: []types.Type{types.Text}})
	if err != nil {
		t.Fatal(err)
	}
	lens := []int{0, 1, 100, 120, 123, 124, 125, 126, 127, 128, 129, 200, 16380, 16390, 20000}
	v := newVec(types.Text, len(lens))
	slots := make([]uint32, len(lens))
	for i, n := range lens {
		v.S[i] = strings.Repeat("x", n)
		slots[i] = uint32(i)
	}
	f.Grow(len(lens))
	arr := arrowView(v, memory.DefaultAllocator)
	f.Update(slots, []arrow.Array{arr})
	arr.Release()
	for i := range lens {
		want := appendLen([]byte("head"), f.Encode(nil, uint32(i)))
		if got := appendEncoded([]byte("head"), f, uint32(i)); !bytes.Equal(got, want) {
			t.Fatalf("a string of %d bytes: encoded %d bytes %.20x..., want %d bytes %.20x...", lens[i], len(got), got, len(want), want)
		}
	}
}
