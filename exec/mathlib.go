package exec

import (
	"math"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// Numeric functions of the PostgreSQL library, with its domain errors:
// 2201F for sqrt and power outside their domain, 2201E for a logarithm of
// zero or a negative number, 22012 for a zero divisor, 22003 when a
// result overflows or underflows DOUBLE PRECISION, 2201G for width_bucket.

func init() {
	d, i := types.Double, types.Int
	unary := func(name string, f func(float64) (float64, error)) {
		def(name, floatFunc(f), sig(d, d))
	}
	def("POWER", power, sig(d, d, d))
	def("POW", power, sig(d, d, d))
	unary("SQRT", func(x float64) (float64, error) {
		if x < 0 {
			return 0, sql.Errorf(sql.CodeInvalidArgPower, "cannot take square root of a negative number")
		}
		return math.Sqrt(x), nil
	})
	unary("CBRT", func(x float64) (float64, error) { return cbrt(x), nil })
	unary("LN", logOf(math.Log))
	unary("LOG10", logOf(math.Log10))
	def("LOG", logFunc, sig(d, d), sig(d, d, d))
	unary("EXP", func(x float64) (float64, error) {
		r := math.Exp(x)
		if math.IsInf(r, 0) && !math.IsInf(x, 0) {
			return 0, floatOverflow()
		}
		if r == 0 && !math.IsInf(x, 0) {
			return 0, floatUnderflow()
		}
		return r, nil
	})
	unary("DEGREES", func(x float64) (float64, error) { return checkFloat(x/radiansPerDegree, x) })
	unary("RADIANS", func(x float64) (float64, error) { return checkFloat(x*radiansPerDegree, x) })
	unary("SIN", trig(math.Sin, false))
	unary("COS", trig(math.Cos, false))
	unary("TAN", trig(math.Tan, false))
	unary("COT", trig(func(x float64) float64 { return 1 / math.Tan(x) }, false))
	unary("ASIN", trig(math.Asin, true))
	unary("ACOS", trig(math.Acos, true))
	unary("ATAN", trig(math.Atan, false))
	def("ATAN2", func(out *Vec, args []*Vec) error {
		for k, y := range args[0].F {
			out.F[k] = math.Atan2(y, args[1].F[k])
		}
		return nil
	}, sig(d, d, d))
	def("PI", func(out *Vec, _ []*Vec) error {
		for k := range out.F {
			out.F[k] = math.Pi
		}
		return nil
	}, sig(d))
	def("MOD", mod, sig(i, i, i), sig(d, d, d))
	def("DIV", div, sig(i, i, i), sig(d, d, d))
	def("SIGN", sign, sig(i, i), sig(d, d))
	def("TRUNC", trunc, sig(i, i), sig(d, d), sig(i, i, i), sig(d, d, i))
	def("WIDTH_BUCKET", widthBucket, sig(i, d, d, d, i))
	def("GCD", gcdFunc(false), sig(i, i, i))
	def("LCM", gcdFunc(true), sig(i, i, i))
}

// radiansPerDegree is PostgreSQL's RADIANS_PER_DEGREE.
const radiansPerDegree = 0.0174532925199432957692

func floatFunc(f func(float64) (float64, error)) kernel {
	return func(out *Vec, args []*Vec) error {
		for k, x := range args[0].F {
			if out.rowNull(k) {
				continue
			}
			r, err := f(x)
			if err != nil {
				return err
			}
			out.F[k] = r
		}
		return nil
	}
}

// checkFloat fails a result that overflowed from a finite input.
func checkFloat(r, x float64) (float64, error) {
	if math.IsInf(r, 0) && !math.IsInf(x, 0) {
		return 0, floatOverflow()
	}
	return r, nil
}

func trig(f func(float64) float64, bounded bool) func(float64) (float64, error) {
	return func(x float64) (float64, error) {
		if math.IsInf(x, 0) || (bounded && (x < -1 || x > 1)) {
			return 0, sql.Errorf(sql.CodeNumericOutOfRange, "input is out of range")
		}
		return f(x), nil
	}
}

func logOf(f func(float64) float64) func(float64) (float64, error) {
	return func(x float64) (float64, error) {
		if err := logDomain(x); err != nil {
			return 0, err
		}
		return f(x), nil
	}
}

func logDomain(x float64) error {
	switch {
	case x == 0:
		return sql.Errorf(sql.CodeInvalidArgLog, "cannot take logarithm of zero")
	case x < 0:
		return sql.Errorf(sql.CodeInvalidArgLog, "cannot take logarithm of a negative number")
	}
	return nil
}

// logFunc is log(x) (base 10) or log(b, x).
func logFunc(out *Vec, args []*Vec) error {
	if len(args) == 1 {
		return floatFunc(logOf(math.Log10))(out, args)
	}
	for k, b := range args[0].F {
		if out.rowNull(k) {
			continue
		}
		x := args[1].F[k]
		if err := logDomain(b); err != nil {
			return err
		}
		if err := logDomain(x); err != nil {
			return err
		}
		lb := math.Log(b)
		if lb == 0 {
			return divByZero()
		}
		out.F[k] = math.Log(x) / lb
	}
	return nil
}

// power is power(x, y) and x ^ y, as PostgreSQL's dpow.
func power(out *Vec, args []*Vec) error {
	for k, x := range args[0].F {
		if out.rowNull(k) {
			continue
		}
		y := args[1].F[k]
		switch {
		case x == 0 && y < 0:
			return sql.Errorf(sql.CodeInvalidArgPower, "zero raised to a negative power is undefined")
		case x < 0 && math.Floor(y) != y && !math.IsInf(y, 0):
			return sql.Errorf(sql.CodeInvalidArgPower, "a negative number raised to a non-integer power yields a complex result")
		}
		r := math.Pow(x, y)
		if math.IsInf(r, 0) && !math.IsInf(x, 0) && !math.IsInf(y, 0) {
			return floatOverflow()
		}
		if r == 0 && x != 0 && !math.IsInf(y, 0) {
			return floatUnderflow()
		}
		out.F[k] = r
	}
	return nil
}

func mod(out *Vec, args []*Vec) error {
	if args[0].T == types.Int {
		return arithInt('%', args[0].I, args[1].I, out.I, out.Null, bigintRange)
	}
	for k, x := range args[0].F {
		if out.rowNull(k) {
			continue
		}
		if args[1].F[k] == 0 {
			return divByZero()
		}
		out.F[k] = math.Mod(x, args[1].F[k])
	}
	return nil
}

// div is the integer quotient, truncated toward zero.
func div(out *Vec, args []*Vec) error {
	if args[0].T == types.Int {
		return arithInt('/', args[0].I, args[1].I, out.I, out.Null, bigintRange)
	}
	for k, x := range args[0].F {
		if out.rowNull(k) {
			continue
		}
		if args[1].F[k] == 0 {
			return divByZero()
		}
		out.F[k] = math.Trunc(x / args[1].F[k])
	}
	return nil
}

func sign(out *Vec, args []*Vec) error {
	if args[0].T == types.Int {
		for k, x := range args[0].I {
			switch {
			case x > 0:
				out.I[k] = 1
			case x < 0:
				out.I[k] = -1
			}
		}
		return nil
	}
	for k, x := range args[0].F {
		switch {
		case x > 0:
			out.F[k] = 1
		case x < 0:
			out.F[k] = -1
		case math.IsNaN(x):
			out.F[k] = x
		}
	}
	return nil
}

// trunc is trunc(x) toward zero, or trunc(x, n) to n decimal places
// (n < 0: tens, hundreds, ...), on x's decimal form as for round(x, n).
func trunc(out *Vec, args []*Vec) error {
	x := args[0]
	if x.T == types.Int {
		for k, v := range x.I {
			if len(args) == 1 || args[1].I[k] >= 0 {
				out.I[k] = v
				continue
			}
			n := args[1].I[k]
			if n < -18 {
				continue
			}
			p := int64(1)
			for j := int64(0); j < -n; j++ {
				p *= 10
			}
			out.I[k] = v / p * p
		}
		return nil
	}
	for k, v := range x.F {
		if len(args) == 1 {
			out.F[k] = math.Trunc(v)
		} else {
			out.F[k] = decimalPlaces(v, args[1].I[k], false)
		}
	}
	return nil
}

func widthBucket(out *Vec, args []*Vec) error {
	for k, x := range args[0].F {
		if out.rowNull(k) {
			continue
		}
		lo, hi, n := args[1].F[k], args[2].F[k], args[3].I[k]
		switch {
		case n <= 0:
			return sql.Errorf(sql.CodeInvalidArgWidthBkt, "count must be greater than zero")
		case math.IsNaN(x) || math.IsNaN(lo) || math.IsNaN(hi):
			return sql.Errorf(sql.CodeInvalidArgWidthBkt, "operand, lower bound, and upper bound cannot be NaN")
		case math.IsInf(lo, 0) || math.IsInf(hi, 0):
			return sql.Errorf(sql.CodeInvalidArgWidthBkt, "lower and upper bounds must be finite")
		case lo == hi:
			return sql.Errorf(sql.CodeInvalidArgWidthBkt, "lower bound cannot equal upper bound")
		}
		var b int64
		if lo < hi {
			switch {
			case x < lo:
				b = 0
			case x >= hi:
				b = n + 1
			default:
				b = min(int64(float64(n)*((x-lo)/(hi-lo))), n-1) + 1
			}
		} else {
			switch {
			case x > lo:
				b = 0
			case x <= hi:
				b = n + 1
			default:
				b = min(int64(float64(n)*((lo-x)/(lo-hi))), n-1) + 1
			}
		}
		out.I[k] = b
	}
	return nil
}

func gcdFunc(lcm bool) kernel {
	return func(out *Vec, args []*Vec) error {
		for k, a := range args[0].I {
			if out.rowNull(k) {
				continue
			}
			b := args[1].I[k]
			g, ok := gcd(a, b)
			if !ok {
				return bigintRange()
			}
			if !lcm {
				out.I[k] = g
				continue
			}
			if a == 0 || b == 0 {
				out.I[k] = 0
				continue
			}
			r, ok := mulInt(a/g, b)
			if !ok || r == math.MinInt64 {
				return bigintRange()
			}
			out.I[k] = max(r, -r)
		}
		return nil
	}
}

// gcd is the non-negative greatest common divisor; false when it is
// 2^63, which BIGINT cannot hold.
func gcd(a, b int64) (int64, bool) {
	for b != 0 {
		a, b = b, a%b
	}
	if a == math.MinInt64 {
		return 0, false
	}
	return max(a, -a), true
}

// cbrt is glibc's cbrt (sysdeps/ieee754/dbl-64/s_cbrt.c), which
// PostgreSQL calls: its last bit differs from Go's math.Cbrt on some
// inputs (cbrt(27) is 3.0000000000000004 there), and PostgreSQL's answer
// is the one to give.
func cbrt(x float64) float64 {
	const cbrt2, sqrCbrt2 = 1.2599210498948731648, 1.5874010519681994748
	factor := [5]float64{1.0 / sqrCbrt2, 1.0 / cbrt2, 1.0, cbrt2, sqrCbrt2}
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x + x
	}
	xm, xe := math.Frexp(math.Abs(x))
	u := 0.354895765043919860 + ((1.50819193781584896 + ((-2.11499494167371287 + ((2.44693122563534430 +
		((-1.83469277483613086 + (0.784932344976639262-0.145263899385486377*xm)*xm) * xm)) * xm)) * xm)) * xm)
	t2 := u * u * u
	ym := u * (t2 + 2.0*xm) / (2.0*t2 + xm) * factor[2+xe%3]
	if x < 0 {
		ym = -ym
	}
	return math.Ldexp(ym, xe/3)
}
