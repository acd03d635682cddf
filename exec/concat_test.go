package exec

import (
	"testing"

	"github.com/turbinesql/turbinesql/types"
)

func TestConcat(t *testing.T) {
	a := &Batch{N: 2}
	b := &Batch{N: 1}
	for _, c := range []struct {
		t    types.Type
		a, b []any
	}{
		{types.Int, []any{int64(1), nil}, []any{int64(3)}},
		{types.Text, []any{"x", "y"}, []any{nil}},
		{types.Bool, []any{true, false}, []any{true}},
		{types.Double, []any{nil, 2.5}, []any{nil}},
	} {
		va, _ := VecOf(c.t, c.a)
		vb, _ := VecOf(c.t, c.b)
		a.Cols, b.Cols = append(a.Cols, va), append(b.Cols, vb)
	}
	got := Concat(a, b)
	if got.N != 3 {
		t.Fatalf("N = %d", got.N)
	}
	want := [][]any{{int64(1), nil, int64(3)}, {"x", "y", nil}, {true, false, true}, {nil, 2.5, nil}}
	for c, w := range want {
		for i, x := range w {
			if v := got.Cols[c].Value(i); v != x {
				t.Errorf("col %d row %d = %v, want %v", c, i, v, x)
			}
		}
	}
}
