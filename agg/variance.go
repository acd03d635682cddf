package agg

import (
	"encoding/binary"
	"math"
	"math/big"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/turbinesql/turbinesql/types"
)

// The variance family: VAR_SAMP (VARIANCE), VAR_POP, STDDEV_SAMP (STDDEV),
// STDDEV_POP, all DOUBLE. No row: NULL; one row: VAR_SAMP and STDDEV_SAMP
// are NULL, VAR_POP and STDDEV_POP are 0, as in PostgreSQL.
type varMode uint8

const (
	varSamp varMode = iota
	varPop
	stddevSamp
	stddevPop
)

func (m varMode) pop() bool    { return m == varPop || m == stddevPop }
func (m varMode) stddev() bool { return m == stddevSamp || m == stddevPop }

// varInt is the variance family over BIGINT. PostgreSQL computes it in
// NUMERIC, exactly; so does this: the count, the sum (128 bits) and the sum
// of squares (192 bits) are exact integers, merged by addition, and the
// result is (n·Σx² − (Σx)²) / (n·(n−1)) (or / n² for the population)
// rounded once to DOUBLE. Merge therefore equals single stage bit for bit.
type varInt struct {
	mode varMode
	n    []int64
	sum  []i128
	sq   []u192
}

func (v *varInt) Grow(n int) {
	v.n, v.sum, v.sq = growSlice(v.n, n), growSlice(v.sum, n), growSlice(v.sq, n)
}
func (v *varInt) Reset(slot uint32)      { v.n[slot], v.sum[slot], v.sq[slot] = 0, i128{}, u192{} }
func (v *varInt) ResultType() types.Type { return types.Double }
func (v *varInt) Mergeable() bool        { return true }

func (v *varInt) Update(slots []uint32, args []arrow.Array) {
	valid, none := validOf(args[0])
	if none {
		return
	}
	vals := args[0].(*array.Int64).Int64Values()
	for i, sl := range slots {
		if valid.ok(i) {
			x := vals[i]
			v.n[sl]++
			v.sum[sl] = v.sum[sl].addInt(x)
			v.sq[sl].addSquare(x)
		}
	}
}

func (v *varInt) Result(slot uint32) any {
	n := v.n[slot]
	if n == 0 || n == 1 && !v.mode.pop() {
		return nil
	}
	bn := big.NewInt(n)
	s := v.sum[slot].big()
	num := new(big.Int).Mul(bn, v.sq[slot].big())
	num.Sub(num, s.Mul(s, s)) // ≥ 0 (Cauchy–Schwarz), exactly
	den := new(big.Int).Mul(bn, bn)
	if !v.mode.pop() {
		den.Mul(bn, big.NewInt(n-1))
	}
	if v.mode.stddev() {
		return sqrtQuoFloat(num, den)
	}
	return quoFloat(num, den)
}

// Encode writes the count as a varint, then (when non-zero) the sum's low
// and high words and the three words of the sum of squares, big-endian.
func (v *varInt) Encode(dst []byte, slot uint32) []byte {
	dst = binary.AppendUvarint(append(dst, encV1), uint64(v.n[slot]))
	if v.n[slot] == 0 {
		return dst
	}
	dst = binary.BigEndian.AppendUint64(dst, v.sum[slot].lo)
	dst = binary.BigEndian.AppendUint64(dst, uint64(v.sum[slot].hi))
	for _, w := range v.sq[slot] {
		dst = binary.BigEndian.AppendUint64(dst, w)
	}
	return dst
}

func (v *varInt) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil {
		return err
	}
	n, b, err := readCount(b, 40)
	if err != nil || n == 0 {
		return err
	}
	v.n[slot] += n
	v.sum[slot] = v.sum[slot].add(i128{lo: binary.BigEndian.Uint64(b), hi: int64(binary.BigEndian.Uint64(b[8:]))})
	v.sq[slot].add(u192{binary.BigEndian.Uint64(b[16:]), binary.BigEndian.Uint64(b[24:]), binary.BigEndian.Uint64(b[32:])})
	return nil
}

// varFloat is the variance family over DOUBLE, computed exactly as
// PostgreSQL's float8 aggregates do (float8_accum, float8_combine): the
// count N, the sum Sx and the sum of squared deviations Sxx, updated with the
// Youngs–Cramer recurrence and combined with the parallel formula of Chan et
// al. Both are numerically stable; merged and single-stage results agree to
// within rounding (the property test holds them to 1e-9 relative).
//
// An infinite or NaN input makes the result NaN, as in PostgreSQL. Where
// finite inputs overflow DOUBLE PostgreSQL raises an error; a stream cannot
// stop for one group, so the result is NaN there too.
type varFloat struct {
	mode   varMode
	st     []moments
	floats []float64 // scratch, reused across batches
}

// moments is PostgreSQL's float8 transition state {N, Sx, Sxx}.
type moments struct {
	n       int64
	sx, sxx float64
}

func (m *moments) add(x float64) {
	n := m.n + 1
	sx := m.sx + x
	sxx := m.sxx
	if m.n > 0 {
		tmp := x*float64(n) - sx
		sxx += tmp * tmp / (float64(n) * float64(m.n))
		if math.IsInf(sx, 0) || math.IsInf(sxx, 0) {
			sxx = math.NaN()
		}
	} else if math.IsNaN(x) || math.IsInf(x, 0) {
		sxx = math.NaN() // else a lone Inf would report variance 0
	}
	m.n, m.sx, m.sxx = n, sx, sxx
}

func (m *moments) combine(o moments) {
	switch {
	case o.n == 0:
	case m.n == 0:
		*m = o
	default:
		n1, n2 := float64(m.n), float64(o.n)
		tmp := m.sx/n1 - o.sx/n2
		m.sxx = m.sxx + o.sxx + n1*n2*tmp*tmp/(n1+n2)
		m.sx += o.sx
		m.n += o.n
		if math.IsInf(m.sxx, 0) {
			m.sxx = math.NaN()
		}
	}
}

func appendMoments(dst []byte, m moments) []byte {
	dst = binary.AppendUvarint(dst, uint64(m.n))
	if m.n == 0 {
		return dst
	}
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(m.sx))
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(m.sxx))
}

func readMoments(b []byte) (moments, []byte, error) {
	n, b, err := readCount(b, 16)
	if err != nil || n == 0 {
		return moments{}, b, err
	}
	m := moments{n: n, sx: math.Float64frombits(binary.BigEndian.Uint64(b)), sxx: math.Float64frombits(binary.BigEndian.Uint64(b[8:]))}
	return m, b[16:], nil
}

func (v *varFloat) Grow(n int)             { v.st = growSlice(v.st, n) }
func (v *varFloat) Reset(slot uint32)      { v.st[slot] = moments{} }
func (v *varFloat) ResultType() types.Type { return types.Double }
func (v *varFloat) Mergeable() bool        { return true }

func (v *varFloat) Update(slots []uint32, args []arrow.Array) {
	valid, none := validOf(args[0])
	if none {
		return
	}
	xs := floats(args[0], &v.floats)
	for i, sl := range slots {
		if valid.ok(i) {
			v.st[sl].add(xs[i])
		}
	}
}

func (v *varFloat) Result(slot uint32) any {
	m := v.st[slot]
	if m.n == 0 || m.n == 1 && !v.mode.pop() {
		return nil
	}
	d := float64(m.n)
	if !v.mode.pop() {
		d--
	}
	r := m.sxx / d
	if v.mode.stddev() {
		r = math.Sqrt(r)
	}
	return r
}

// Encode writes N as a varint, then (when non-zero) Sx and Sxx as float64
// bits, big-endian.
func (v *varFloat) Encode(dst []byte, slot uint32) []byte {
	return appendMoments(append(dst, encV1), v.st[slot])
}

func (v *varFloat) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil {
		return err
	}
	m, _, err := readMoments(b)
	if err != nil {
		return err
	}
	v.st[slot].combine(m)
	return nil
}
