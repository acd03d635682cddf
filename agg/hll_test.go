package agg

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/cespare/xxhash/v2"

	"github.com/turbinesql/turbinesql/types"
)

// The per-row hash is a hand-inlined XXH64 of 8 bytes; it must stay the
// library's function, since sketches are persisted.
func TestXXH64Uint64MatchesLibrary(t *testing.T) {
	r := testRand(t)
	var b [8]byte
	for range 10000 {
		v := r.Uint64()
		binary.LittleEndian.PutUint64(b[:], v)
		if got, want := xxh64Uint64(v), xxhash.Sum64(b[:]); got != want {
			t.Fatalf("xxh64Uint64(%#x) = %#x, xxhash.Sum64 = %#x", v, got, want)
		}
	}
}

// TestHLLAccuracy runs large sets, fixed so the outcome is too: the
// estimate must be within 3 standard errors (3 × 0.81%) of the truth,
// single stage and merged from 4 partials (which must agree exactly).
func TestHLLAccuracy(t *testing.T) {
	for _, c := range []struct {
		typ types.Type
		n   int
	}{{types.Int, 3000}, {types.Int, 30000}, {types.Int, 100000}, {types.Text, 100000}, {types.Double, 50000}} {
		col := bigColumn(c.typ, c.n)
		whole := mustNew(t, specOf("APPROX_COUNT_DISTINCT", c.typ))
		whole.Grow(1)
		whole.Update(make([]uint32, c.n), []arrow.Array{col})
		merged := mustNew(t, specOf("APPROX_COUNT_DISTINCT", c.typ))
		merged.Grow(1)
		for p := range 4 {
			part := mustNew(t, specOf("APPROX_COUNT_DISTINCT", c.typ))
			part.Grow(1)
			lo, hi := p*c.n/4, (p+1)*c.n/4
			sl := array.NewSlice(col, int64(lo), int64(hi))
			part.Update(make([]uint32, hi-lo), []arrow.Array{sl})
			sl.Release()
			if err := merged.Merge(0, part.Encode(nil, 0)); err != nil {
				t.Fatal(err)
			}
		}
		col.Release()
		est := whole.Result(0).(int64)
		relErr := math.Abs(float64(est)-float64(c.n)) / float64(c.n)
		t.Logf("%v × %d: estimate %d, error %.3f%%, encoding %d bytes", c.typ, c.n, est, 100*relErr, len(whole.Encode(nil, 0)))
		if relErr > 3*0.0081 {
			t.Errorf("%v × %d: estimate %d is beyond 3 standard errors", c.typ, c.n, est)
		}
		if got := merged.Result(0); got != est {
			t.Errorf("%v × %d: merged %v, single stage %d", c.typ, c.n, got, est)
		}
	}
}

// bigColumn is n distinct values of type t.
func bigColumn(t types.Type, n int) arrow.Array {
	switch t {
	case types.Text:
		b := array.NewStringBuilder(mem)
		defer b.Release()
		for i := range n {
			b.Append(fmt.Sprintf("user-%d", i))
		}
		return b.NewArray()
	case types.Double:
		b := array.NewFloat64Builder(mem)
		defer b.Release()
		for i := range n {
			b.Append(float64(i) / 7)
		}
		return b.NewArray()
	}
	b := array.NewInt64Builder(mem)
	defer b.Release()
	for i := range n {
		b.Append(int64(i) * 1_000_003)
	}
	return b.NewArray()
}
