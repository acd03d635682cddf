package agg

import (
	"encoding/binary"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/turbinesql/turbinesql/types"
)

// held is what an accumulator keeps of one SQL value: its order key, or the
// string itself for TEXT. Both compare with < in SQL order (TEXT by bytes,
// collation "C"), so FIRST_VALUE, LAST_VALUE, ARG_MAX and ARG_MIN are
// written once, generically, and instantiated for the two.
type held interface{ uint64 | string }

// heldCol reads column a as held values into scratch (see keys and strs).
func heldCol[V held](a arrow.Array, canonZero bool, ks *[]uint64, ss *[]string) []V {
	var zero V
	if _, text := any(zero).(string); text {
		return any(strs(a, ss)).([]V)
	}
	return any(keys(a, canonZero, ks)).([]V)
}

func heldText[V held]() bool {
	var zero V
	_, text := any(zero).(string)
	return text
}

// appendHeld encodes vs[i]: 8 bytes big-endian for a key, length-prefixed
// bytes for a string.
func appendHeld[V held](dst []byte, vs []V, i uint32) []byte {
	switch s := any(vs).(type) {
	case []string:
		dst = binary.AppendUvarint(dst, uint64(len(s[i])))
		return append(dst, s[i]...)
	case []uint64:
		return binary.BigEndian.AppendUint64(dst, s[i])
	}
	panic("unreachable")
}

// readHeld decodes one value written by appendHeld.
func readHeld[V held](b []byte) (v V, rest []byte, err error) {
	switch p := any(&v).(type) {
	case *string:
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return v, nil, errCorrupt
		}
		*p = string(b[n : n+int(l)])
		return v, b[n+int(l):], nil
	case *uint64:
		if len(b) < 8 {
			return v, nil, errCorrupt
		}
		*p = binary.BigEndian.Uint64(b)
		return v, b[8:], nil
	}
	panic("unreachable")
}

// heldResult is the Result value of vs[i], of SQL type t.
func heldResult[V held](t types.Type, vs []V, i uint32) any {
	switch s := any(vs).(type) {
	case []string:
		return s[i]
	case []uint64:
		return fromKey(t, s[i])
	}
	panic("unreachable")
}

// touched collects the slots an Update stored a string into. Those strings
// alias the batch's Arrow buffers (released after the call, and holding one
// would pin a whole buffer), so they are cloned once at the end of the call
// instead of at every store in the row loop.
type touched struct {
	gen   uint32
	mark  []uint32 // mark[slot] == gen: already listed in this call
	slots []uint32
}

func (t *touched) grow(n int) { t.mark = growSlice(t.mark, n) }

func (t *touched) begin() {
	t.slots = t.slots[:0]
	t.gen++
	if t.gen == 0 { // wrapped: forget stale marks
		clear(t.mark)
		t.gen = 1
	}
}

func (t *touched) add(slot uint32) {
	if t.mark[slot] != t.gen {
		t.mark[slot] = t.gen
		t.slots = append(t.slots, slot)
	}
}

// cloneTouched gives the listed slots' strings their own memory; for keys
// it does nothing.
func cloneTouched[V held](t *touched, vs []V) {
	if ss, ok := any(vs).([]string); ok {
		for _, s := range t.slots {
			ss[s] = strings.Clone(ss[s])
		}
	}
}
