package agg

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/types"
)

// TestMergeEqualsSingleStage splits random input into random partials,
// merges their encodings in random order, and checks the result equals one
// aggregation over all rows. Exact aggregates must agree bit for bit.
func TestMergeEqualsSingleStage(t *testing.T) {
	specs := []Spec{
		{Name: "COUNT", Star: true},
		{Name: "COUNT", ArgTypes: []types.Type{types.Int}},
		{Name: "SUM", ArgTypes: []types.Type{types.Int}},
		{Name: "MIN", ArgTypes: []types.Type{types.Int}},
		{Name: "MAX", ArgTypes: []types.Type{types.Int}},
		{Name: "SUM", ArgTypes: []types.Type{types.Double}},
		{Name: "AVG", ArgTypes: []types.Type{types.Int}},
		{Name: "MAX", ArgTypes: []types.Type{types.Text}},
	}
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, spec := range specs {
		for trial := 0; trial < 50; trial++ {
			n := rng.IntN(200)
			ints := make([]int64, n)
			valid := make([]bool, n)
			for i := range ints {
				// Large magnitudes make SUM(BIGINT) overflow int64 in partials.
				ints[i] = rng.Int64N(1<<62) - 1<<61
				valid[i] = rng.IntN(5) > 0
			}
			col := column(spec, ints, valid)
			whole := mustNew(t, spec)
			whole.Grow(1)
			whole.Update(make([]uint32, n), []arrow.Array{col})

			parts := rng.IntN(5) + 1
			var encs [][]byte
			start := 0
			for p := 0; p < parts; p++ {
				end := start + rng.IntN(n-start+1)
				if p == parts-1 {
					end = n
				}
				f := mustNew(t, spec)
				f.Grow(1)
				sl := array.NewSlice(col, int64(start), int64(end))
				f.Update(make([]uint32, end-start), []arrow.Array{sl})
				sl.Release()
				encs = append(encs, f.Encode(nil, 0))
				start = end
			}
			rng.Shuffle(len(encs), func(i, j int) { encs[i], encs[j] = encs[j], encs[i] })
			merged := mustNew(t, spec)
			merged.Grow(1)
			for _, e := range encs {
				if err := merged.Merge(0, e); err != nil {
					t.Fatal(err)
				}
			}
			got, want := merged.Result(0), whole.Result(0)
			if f, ok := want.(float64); ok && spec.ArgTypes[0] == types.Double {
				// Float addition is not associative: allow rounding differences.
				g, _ := got.(float64)
				if d := g - f; d > 1e-6*abs(f) || d < -1e-6*abs(f) {
					t.Fatalf("%s: merged %v, single-stage %v", spec.Name, got, want)
				}
			} else if got != want {
				t.Fatalf("%s%v: merged %v, single-stage %v", spec.Name, spec.ArgTypes, got, want)
			}
			col.Release()
		}
	}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

func mustNew(t *testing.T, s Spec) Func {
	t.Helper()
	f, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func column(s Spec, ints []int64, valid []bool) arrow.Array {
	mem := memory.DefaultAllocator
	t := types.Int
	if len(s.ArgTypes) > 0 {
		t = s.ArgTypes[0]
	}
	switch t {
	case types.Double:
		b := array.NewFloat64Builder(mem)
		defer b.Release()
		for i, v := range ints {
			if valid[i] {
				b.Append(float64(v) / 1e9)
			} else {
				b.AppendNull()
			}
		}
		return b.NewArray()
	case types.Text:
		b := array.NewStringBuilder(mem)
		defer b.Release()
		for i, v := range ints {
			if valid[i] {
				b.Append(string(rune('a' + v%26&0x7fff%26)))
			} else {
				b.AppendNull()
			}
		}
		return b.NewArray()
	}
	b := array.NewInt64Builder(mem)
	defer b.Release()
	b.AppendValues(ints, valid)
	return b.NewArray()
}

func TestEmptyInputIsNullExceptCount(t *testing.T) {
	for _, s := range []Spec{{Name: "SUM", ArgTypes: []types.Type{types.Int}}, {Name: "AVG", ArgTypes: []types.Type{types.Double}},
		{Name: "MIN", ArgTypes: []types.Type{types.Text}}, {Name: "COUNT", Star: true}} {
		f := mustNew(t, s)
		f.Grow(1)
		got := f.Result(0)
		if s.Name == "COUNT" {
			if got != int64(0) {
				t.Errorf("COUNT of nothing = %v, want 0", got)
			}
		} else if got != nil {
			t.Errorf("%s of nothing = %v, want NULL", s.Name, got)
		}
	}
}
