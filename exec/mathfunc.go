package exec

import (
	"math"
	"strconv"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// Numeric functions. On BIGINT, ABS / ROUND / FLOOR / CEIL return BIGINT
// (exact); on DOUBLE they return DOUBLE.
//
// ROUND(x) on a DOUBLE rounds half to even, as PostgreSQL's round(double
// precision) does (it calls rint): ROUND(2.5) = 2, ROUND(-0.5) = -0.
// ROUND(x, n) has no double precision form in PostgreSQL: it converts to
// numeric (15 significant digits) and rounds half away from zero, and so
// does ROUND(x, n) here, returning a DOUBLE: ROUND(2.675, 2) = 2.68,
// ROUND(-0.125, 2) = -0.13, ROUND(1234.5, -2) = 1200.

func mathFunc(name string, out *Vec, args []*Vec) error {
	x := args[0]
	null := out.Null
	switch x.T {
	case types.Int:
		switch name {
		case "ABS":
			for i, v := range x.I {
				if v == math.MinInt64 && (null == nil || !null[i]) {
					return bigintRange()
				}
				out.I[i] = max(v, -v)
			}
		case "ROUND":
			if len(args) == 2 {
				if err := wantTypes(name, args, types.Int, types.Int); err != nil {
					return err
				}
				for i, v := range x.I {
					if null != nil && null[i] {
						continue
					}
					r, ok := roundInt(v, args[1].I[i])
					if !ok {
						return bigintRange()
					}
					out.I[i] = r
				}
				return nil
			}
			copy(out.I, x.I)
		default: // FLOOR, CEIL, CEILING
			copy(out.I, x.I)
		}
	case types.Double:
		switch name {
		case "ABS":
			for i, v := range x.F {
				out.F[i] = math.Abs(v)
			}
		case "ROUND":
			if len(args) == 2 {
				if err := wantTypes(name, args, types.Double, types.Int); err != nil {
					return err
				}
				for i, v := range x.F {
					out.F[i] = roundDecimal(v, args[1].I[i])
				}
				return nil
			}
			for i, v := range x.F {
				out.F[i] = math.RoundToEven(v)
			}
		case "FLOOR":
			for i, v := range x.F {
				out.F[i] = math.Floor(v)
			}
		default: // CEIL, CEILING
			for i, v := range x.F {
				out.F[i] = math.Ceil(v)
			}
		}
	default:
		return sql.Errorf(sql.CodeUndefinedFunc, "function %s(%s) does not exist", name, PGName(x.T))
	}
	return nil
}

// roundInt rounds x to 10^-n (n < 0), half away from zero; n >= 0 leaves
// it as it is.
func roundInt(x, n int64) (int64, bool) {
	if n >= 0 {
		return x, true
	}
	if n < -18 { // 10^19 > |x|*2: everything rounds to 0
		return 0, true
	}
	p := int64(1)
	for k := int64(0); k < -n; k++ {
		p *= 10
	}
	q, r := x/p, x%p
	if r < 0 {
		r = -r
	}
	if r >= p-r { // r*2 >= p without overflow
		if x < 0 {
			q--
		} else {
			q++
		}
	}
	return mulInt(q, p)
}

// roundDecimal rounds x to n decimal places (n < 0: to tens, hundreds...)
// half away from zero, on x's 15-significant-digit decimal form, as
// PostgreSQL's round(x::numeric, n) does.
func roundDecimal(x float64, n int64) float64 { return decimalPlaces(x, n, true) }

// decimalPlaces keeps n decimal places of x's 15-digit decimal form,
// rounding half away from zero (round) or cutting (trunc).
func decimalPlaces(x float64, n int64, round bool) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
		return x
	}
	n = min(max(n, -400), 400) // beyond ±400 places nothing changes
	neg := x < 0
	s := strconv.FormatFloat(math.Abs(x), 'e', 14, 64) // d.dddddddddddddde±XX
	digits := []byte(s[:1] + s[2:16])
	exp, _ := strconv.Atoi(s[17:])
	// x = 0.d1d2...d15 × 10^(exp+1); keep k digits.
	k := int64(exp) + 1 + n
	switch {
	case k < 0:
		return 0
	case k < int64(len(digits)):
		up := round && digits[k] >= '5'
		digits = digits[:k]
		if up {
			j := len(digits) - 1
			for ; j >= 0; j-- {
				if digits[j] == '9' {
					digits[j] = '0'
					continue
				}
				digits[j]++
				break
			}
			if j < 0 { // 999 → 1000
				digits = append([]byte{'1'}, digits...)
				exp++
			}
		}
	}
	if len(digits) == 0 {
		return 0
	}
	f, err := strconv.ParseFloat("0."+string(digits)+"e"+strconv.Itoa(exp+1), 64)
	if err != nil {
		return x
	}
	if neg {
		f = -f
	}
	return f
}
