package agg

import (
	"encoding/binary"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/turbinesql/turbinesql/types"
)

// listAgg is STRING_AGG(text, sep) and ARRAY_AGG(x): the non-NULL values
// of a group (ARRAY_AGG keeps NULLs), joined by sep or printed as an array
// literal ('{a,b}'; arrays are carried as text). Without an ORDER BY inside
// the call PostgreSQL leaves the order unspecified; here the values are
// kept sorted, which makes merge order-insensitive and the result
// deterministic. State is every value, so it suits catalog-sized groups.
//
// ARRAY_AGG_BY(x, k) and STRING_AGG_BY(x, sep, k) are the ordered forms the
// front end makes of array_agg(x ORDER BY k): the values are kept sorted by
// k (then by value), so the order is the one asked for.
type listAgg struct {
	array bool
	byKey bool
	sep   string
	vals  [][]*string // per slot; nil entries are NULLs (ARRAY_AGG)
	keys  [][]string  // per slot, beside vals: sortable encodings of k
}

func (l *listAgg) Grow(n int) {
	l.vals = growSlice(l.vals, n)
	l.keys = growSlice(l.keys, n)
}
func (l *listAgg) Reset(slot uint32) { l.vals[slot], l.keys[slot] = nil, nil }
func (l *listAgg) Mergeable() bool   { return true }
func (l *listAgg) ResultType() types.Type {
	return types.Text
}

func (l *listAgg) add(slot uint32, key string, v *string) {
	vs, ks := l.vals[slot], l.keys[slot]
	i := sort.Search(len(vs), func(j int) bool {
		if c := strings.Compare(ks[j], key); c != 0 {
			return c > 0
		}
		return cmpNullable(vs[j], v) > 0
	})
	l.vals[slot] = slices.Insert(vs, i, v)
	l.keys[slot] = slices.Insert(ks, i, key)
}

// cmpNullable orders values with NULLs last.
func cmpNullable(a, b *string) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	return strings.Compare(*a, *b)
}

// sortKey encodes row i of a so that byte order is value order (NULLs last).
func sortKey(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return "\xff\xff\xff\xff\xff\xff\xff\xff\xff"
	}
	switch c := a.(type) {
	case *array.Int64:
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(c.Value(i))^(1<<63))
		return string(b[:])
	case *array.String:
		return c.Value(i)
	}
	return a.ValueStr(i)
}

func (l *listAgg) Update(slots []uint32, args []arrow.Array) {
	a := args[0]
	for i, sl := range slots {
		key := ""
		if l.byKey {
			key = sortKey(args[1], i)
		}
		if a.IsNull(i) {
			if l.array {
				l.add(sl, key, nil)
			}
			continue
		}
		var s string
		switch c := a.(type) {
		case *array.String:
			s = c.Value(i)
		case *array.Int64:
			s = strconv.FormatInt(c.Value(i), 10)
		case *array.Float64:
			s = strconv.FormatFloat(c.Value(i), 'g', -1, 64)
		case *array.Boolean:
			s = map[bool]string{true: "t", false: "f"}[c.Value(i)]
		default:
			s = a.ValueStr(i)
		}
		l.add(sl, key, &s)
	}
}

func (l *listAgg) Result(slot uint32) any {
	vs := l.vals[slot]
	if len(vs) == 0 {
		return nil
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		switch {
		case v == nil:
			parts[i] = "NULL"
		case l.array && (*v == "" || strings.ContainsAny(*v, `{},"\ `) || strings.EqualFold(*v, "null")):
			parts[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(*v) + `"`
		default:
			parts[i] = *v
		}
	}
	if l.array {
		return "{" + strings.Join(parts, ",") + "}"
	}
	return strings.Join(parts, l.sep)
}

// Encode writes the count, then each value as a null flag and a
// length-prefixed string.
func (l *listAgg) Encode(dst []byte, slot uint32) []byte {
	dst = append(dst, encV1)
	vs := l.vals[slot]
	dst = binary.AppendUvarint(dst, uint64(len(vs)))
	for i, v := range vs {
		dst = binary.AppendUvarint(dst, uint64(len(l.keys[slot][i])))
		dst = append(dst, l.keys[slot][i]...)
		if v == nil {
			dst = append(dst, 0)
			continue
		}
		dst = append(dst, 1)
		dst = binary.AppendUvarint(dst, uint64(len(*v)))
		dst = append(dst, *v...)
	}
	return dst
}

func (l *listAgg) Merge(slot uint32, enc []byte) error {
	b, err := checkVersion(enc)
	if err != nil {
		return err
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return errCorrupt
	}
	b = b[k:]
	var got []*string
	var keys []string
	for range n {
		m, k := binary.Uvarint(b)
		if k <= 0 || m > uint64(len(b)-k) {
			return errCorrupt
		}
		keys = append(keys, string(b[k:k+int(m)]))
		b = b[k+int(m):]
		if len(b) < 1 {
			return errCorrupt
		}
		flag := b[0]
		b = b[1:]
		if flag == 0 {
			got = append(got, nil)
			continue
		}
		if flag != 1 {
			return errCorrupt
		}
		m, k = binary.Uvarint(b)
		if k <= 0 || m > uint64(len(b)-k) {
			return errCorrupt
		}
		s := string(b[k : k+int(m)])
		b = b[k+int(m):]
		got = append(got, &s)
	}
	if len(b) != 0 {
		return errCorrupt
	}
	for i, v := range got {
		l.add(slot, keys[i], v)
	}
	return nil
}

func init() {
	register(entry{Info: Info{Name: "STRING_AGG", MinArgs: 2, MaxArgs: 2, Consts: []int{1}},
		build: func(s Spec, cols []types.Type) (Func, error) {
			if cols[0] != types.Text {
				return nil, badArgs(s, cols, "a TEXT argument and a constant delimiter")
			}
			sep, ok := s.Params[0].(string)
			if !ok && s.Params[0] != nil {
				return nil, errorf(ErrParam, "STRING_AGG: the delimiter must be text")
			}
			return &listAgg{sep: sep}, nil
		}})
	register(entry{Info: Info{Name: "ARRAY_AGG", MinArgs: 1, MaxArgs: 1},
		build: func(s Spec, cols []types.Type) (Func, error) {
			if !valueType(cols[0]) || cols[0] == types.Timestamp {
				return nil, badArgs(s, cols, "a TEXT, BIGINT, DOUBLE or BOOLEAN argument")
			}
			return &listAgg{array: true}, nil
		}})
}

func init() {
	register(entry{Info: Info{Name: "STRING_AGG_BY", MinArgs: 3, MaxArgs: 3, Consts: []int{1}},
		build: func(s Spec, cols []types.Type) (Func, error) {
			if cols[0] != types.Text || (cols[1] != types.Int && cols[1] != types.Text) {
				return nil, badArgs(s, cols, "a TEXT argument, a constant delimiter and a BIGINT or TEXT ORDER BY key")
			}
			sep, _ := s.Params[0].(string)
			return &listAgg{sep: sep, byKey: true}, nil
		}})
	register(entry{Info: Info{Name: "ARRAY_AGG_BY", MinArgs: 2, MaxArgs: 2},
		build: func(s Spec, cols []types.Type) (Func, error) {
			if !valueType(cols[0]) || cols[0] == types.Timestamp || (cols[1] != types.Int && cols[1] != types.Text) {
				return nil, badArgs(s, cols, "a TEXT, BIGINT, DOUBLE or BOOLEAN argument and a BIGINT or TEXT ORDER BY key")
			}
			return &listAgg{array: true, byKey: true}, nil
		}})
}
