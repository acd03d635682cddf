package exec

import (
	"github.com/turbinesql/turbinesql/types"
)

// greatest / least and IS [NOT] DISTINCT FROM: not strict, over any type
// the planner has brought the arguments to (one common type).

func init() {
	var greatestSigs, distinctSigs []Sig
	for _, t := range []types.Type{types.Int, types.Double, types.Text, types.Bool, types.Timestamp, types.Interval} {
		greatestSigs = append(greatestSigs, variadic(t, t))
		distinctSigs = append(distinctSigs, sig(types.Bool, t, t))
	}
	defLenient("GREATEST", extremum(1), greatestSigs...)
	defLenient("LEAST", extremum(-1), greatestSigs...)
	defLenient(DistinctFunc, distinct(true), distinctSigs...)
	defLenient(NotDistinctFunc, distinct(false), distinctSigs...)
}

// The calls IS DISTINCT FROM and IS NOT DISTINCT FROM compile to.
const (
	DistinctFunc    = "IS DISTINCT FROM"
	NotDistinctFunc = "IS NOT DISTINCT FROM"
)

// compareRows compares row i of a with row j of b (same type): -1, 0, 1.
func compareRows(a *Vec, i int, b *Vec, j int) int {
	switch a.T {
	case types.Text:
		return cmp3(a.S[i], b.S[j])
	case types.Double:
		return floatCmp(a.F[i], b.F[j])
	case types.Bool:
		x, y := a.B[i], b.B[j]
		switch {
		case x == y:
			return 0
		case y:
			return -1
		}
		return 1
	}
	return cmp3(a.I[i], b.I[j])
}

func cmp3[T int64 | string](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// extremum is greatest (dir 1) or least (dir -1): NULL arguments are
// ignored; NULL only when all are.
func extremum(dir int) kernel {
	return func(out *Vec, args []*Vec) error {
		for i := 0; i < out.N; i++ {
			best := -1
			for k, a := range args {
				if !a.typed() || a.IsNull(i) {
					continue
				}
				if best < 0 || compareRows(a, i, args[best], i)*dir > 0 {
					best = k
				}
			}
			if best < 0 {
				out.ensureNull()[i] = true
				continue
			}
			storeRow(out, i, args[best], i)
		}
		return nil
	}
}

// storeRow copies row j of src into row i of dst (same type).
func storeRow(dst *Vec, i int, src *Vec, j int) {
	switch dst.T {
	case types.Text:
		dst.S[i] = src.S[j]
	case types.Double:
		dst.F[i] = src.F[j]
	case types.Bool:
		dst.B[i] = src.B[j]
	default:
		dst.I[i] = src.I[j]
	}
}

// distinct is a IS [NOT] DISTINCT FROM b: = that treats NULL as a value,
// never NULL itself.
func distinct(want bool) kernel {
	return func(out *Vec, args []*Vec) error {
		a, b := args[0], args[1]
		for i := range out.B {
			an, bn := !a.typed() || a.IsNull(i), !b.typed() || b.IsNull(i)
			var differ bool
			switch {
			case an || bn:
				differ = an != bn
			default:
				differ = compareRows(a, i, b, i) != 0
			}
			out.B[i] = differ == want
		}
		return nil
	}
}
