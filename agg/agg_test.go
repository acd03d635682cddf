package agg

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/types"
)

var seedFlag = flag.Uint64("agg.seed", 0, "seed of the randomised agg tests (0: pick one and log it)")

// testSeed returns the seed for this run, logged so a failure can be
// replayed with go test ./agg -args -agg.seed=N.
func testSeed(t testing.TB) uint64 {
	s := *seedFlag
	if s == 0 {
		s = rand.Uint64()
	}
	t.Logf("seed %d (replay: go test ./agg -run '%s' -args -agg.seed=%d)", s, t.Name(), s)
	return s
}

// check says how a merged result must relate to the single-stage one.
type check uint8

const (
	exact   check = iota // equal bit for bit
	sumTol               // float summation: within 1e-12 of the sum of |x|
	rel                  // within 1e-9 relative (variance, stddev, corr, covar)
	hllTol               // equal, and within 3 standard errors of the true count
	pctRank              // within the documented rank error of the exact answer
)

// column is a generated argument column and its values as Go values (nil
// for NULL; TIMESTAMP as int64 millis), for the oracles.
type column struct {
	arr  arrow.Array
	vals []any
}

type gen func(r *rand.Rand, n int) column

type propCase struct {
	spec  Spec
	cols  []gen
	check check
}

func (c propCase) String() string {
	d := ""
	if c.spec.Distinct {
		d = "DISTINCT "
	}
	return fmt.Sprintf("%s(%s%v%v)", c.spec.Name, d, c.spec.ArgTypes, c.spec.Params)
}

func specOf(name string, ts ...types.Type) Spec { return Spec{Name: name, ArgTypes: ts} }

func distinctOf(name string, t types.Type) Spec {
	return Spec{Name: name, ArgTypes: []types.Type{t}, Distinct: true}
}

func pctOf(q any, t types.Type) Spec {
	return Spec{Name: "APPROX_PERCENTILE", ArgTypes: []types.Type{t}, Params: []any{q}}
}

var (
	I, D, T, B, TS = types.Int, types.Double, types.Text, types.Bool, types.Timestamp
)

func propCases() []propCase {
	cs := []propCase{
		{Spec{Name: "COUNT", Star: true}, nil, exact},
		{specOf("COUNT", I), []gen{genInt}, exact},
		{specOf("COUNT", T), []gen{genText}, exact},
		{distinctOf("COUNT", I), []gen{genInt}, exact},
		{distinctOf("COUNT", D), []gen{genWideDouble}, exact},
		{distinctOf("COUNT", T), []gen{genText}, exact},
		{distinctOf("COUNT", B), []gen{genBool}, exact},
		{distinctOf("COUNT", TS), []gen{genTime}, exact},
		{specOf("SUM", I), []gen{genInt}, exact},
		{specOf("SUM", D), []gen{genDouble}, sumTol},
		{distinctOf("SUM", I), []gen{genInt}, exact},
		{distinctOf("SUM", D), []gen{genDouble}, exact}, // summed in sorted order
		{specOf("AVG", I), []gen{genInt}, exact},
		{specOf("AVG", D), []gen{genDouble}, sumTol},
		{distinctOf("AVG", I), []gen{genInt}, exact},
		{distinctOf("VAR_SAMP", D), []gen{genDouble}, exact},
		{specOf("CORR", I, D), []gen{genInt, genDouble}, rel},
		{specOf("CORR", D, D), []gen{genDouble, genDouble}, rel},
		{specOf("COVAR_POP", D, I), []gen{genDouble, genInt}, rel},
		{specOf("COVAR_SAMP", D, D), []gen{genDouble, genDouble}, rel},
		{specOf("APPROX_COUNT_DISTINCT", I), []gen{genInt}, hllTol},
		{specOf("APPROX_COUNT_DISTINCT", D), []gen{genWideDouble}, hllTol},
		{specOf("APPROX_COUNT_DISTINCT", T), []gen{genText}, hllTol},
		{specOf("APPROX_COUNT_DISTINCT", TS), []gen{genTime}, hllTol},
		{specOf("FIRST_VALUE", T, TS, I), []gen{genText, genTime, genSeq}, exact},
		{specOf("LAST_VALUE", T, TS, I), []gen{genText, genTime, genSeq}, exact},
		{specOf("FIRST_VALUE", D, I, I), []gen{genWideDouble, genTimeInt, genSeqDup}, exact},
		{specOf("LAST_VALUE", I, I, I), []gen{genInt, genTimeInt, genSeqDup}, exact},
		{specOf("LAST_VALUE", B, TS, I), []gen{genBool, genTime, genSeq}, exact},
		{specOf("ARG_MAX", T, D), []gen{genText, genWideDouble}, exact},
		{specOf("ARG_MIN", I, T), []gen{genInt, genText}, exact},
		{specOf("ARG_MAX", D, I), []gen{genWideDouble, genSmallInt}, exact},
		{specOf("ARG_MIN", TS, B), []gen{genTime, genBool}, exact},
		{specOf("ARG_MIN", T, T), []gen{genText, genText}, exact},
		{specOf("BOOL_OR", B), []gen{genBool}, exact},
		{specOf("BOOL_AND", B), []gen{genBool}, exact},
		{specOf("EVERY", B), []gen{genBool}, exact},
		{pctOf(0.5, D), []gen{genDouble}, pctRank},
		{pctOf(0.9, I), []gen{genInt}, pctRank},
		{pctOf(0.99, D), []gen{genDouble}, pctRank},
		{pctOf(int64(0), D), []gen{genDouble}, pctRank},
		{pctOf(int64(1), D), []gen{genDouble}, pctRank},
		{pctOf(0.25, D), []gen{genSpecialDouble}, pctRank},
		{specOf("APPROX_MEDIAN", I), []gen{genSmallInt}, pctRank},
	}
	for _, t := range []types.Type{I, D, T, B, TS} {
		g := map[types.Type]gen{I: genInt, D: genWideDouble, T: genText, B: genBool, TS: genTime}[t]
		cs = append(cs, propCase{specOf("MIN", t), []gen{g}, exact}, propCase{specOf("MAX", t), []gen{g}, exact})
	}
	for _, name := range []string{"VAR_SAMP", "VAR_POP", "STDDEV_SAMP", "STDDEV_POP", "VARIANCE", "STDDEV"} {
		cs = append(cs, propCase{specOf(name, I), []gen{genInt}, exact}, propCase{specOf(name, D), []gen{genDouble}, rel})
	}
	return cs
}

// TestMergeEqualsSingleStage splits random input into random partials, each
// fed in random batches to random slots, merges the partials' encodings in
// random order (sometimes through an intermediate stage) into slots that
// were used and Reset first, and checks the result against one aggregation
// over all rows: exact aggregates bit for bit, the others within their
// documented error (see check).
func TestMergeEqualsSingleStage(t *testing.T) {
	seed := testSeed(t)
	for ci, c := range propCases() {
		r := rand.New(rand.NewPCG(seed, uint64(ci)))
		trials := 15 // a new seed every run: coverage accumulates across runs
		if c.check == pctRank || c.check == hllTol {
			trials = 8
		}
		for trial := range trials {
			n := trialSize(r, c.check)
			nslots := 1 + r.IntN(3)
			cols, vals := make([]arrow.Array, len(c.cols)), make([][]any, len(c.cols))
			for j, g := range c.cols {
				col := g(r, n)
				cols[j], vals[j] = col.arr, col.vals
			}
			if len(cols) == 0 { // COUNT(*): the caller passes no column
				vals = [][]any{make([]any, n)}
			}
			slots := make([]uint32, n)
			for i := range slots {
				slots[i] = uint32(r.IntN(nslots))
			}

			whole := mustNew(t, c.spec)
			whole.Grow(nslots)
			feed(r, whole, cols, slots, 0, n)

			parts := 1 + r.IntN(6)
			encs := make([][][]byte, nslots)
			start := 0
			for p := range parts {
				end := start + r.IntN(n-start+1)
				if p == parts-1 {
					end = n
				}
				f := mustNew(t, c.spec)
				f.Grow(nslots)
				feed(r, f, cols, slots, start, end)
				for s := range nslots {
					encs[s] = append(encs[s], f.Encode(nil, uint32(s)))
				}
				start = end
			}

			merged := mustNew(t, c.spec)
			merged.Grow(nslots)
			feed(r, merged, cols, slots, 0, n) // dirty every slot, then Reset: slots are recycled
			for s := range nslots {
				merged.Reset(uint32(s))
			}
			for s := range nslots {
				mergeAll(t, r, c.spec, merged, uint32(s), encs[s])
			}

			for s := range nslots {
				got, want := merged.Result(uint32(s)), whole.Result(uint32(s))
				var sv [][]any
				for _, v := range vals {
					sv = append(sv, pick(v, slots, uint32(s)))
				}
				if err := compare(c, got, want, sv); err != nil {
					t.Fatalf("%v trial %d (n=%d, slot %d of %d, %d partials): %v\nseed %d", c, trial, n, s, nslots, parts, err, seed)
				}
			}
			for _, col := range cols {
				col.Release()
			}
		}
	}
}

func trialSize(r *rand.Rand, c check) int {
	switch k := r.IntN(8); {
	case k == 0:
		return r.IntN(3)
	case k < 6 && c != pctRank:
		return r.IntN(300)
	case k < 3:
		return r.IntN(600)
	case c == hllTol:
		return 600 + r.IntN(1400) // larger sets: TestHLLAccuracy, on fixed data
	}
	return 600 + r.IntN(3000)
}

// feed folds rows [lo, hi) into f in random batches, each an Arrow slice
// (so validity bitmaps are read at an offset).
func feed(r *rand.Rand, f Func, cols []arrow.Array, slots []uint32, lo, hi int) {
	for lo < hi {
		end := min(hi, lo+1+r.IntN(hi-lo))
		args := make([]arrow.Array, len(cols))
		for j, c := range cols {
			args[j] = array.NewSlice(c, int64(lo), int64(end))
		}
		f.Update(slots[lo:end], args)
		for _, a := range args {
			a.Release()
		}
		lo = end
	}
}

// mergeAll merges encs into slot of dst in random order, half the time
// through an intermediate Func whose own encoding is merged instead.
func mergeAll(t *testing.T, r *rand.Rand, spec Spec, dst Func, slot uint32, encs [][]byte) {
	t.Helper()
	encs = slices.Clone(encs)
	r.Shuffle(len(encs), func(i, j int) { encs[i], encs[j] = encs[j], encs[i] })
	if len(encs) > 2 && r.IntN(2) == 0 {
		mid := mustNew(t, spec)
		mid.Grow(1)
		k := 1 + r.IntN(len(encs)-1)
		for _, e := range encs[:k] {
			if err := mid.Merge(0, e); err != nil {
				t.Fatal(err)
			}
		}
		encs = append([][]byte{mid.Encode(nil, 0)}, encs[k:]...)
	}
	for _, e := range encs {
		if err := dst.Merge(slot, e); err != nil {
			t.Fatal(err)
		}
	}
}

func pick(vals []any, slots []uint32, s uint32) []any {
	var out []any
	for i, v := range vals {
		if slots[i] == s {
			out = append(out, v)
		}
	}
	return out
}

func compare(c propCase, got, want any, vals [][]any) error {
	switch c.check {
	case exact:
		if !same(got, want) {
			return fmt.Errorf("merged %v, single-stage %v", show(got), show(want))
		}
	case sumTol:
		scale := 0.0
		for _, v := range vals[0] {
			if f, ok := v.(float64); ok && !math.IsInf(f, 0) && f == f {
				scale += math.Abs(f)
			}
		}
		if !near(got, want, 0, 1e-12*scale) {
			return fmt.Errorf("merged %v, single-stage %v (scale %g)", show(got), show(want), scale)
		}
	case rel:
		if !near(got, want, 1e-9, 1e-300) {
			return fmt.Errorf("merged %v, single-stage %v: beyond 1e-9 relative", show(got), show(want))
		}
	case hllTol:
		if !same(got, want) {
			return fmt.Errorf("merged %v, single-stage %v: the sketch is deterministic", show(got), show(want))
		}
		truth := float64(trueDistinct(vals[0]))
		// Within 3 standard errors (1.04/sqrt(2^14) ≈ 0.81% each) of the
		// true count, plus 5: for small sets the error is the number of
		// values that fell in an already used register, a Poisson count
		// (mean n²/2m) whose tail a relative bound does not cover.
		if d := math.Abs(float64(want.(int64)) - truth); d > 3*0.0081*truth+5 {
			return fmt.Errorf("estimate %v for %v distinct values: beyond 3 standard errors", want, truth)
		}
	case pctRank:
		q := 0.5
		if len(c.spec.Params) > 0 {
			q, _ = fraction(c.spec.Params[0])
		}
		xs := sortedFloats(vals[0])
		for _, v := range []any{got, want} {
			if err := rankWithin(xs, q, v); err != nil {
				return err
			}
		}
		if finite := countFinite(xs); finite <= tdBuffer && !same(got, percentileCont(xs, q)) {
			return fmt.Errorf("%d finite values: got %v, percentile_cont %v (must be exact)", finite, show(got), show(percentileCont(xs, q)))
		}
	}
	return nil
}

// same is equality of results: floats by bits (NaN included), times by
// instant.
func same(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && (math.Float64bits(x) == math.Float64bits(y) || x != x && y != y)
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	}
	return a == b
}

func near(a, b any, relTol, absTol float64) bool {
	x, ok1 := a.(float64)
	y, ok2 := b.(float64)
	if !ok1 || !ok2 {
		return a == nil && b == nil
	}
	if x == y || x != x && y != y {
		return true
	}
	return math.Abs(x-y) <= max(relTol*max(math.Abs(x), math.Abs(y)), absTol)
}

func show(v any) string {
	if f, ok := v.(float64); ok {
		return fmt.Sprintf("%v (%#x)", f, math.Float64bits(f))
	}
	return fmt.Sprintf("%v", v)
}

func trueDistinct(vals []any) int {
	seen := map[any]bool{}
	for _, v := range vals {
		if f, ok := v.(float64); ok {
			v = floatKey(f, true) // SQL equality: -0 = 0, NaN = NaN
		}
		if v != nil {
			seen[v] = true
		}
	}
	return len(seen)
}

// sortedFloats returns the non-NULL values in PostgreSQL's order.
func sortedFloats(vals []any) []float64 {
	var xs []float64
	for _, v := range vals {
		switch x := v.(type) {
		case float64:
			xs = append(xs, x)
		case int64:
			xs = append(xs, float64(x))
		}
	}
	slices.SortFunc(xs, func(a, b float64) int {
		ka, kb := floatKey(a, false), floatKey(b, false)
		if ka < kb {
			return -1
		} else if ka > kb {
			return 1
		}
		return 0
	})
	return xs
}

func countFinite(xs []float64) int {
	n := 0
	for _, x := range xs {
		if !math.IsInf(x, 0) && x == x {
			n++
		}
	}
	return n
}

// percentileCont is PostgreSQL's percentile_cont over sorted xs.
func percentileCont(xs []float64, q float64) any {
	if len(xs) == 0 {
		return nil
	}
	t := q * float64(len(xs)-1)
	lo, hi := math.Floor(t), math.Ceil(t)
	a := xs[int(lo)]
	if lo == hi {
		return a
	}
	return a + (t-lo)*(xs[int(hi)]-a)
}

// rankWithin checks that v's position among xs is within the rank error
// tdigest.go documents: 1.5·w(q) + 1/n, w(q) = 2π·sqrt(q(1−q))/δ (so the
// exact extremes at q = 0 and 1). percentile_cont's own answer passes
// whatever it is: interpolating next to an infinity gives NaN, which has no
// rank.
func rankWithin(xs []float64, q float64, v any) error {
	if len(xs) == 0 {
		if v != nil {
			return fmt.Errorf("no values, got %v", v)
		}
		return nil
	}
	if same(v, percentileCont(xs, q)) {
		return nil
	}
	f, ok := v.(float64)
	if !ok {
		return fmt.Errorf("got %v for %d values", v, len(xs))
	}
	kv := floatKey(f, true)
	lo, _ := slices.BinarySearchFunc(xs, kv, func(x float64, k uint64) int { return cmpKey(floatKey(x, true), k) })
	hi, _ := slices.BinarySearchFunc(xs, kv+1, func(x float64, k uint64) int { return cmpKey(floatKey(x, true), k) })
	// v occupies positions [lo, hi-1], or lies between positions lo-1 and lo.
	pLo, pHi := float64(lo), float64(hi-1)
	if lo == hi {
		pLo, pHi = float64(lo-1), float64(lo)
	}
	n := float64(len(xs))
	target := q * (n - 1)
	dist := max(pLo-target, target-pHi, 0) / n
	if bound := 1.5*2*math.Pi*math.Sqrt(q*(1-q))/tdDelta + 1/n; dist > bound {
		return fmt.Errorf("q=%v: %v has rank error %.5f > %.5f over %d values", q, f, dist, bound, len(xs))
	}
	return nil
}

func cmpKey(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func mustNew(t testing.TB, s Spec) Func {
	t.Helper()
	f, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Generators. Each mixes NULLs, repeats (for DISTINCT and ties) and the
// values aggregates get wrong first: extreme integers, -0, NaN, ±Inf.

var mem = memory.DefaultAllocator

func genInt(r *rand.Rand, n int) column {
	return ints64(r, n, func() int64 {
		switch k := r.IntN(10); {
		case k < 5:
			return r.Int64N(201) - 100
		case k < 8:
			return int64(r.Uint64())
		}
		return []int64{math.MinInt64, math.MaxInt64, 0, -1, 1, math.MinInt64 + 1}[r.IntN(6)]
	})
}

func genSmallInt(r *rand.Rand, n int) column {
	return ints64(r, n, func() int64 { return r.Int64N(21) - 10 })
}

func ints64(r *rand.Rand, n int, v func() int64) column {
	b := array.NewInt64Builder(mem)
	defer b.Release()
	vals := make([]any, n)
	for i := range n {
		if r.IntN(5) == 0 {
			b.AppendNull()
			continue
		}
		x := v()
		b.Append(x)
		vals[i] = x
	}
	return column{b.NewArray(), vals}
}

// genDouble is what sums and variances see: no values whose sum overflows
// in one order and not in another.
func genDouble(r *rand.Rand, n int) column {
	return floats64(r, n, func() float64 { return doubleValue(r) })
}

func doubleValue(r *rand.Rand) float64 {
	switch k := r.IntN(20); {
	case k < 12:
		return r.NormFloat64()*100 + 50
	case k < 16:
		return []float64{0, math.Copysign(0, -1), 1.5, -2.25, 1e-300}[r.IntN(5)]
	case k < 18:
		return r.Float64()*1e6 - 5e5
	case k < 19:
		return math.NaN()
	}
	return math.Inf(1 - 2*r.IntN(2))
}

// genWideDouble adds the extremes of the type, for aggregates that only
// compare or hash.
func genWideDouble(r *rand.Rand, n int) column {
	return floats64(r, n, func() float64 {
		if r.IntN(8) == 0 {
			return []float64{math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64}[r.IntN(4)]
		}
		return doubleValue(r)
	})
}

// genSpecialDouble is mostly infinities and NaN, for percentiles that land
// on them.
func genSpecialDouble(r *rand.Rand, n int) column {
	return floats64(r, n, func() float64 {
		return []float64{math.Inf(-1), math.Inf(1), math.NaN(), 1, 2, 3}[r.IntN(6)]
	})
}

func floats64(r *rand.Rand, n int, v func() float64) column {
	b := array.NewFloat64Builder(mem)
	defer b.Release()
	vals := make([]any, n)
	for i := range n {
		if r.IntN(7) == 0 {
			b.AppendNull()
			continue
		}
		x := v()
		b.Append(x)
		vals[i] = x
	}
	return column{b.NewArray(), vals}
}

func genText(r *rand.Rand, n int) column {
	b := array.NewStringBuilder(mem)
	defer b.Release()
	vals := make([]any, n)
	fixed := []string{"", "a", "ab", "é", "a\x00", "zz"}
	for i := range n {
		if r.IntN(7) == 0 {
			b.AppendNull()
			continue
		}
		var s string
		if r.IntN(3) == 0 {
			s = fixed[r.IntN(len(fixed))]
		} else {
			for range 1 + r.IntN(3) {
				s += string(rune('a' + r.IntN(6)))
			}
		}
		b.Append(s)
		vals[i] = s
	}
	return column{b.NewArray(), vals}
}

func genBool(r *rand.Rand, n int) column {
	b := array.NewBooleanBuilder(mem)
	defer b.Release()
	vals := make([]any, n)
	for i := range n {
		if r.IntN(5) == 0 {
			b.AppendNull()
			continue
		}
		x := r.IntN(3) > 0
		b.Append(x)
		vals[i] = x
	}
	return column{b.NewArray(), vals}
}

func timeValue(r *rand.Rand) int64 {
	if r.IntN(2) == 0 {
		return 1_700_000_000_000 + r.Int64N(20)*1000 // few distinct: ties
	}
	return r.Int64N(1<<50) - 1<<49
}

func genTime(r *rand.Rand, n int) column {
	b := array.NewTimestampBuilder(mem, arrow.FixedWidthTypes.Timestamp_ms.(*arrow.TimestampType))
	defer b.Release()
	vals := make([]any, n)
	for i := range n {
		if r.IntN(10) == 0 {
			b.AppendNull()
			continue
		}
		x := timeValue(r)
		b.Append(arrow.Timestamp(x))
		vals[i] = x
	}
	return column{b.NewArray(), vals}
}

func genTimeInt(r *rand.Rand, n int) column {
	return ints64(r, n, func() int64 { return timeValue(r) })
}

// genSeq is a unique sequence per row, as the caller guarantees.
func genSeq(r *rand.Rand, n int) column {
	b := array.NewInt64Builder(mem)
	defer b.Release()
	vals := make([]any, n)
	base := r.Int64N(1 << 40)
	for i, p := range r.Perm(n) {
		b.Append(base + int64(p))
		vals[i] = base + int64(p)
	}
	return column{b.NewArray(), vals}
}

// genSeqDup repeats sequence numbers, which the caller never does, to show
// that even then the tie-break keeps results order-insensitive.
func genSeqDup(r *rand.Rand, n int) column {
	b := array.NewInt64Builder(mem)
	defer b.Release()
	vals := make([]any, n)
	for i := range n {
		x := r.Int64N(4)
		b.Append(x)
		vals[i] = x
	}
	return column{b.NewArray(), vals}
}

func testRand(t testing.TB) *rand.Rand { return rand.New(rand.NewPCG(testSeed(t), 1)) }
