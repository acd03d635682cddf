package agg

import (
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/types"
)

// TestSumIntEncodingForms: a sum that fits 64 bits is encoded compactly
// (tag 2, varint), a wider one in 16 bytes (tag 1); both merge back to the
// same value, and the 16-byte form written before the compact one existed
// is still read.
func TestSumIntEncodingForms(t *testing.T) {
	cases := []struct {
		vals    []int64
		tag     byte
		maxSize int
		want    any
	}{
		{[]int64{1, 2, 3}, 2, 3, int64(6)},
		{[]int64{-5}, 2, 3, int64(-5)},
		{[]int64{math.MaxInt64, math.MaxInt64}, 1, 18, 2 * float64(math.MaxInt64)},
	}
	for _, c := range cases {
		f, err := New(Spec{Name: "SUM", ArgTypes: []types.Type{types.Int}})
		if err != nil {
			t.Fatal(err)
		}
		f.Grow(1)
		b := array.NewInt64Builder(memory.DefaultAllocator)
		b.AppendValues(c.vals, nil)
		arr := b.NewArray()
		f.Update(make([]uint32, len(c.vals)), []arrow.Array{arr})
		arr.Release()
		enc := f.Encode(nil, 0)
		if enc[1] != c.tag || len(enc) > c.maxSize {
			t.Errorf("%v: encoding %x, want tag %d within %d bytes", c.vals, enc, c.tag, c.maxSize)
		}
		g, _ := New(Spec{Name: "SUM", ArgTypes: []types.Type{types.Int}})
		g.Grow(1)
		if err := g.Merge(0, enc); err != nil {
			t.Fatal(err)
		}
		if got := g.Result(0); got != c.want {
			t.Errorf("%v: merged %v, want %v", c.vals, got, c.want)
		}
	}
	// The 16-byte form of 6, as every version wrote it before.
	old := []byte{encV1, 1, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0}
	g, _ := New(Spec{Name: "SUM", ArgTypes: []types.Type{types.Int}})
	g.Grow(1)
	if err := g.Merge(0, old); err != nil || g.Result(0) != int64(6) {
		t.Fatalf("old form: %v, %v", g.Result(0), err)
	}
}
