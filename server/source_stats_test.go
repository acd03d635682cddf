package server

import (
	"fmt"
	"testing"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/types"
)

// TestSourceStatsObserve folds batches larger than the sampled head, with
// NULLs in every column, and checks the cardinalities and the rate.
func TestSourceStatsObserve(t *testing.T) {
	src := &catalog.Source{Name: "s", Schema: types.Schema{{Name: "k", Type: types.Text}, {Name: "v", Type: types.Int}, {Name: "ts", Type: types.Timestamp}},
		Watermark: &catalog.Watermark{Column: "ts"}}
	st := newSourceStats(src)
	for _, n := range []int{1, statsRows, 3 * statsRows} {
		b := &exec.Batch{N: n, Cols: []*exec.Vec{
			{T: types.Text, N: n, S: make([]string, n), Null: make([]bool, n)},
			{T: types.Int, N: n, I: make([]int64, n), Null: make([]bool, n)},
			{T: types.Timestamp, N: n, I: make([]int64, n), Null: make([]bool, n)},
		}}
		for i := 0; i < n; i++ {
			b.Cols[0].S[i] = fmt.Sprintf("k%d", i%10)
			b.Cols[1].I[i] = int64(i)
			b.Cols[2].I[i] = int64(i) * 1000
			if i%7 == 0 {
				b.Cols[0].Null[i], b.Cols[1].Null[i] = true, true
			}
		}
		st.observe(b)
	}
	if d := st.distinct("k"); d != 10 {
		t.Errorf("distinct k = %d, want 10", d)
	}
	if d := st.distinct("v"); d < statsRows-statsRows/7-5 || d > statsRows {
		t.Errorf("distinct v = %d, want about %d (only the first %d rows of a batch are sampled)", d, statsRows-statsRows/7, statsRows)
	}
	if r := st.rate(); r < 1.3 || r > 1.4 {
		t.Errorf("rate %.2f rows/s, want (1+256+768) rows over 767 s", r)
	}
	if d := st.distinct("nope"); d != -1 {
		t.Errorf("unknown column: %d", d)
	}
}
