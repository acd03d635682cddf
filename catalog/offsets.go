package catalog

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Offsets holds an offset for each partition of a topic; a partition it
// does not hold is at 0.
//
// A stream's Start is one: the output topic's log end offsets when the
// stream was created, taken before it wrote anything. A stream created
// over a topic that already held records (an earlier stream's of the same
// name, or anyone's) reads back only what it wrote itself, from there.
type Offsets map[int32]int64

// At is the offset of partition p.
func (o Offsets) At(p int32) int64 { return o[p] }

// Zero reports whether every partition is at 0 (a topic read whole).
func (o Offsets) Zero() bool {
	for _, v := range o {
		if v != 0 {
			return false
		}
	}
	return true
}

// String is the catalog record's form: "p:offset" pairs by partition,
// comma-separated, the partitions at 0 left out ("" for none).
func (o Offsets) String() string {
	parts := make([]int32, 0, len(o))
	for p, v := range o {
		if v != 0 {
			parts = append(parts, p)
		}
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(p)))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(o[p], 10))
	}
	return b.String()
}

// ParseOffsets reads the form String writes ("" is nil: every partition
// at 0).
func ParseOffsets(s string) (Offsets, error) {
	if s == "" {
		return nil, nil
	}
	out := Offsets{}
	for _, pair := range strings.Split(s, ",") {
		ps, os, ok := strings.Cut(pair, ":")
		p, perr := strconv.ParseInt(ps, 10, 32)
		o, oerr := strconv.ParseInt(os, 10, 64)
		if !ok || perr != nil || oerr != nil || p < 0 || o < 0 {
			return nil, fmt.Errorf("offsets %q: %q is not partition:offset", s, pair)
		}
		if _, dup := out[int32(p)]; dup {
			return nil, fmt.Errorf("offsets %q: partition %d twice", s, p)
		}
		out[int32(p)] = o
	}
	return out, nil
}
