package exec

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/turbinesql/turbinesql/types"
)

// RowKeys holds the group keys of a batch, one encoded key per row, in the
// byte format of AppendKey (so a key found here is the key state stores).
// It is filled a column at a time: one typed loop per key column, no per-row
// dispatch on the column type.
type RowKeys struct {
	Buf  []byte
	Offs []uint32 // row i is Buf[Offs[i]:Offs[i+1]]
	pos  []uint32 // write cursor per row while encoding
}

// Row returns the encoded key of row i.
func (k *RowKeys) Row(i int) []byte { return k.Buf[k.Offs[i]:k.Offs[i+1]] }

// Encode fills k with the keys of rows [0, n) of cols.
func (k *RowKeys) Encode(cols []*Vec, n int) {
	k.Offs = slices.Grow(k.Offs[:0], n+1)[:n+1]
	lens := k.Offs[1:]
	clear(lens)
	for _, c := range cols {
		keyWidths(c, n, lens)
	}
	var total uint32
	k.Offs[0] = 0
	for i := 1; i <= n; i++ {
		total += k.Offs[i]
		k.Offs[i] = total
	}
	k.Buf = slices.Grow(k.Buf[:0], int(total))[:total]
	k.pos = append(k.pos[:0], k.Offs[:n]...)
	for _, c := range cols {
		writeKeyColumn(k.Buf, k.pos, c, n)
	}
}

// keyWidths adds each row's encoded width of column c to lens.
func keyWidths(c *Vec, n int, lens []uint32) {
	var w uint32
	switch c.T {
	case types.Int, types.Timestamp, types.Interval, types.Double:
		w = 9
	case types.Bool:
		w = 2
	case types.Text:
		for i := 0; i < n; i++ {
			l := len(c.S[i])
			lens[i] += 1 + uint32(uvarintLen(uint64(l))+l)
		}
		if c.Null != nil {
			for i, null := range c.Null[:n] {
				if null {
					l := len(c.S[i])
					lens[i] -= uint32(uvarintLen(uint64(l)) + l)
				}
			}
		}
		return
	default:
		w = 1 // a column of unknown type is all NULL
	}
	for i := range lens[:n] {
		lens[i] += w
	}
	if c.Null != nil {
		for i, null := range c.Null[:n] {
			if null {
				lens[i] -= w - 1
			}
		}
	}
}

func writeKeyColumn(buf []byte, pos []uint32, c *Vec, n int) {
	null := c.Null
	switch c.T {
	case types.Int, types.Timestamp, types.Interval:
		for i := 0; i < n; i++ {
			p := pos[i]
			if null != nil && null[i] {
				buf[p] = 0
				pos[i] = p + 1
				continue
			}
			buf[p] = 1
			binary.BigEndian.PutUint64(buf[p+1:], uint64(c.I[i]))
			pos[i] = p + 9
		}
	case types.Double:
		for i := 0; i < n; i++ {
			p := pos[i]
			if null != nil && null[i] {
				buf[p] = 0
				pos[i] = p + 1
				continue
			}
			buf[p] = 1
			binary.BigEndian.PutUint64(buf[p+1:], math.Float64bits(c.F[i]))
			pos[i] = p + 9
		}
	case types.Bool:
		for i := 0; i < n; i++ {
			p := pos[i]
			if null != nil && null[i] {
				buf[p] = 0
				pos[i] = p + 1
				continue
			}
			buf[p], buf[p+1] = 1, 0
			if c.B[i] {
				buf[p+1] = 1
			}
			pos[i] = p + 2
		}
	case types.Text:
		for i := 0; i < n; i++ {
			p := pos[i]
			if null != nil && null[i] {
				buf[p] = 0
				pos[i] = p + 1
				continue
			}
			buf[p] = 1
			s := c.S[i]
			p += 1 + uint32(binary.PutUvarint(buf[p+1:], uint64(len(s))))
			pos[i] = p + uint32(copy(buf[p:], s))
		}
	default:
		for i := 0; i < n; i++ {
			buf[pos[i]] = 0
			pos[i]++
		}
	}
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}
