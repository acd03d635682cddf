package exec

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"

	"github.com/turbinesql/turbinesql/types"
)

// AppendKey encodes row i of the key columns into dst, unambiguously: a
// null tag byte per column, fixed-width numbers, length-prefixed text.
func AppendKey(dst []byte, cols []*Vec, i int) []byte {
	for _, c := range cols {
		if c.IsNull(i) {
			dst = append(dst, 0)
			continue
		}
		dst = append(dst, 1)
		switch c.T {
		case types.Int, types.Timestamp, types.Interval:
			dst = binary.BigEndian.AppendUint64(dst, uint64(c.I[i]))
		case types.Double:
			dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(c.F[i]))
		case types.Bool:
			b := byte(0)
			if c.B[i] {
				b = 1
			}
			dst = append(dst, b)
		case types.Text:
			dst = binary.AppendUvarint(dst, uint64(len(c.S[i])))
			dst = append(dst, c.S[i]...)
		}
	}
	return dst
}

var errBadKey = errors.New("exec: corrupt group key")

// DecodeKeyInto reads a key written by AppendKey back into row i of cols
// (one per key column, of the types ts): straight into the columns, since
// a window's close decodes a key per group emitted (at 10^7 groups, a
// slice of boxed values per key was a sixth of the close's CPU).
func DecodeKeyInto(key []byte, ts []types.Type, cols []*Vec, i int) error {
	for j, t := range ts {
		if len(key) == 0 {
			return errBadKey
		}
		tag := key[0]
		key = key[1:]
		c := cols[j]
		if tag == 0 {
			c.ensureNull()[i] = true
			continue
		}
		switch t {
		case types.Int, types.Timestamp, types.Interval:
			if len(key) < 8 {
				return errBadKey
			}
			c.I[i] = int64(binary.BigEndian.Uint64(key))
			key = key[8:]
		case types.Double:
			if len(key) < 8 {
				return errBadKey
			}
			c.F[i] = math.Float64frombits(binary.BigEndian.Uint64(key))
			key = key[8:]
		case types.Bool:
			if len(key) < 1 {
				return errBadKey
			}
			c.B[i] = key[0] == 1
			key = key[1:]
		case types.Text:
			l, n := binary.Uvarint(key)
			if n <= 0 || uint64(len(key)-n) < l {
				return errBadKey
			}
			c.S[i] = string(key[n : n+int(l)])
			key = key[n+int(l):]
		default:
			return errBadKey
		}
	}
	return nil
}

// PartitionKeyText is a partition-key value as the bytes Kafka hashes: the
// text itself, integers in decimal. NULL gives nil.
func PartitionKeyText(c *Vec, i int, dst []byte) []byte {
	if c.IsNull(i) {
		return nil
	}
	switch c.T {
	case types.Text:
		return append(dst, c.S[i]...)
	case types.Int:
		return strconv.AppendInt(dst, c.I[i], 10)
	}
	return AppendPartitionKey(dst, c.Value(i))
}

// AppendPartitionKey is PartitionKeyText for one Go value (INSERT uses it),
// so a record's key and its state's key group come from the same bytes.
func AppendPartitionKey(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		return append(dst, x...)
	case int64:
		return strconv.AppendInt(dst, x, 10)
	}
	return append(dst, FormatText(v)...)
}
