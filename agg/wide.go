package agg

import (
	"math"
	"math/big"
	"math/bits"
)

// Exact integer arithmetic for the BIGINT aggregates. PostgreSQL computes
// SUM, AVG and the variance family of bigint in NUMERIC, exactly; keeping
// the sums exact here makes the answer independent of the order rows and
// partials arrive in (merge equals single stage bit for bit) and lets the
// final DOUBLE be the correctly rounded value of the exact answer.

// i128 is a two's-complement 128-bit integer: a sum of up to 2^64 BIGINTs.
type i128 struct {
	lo uint64
	hi int64
}

func (a i128) addInt(v int64) i128 {
	lo, c := bits.Add64(a.lo, uint64(v), 0)
	return i128{lo, a.hi + v>>63 + int64(c)}
}

func (a i128) add(b i128) i128 {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	return i128{lo, a.hi + b.hi + int64(c)}
}

// small returns a as an int64 when it fits.
func (a i128) small() (int64, bool) {
	if (a.hi == 0 && a.lo <= math.MaxInt64) || (a.hi == -1 && a.lo > math.MaxInt64) {
		return int64(a.lo), true
	}
	return 0, false
}

func (a i128) big() *big.Int {
	z := big.NewInt(a.hi)
	z.Lsh(z, 64)
	return z.Add(z, new(big.Int).SetUint64(a.lo))
}

// float is a rounded to the nearest DOUBLE (ties to even).
func (a i128) float() float64 {
	if v, ok := a.small(); ok {
		return float64(v)
	}
	f, _ := new(big.Float).SetInt(a.big()).Float64()
	return f
}

// quo is a/n rounded once to the nearest DOUBLE: AVG(BIGINT).
func (a i128) quo(n int64) float64 {
	const exact = 1 << 53 // integers up to 2^53 convert to DOUBLE exactly
	if v, ok := a.small(); ok && v <= exact && v >= -exact && n <= exact {
		return float64(v) / float64(n) // one IEEE rounding of exact operands
	}
	return quoFloat(a.big(), big.NewInt(n))
}

// u192 is an unsigned 192-bit integer (little-endian words): a sum of up to
// 2^64 squares of BIGINTs, each below 2^126.
type u192 [3]uint64

func (a *u192) addSquare(v int64) {
	m := uint64(v)
	if v < 0 {
		m = -m // also right for MinInt64: 2^63
	}
	hi, lo := bits.Mul64(m, m)
	var c uint64
	a[0], c = bits.Add64(a[0], lo, 0)
	a[1], c = bits.Add64(a[1], hi, c)
	a[2] += c
}

func (a *u192) add(b u192) {
	var c uint64
	a[0], c = bits.Add64(a[0], b[0], 0)
	a[1], c = bits.Add64(a[1], b[1], c)
	a[2] += b[2] + c
}

func (a u192) big() *big.Int {
	z := new(big.Int).SetUint64(a[2])
	z.Lsh(z, 64).Or(z, new(big.Int).SetUint64(a[1]))
	return z.Lsh(z, 64).Or(z, new(big.Int).SetUint64(a[0]))
}

// quoFloat is num/den rounded once to the nearest DOUBLE.
func quoFloat(num, den *big.Int) float64 {
	// SetInt at precision 0 is exact; Quo rounds once, to 53 bits.
	q := new(big.Float).SetPrec(53).Quo(new(big.Float).SetInt(num), new(big.Float).SetInt(den))
	f, _ := q.Float64()
	return f
}

// sqrtQuoFloat is sqrt(num/den) for num, den >= 0, rounded to DOUBLE: the
// quotient is carried at 128 bits, so the result is the correctly rounded
// root except in cases too close to a rounding boundary to matter.
func sqrtQuoFloat(num, den *big.Int) float64 {
	q := new(big.Float).SetPrec(128).Quo(new(big.Float).SetInt(num), new(big.Float).SetInt(den))
	if q.Sign() == 0 {
		return 0
	}
	f, _ := new(big.Float).SetPrec(53).Sqrt(q).Float64()
	return f
}
