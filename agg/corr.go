package agg

import (
	"encoding/binary"
	"math"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/turbinesql/turbinesql/types"
)

// regr is CORR(y, x), COVAR_POP(y, x) and COVAR_SAMP(y, x) over BIGINT or
// DOUBLE (BIGINT converted to DOUBLE, as PostgreSQL casts it), computed as
// PostgreSQL's float8_regr_accum / float8_regr_combine do: N, Sx, Sxx, Sy,
// Syy, Sxy with the Youngs–Cramer update and the parallel combine.
//
// A row where y or x is NULL is skipped. CORR is NULL with fewer than two
// rows or when either variable has zero variance (a horizontal or vertical
// line); it is clamped to [-1, 1] against rounding, as PostgreSQL 17 does.
// COVAR_POP is NULL with no row, COVAR_SAMP with fewer than two. Infinite
// or NaN inputs, and (where PostgreSQL raises an error) overflow, give NaN.
type regr struct {
	mode   regrMode
	st     []regrState
	ys, xs []float64 // scratch, reused across batches
}

type regrMode uint8

const (
	regrCorr regrMode = iota
	regrCovarPop
	regrCovarSamp
)

type regrState struct {
	n                     int64
	sx, sxx, sy, syy, sxy float64
}

func (s *regrState) add(y, x float64) {
	n := s.n + 1
	sx, sy := s.sx+x, s.sy+y
	sxx, syy, sxy := s.sxx, s.syy, s.sxy
	if s.n > 0 {
		tx, ty := x*float64(n)-sx, y*float64(n)-sy
		scale := 1 / (float64(n) * float64(s.n))
		sxx += tx * tx * scale
		syy += ty * ty * scale
		sxy += tx * ty * scale
		if math.IsInf(sxx, 0) || math.IsInf(sx, 0) {
			sxx = math.NaN()
		}
		if math.IsInf(syy, 0) || math.IsInf(sy, 0) {
			syy = math.NaN()
		}
		if math.IsInf(sxy, 0) {
			sxy = math.NaN()
		}
	} else {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			sxx, sxy = math.NaN(), math.NaN()
		}
		if math.IsNaN(y) || math.IsInf(y, 0) {
			syy, sxy = math.NaN(), math.NaN()
		}
	}
	*s = regrState{n, sx, sxx, sy, syy, sxy}
}

func (s *regrState) combine(o regrState) {
	switch {
	case o.n == 0:
	case s.n == 0:
		*s = o
	default:
		n1, n2 := float64(s.n), float64(o.n)
		n := n1 + n2
		tx := s.sx/n1 - o.sx/n2
		ty := s.sy/n1 - o.sy/n2
		s.sxx = s.sxx + o.sxx + n1*n2*tx*tx/n
		s.syy = s.syy + o.syy + n1*n2*ty*ty/n
		s.sxy = s.sxy + o.sxy + n1*n2*tx*ty/n
		s.sx += o.sx
		s.sy += o.sy
		s.n += o.n
	}
}

func (r *regr) Grow(n int)             { r.st = growSlice(r.st, n) }
func (r *regr) Reset(slot uint32)      { r.st[slot] = regrState{} }
func (r *regr) ResultType() types.Type { return types.Double }
func (r *regr) Mergeable() bool        { return true }

func (r *regr) Update(slots []uint32, args []arrow.Array) {
	vy, noneY := validOf(args[0])
	vx, noneX := validOf(args[1])
	if noneY || noneX {
		return
	}
	ys := floats(args[0], &r.ys)
	xs := floats(args[1], &r.xs)
	for i, sl := range slots {
		if vy.ok(i) && vx.ok(i) {
			r.st[sl].add(ys[i], xs[i])
		}
	}
}

func (r *regr) Result(slot uint32) any {
	s := r.st[slot]
	switch r.mode {
	case regrCovarPop:
		if s.n == 0 {
			return nil
		}
		return s.sxy / float64(s.n)
	case regrCovarSamp:
		if s.n < 2 {
			return nil
		}
		return s.sxy / float64(s.n-1)
	}
	if s.n < 2 || s.sxx == 0 || s.syy == 0 {
		return nil
	}
	// Sxx·Syy can under- or overflow where the two roots would not.
	p := s.sxx * s.syy
	if p == 0 || math.IsInf(p, 0) {
		p = math.Sqrt(s.sxx) * math.Sqrt(s.syy)
	} else {
		p = math.Sqrt(p)
	}
	c := s.sxy / p
	if c < -1 {
		c = -1
	} else if c > 1 {
		c = 1
	}
	return c
}

// Encode writes N as a varint, then (when non-zero) Sx, Sxx, Sy, Syy and Sxy
// as float64 bits, big-endian.
func (r *regr) Encode(dst []byte, slot uint32) []byte {
	s := r.st[slot]
	dst = binary.AppendUvarint(append(dst, encV1), uint64(s.n))
	if s.n == 0 {
		return dst
	}
	for _, f := range [...]float64{s.sx, s.sxx, s.sy, s.syy, s.sxy} {
		dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(f))
	}
	return dst
}

func (r *regr) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil {
		return err
	}
	n, b, err := readCount(b, 40)
	if err != nil || n == 0 {
		return err
	}
	var f [5]float64
	for i := range f {
		f[i] = math.Float64frombits(binary.BigEndian.Uint64(b[8*i:]))
	}
	r.st[slot].combine(regrState{n, f[0], f[1], f[2], f[3], f[4]})
	return nil
}
