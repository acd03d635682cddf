package state

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestIntGroups: the column pass gives each integer key the group its
// decimal text has (KeyGroup, what placement and the record's key use),
// and NULLs the NULL group; its decimal is strconv's for every length and
// sign.
func TestIntGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	vals := []int64{0, 1, -1, 9, 10, 99, 100, math.MaxInt64, math.MinInt64, math.MinInt64 + 1, -1000000007}
	for p := int64(1); p > 0 && p <= math.MaxInt64/10; p *= 10 {
		vals = append(vals, p, p-1, p+1, -p, -(p - 1), 10*p-1)
	}
	for len(vals) < 5000 {
		vals = append(vals, rng.Int64()>>rng.IntN(63)*int64(1-2*rng.IntN(2)))
	}
	var buf [24]byte
	for _, v := range vals {
		if z := decimal(&buf, v); string(buf[z:]) != strconv.FormatInt(v, 10) {
			t.Fatalf("decimal(%d) = %q", v, buf[z:])
		}
	}
	null := make([]bool, len(vals))
	for i := range null {
		null[i] = i%7 == 3
	}
	for _, nulls := range [][]bool{nil, null} {
		dst := make([]uint16, len(vals))
		IntGroups(dst, vals, nulls)
		for i, v := range vals {
			want := KeyGroup([]byte(strconv.FormatInt(v, 10)))
			if nulls != nil && nulls[i] {
				want = NullGroup
			}
			if dst[i] != want {
				t.Fatalf("key %d (null %v): group %d, want %d", v, nulls != nil && nulls[i], dst[i], want)
			}
		}
	}
}
