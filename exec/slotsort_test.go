package exec

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/turbinesql/turbinesql/types"
)

// TestSortedSlotsOrderAsCompared: the bucketed radix order of a window's
// slots (the close's hot groups) is the comparison order by (key group,
// key), for integer keys, short texts, texts sharing a prefix longer than
// 16 bytes, NULLs, and windows below and above the size it buckets from.
func TestSortedSlotsOrderAsCompared(t *testing.T) {
	long := strings.Repeat("a prefix longer than sixteen bytes ", 2)
	for _, n := range []int{0, 1, 30, 4095, 5000, 60000, 200000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 9))
			tab := NewGroupTable(nil)
			cols := []*Vec{{T: types.Int, N: 1, I: make([]int64, 1), Null: make([]bool, 1)}, {T: types.Text, N: 1, S: make([]string, 1)}}
			seen := map[string]bool{}
			for len(seen) < n {
				cols[0].I[0] = rng.Int64N(1000) - 500
				cols[0].Null[0] = rng.IntN(50) == 0
				switch rng.IntN(3) {
				case 0:
					cols[1].S[0] = fmt.Sprint(rng.IntN(100))
				case 1:
					cols[1].S[0] = long + fmt.Sprint(rng.IntN(1000))
				default:
					cols[1].S[0] = ""
				}
				key := AppendKey(nil, cols, 0)
				if seen[string(key)] {
					continue
				}
				seen[string(key)] = true
				kg := uint16(rng.IntN(5)*200 + rng.IntN(2))
				if n > maxRadixGroup {
					kg = uint16(rng.IntN(2)) // groups past the radix bound
				}
				tab.Slot(7, key, kg)
			}
			g := tab.windows[7]
			if n == 0 {
				if g != nil && len(tab.sortedSlots(g)) != 0 {
					t.Fatal("slots of an empty window")
				}
				return
			}
			got := tab.sortedSlots(g)
			want := slices.Clone(g.slots)
			slices.SortFunc(want, func(x, y uint32) int { return tab.compareSlots(g, x, y) })
			if !slices.Equal(got, want) {
				t.Fatalf("%d slots: the bucketed order differs from the compared one", n)
			}
		})
	}
}
