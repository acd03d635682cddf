package exec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/types"
)

// randomKeyBatch builds n rows of key columns of the given types drawn from
// a small domain, so keys repeat, with NULLs mixed in.
func randomKeyBatch(rng *rand.Rand, ts []types.Type, n, domain int) []*Vec {
	cols := make([]*Vec, len(ts))
	for c, t := range ts {
		v := newVec(t, n)
		for i := 0; i < n; i++ {
			if rng.IntN(8) == 0 {
				v.ensureNull()[i] = true
				continue
			}
			x := rng.IntN(domain)
			switch t {
			case types.Int, types.Timestamp, types.Interval:
				v.I[i] = int64(x) - int64(domain/2)
			case types.Double:
				v.F[i] = float64(x) / 4
				if x == 0 {
					v.F[i] = math.NaN()
				}
			case types.Text:
				v.S[i] = fmt.Sprintf("k%d\x00é", x) // NUL and multi-byte runes in keys
				if x == 1 {
					v.S[i] = ""
				}
			case types.Bool:
				v.B[i] = x%2 == 0
			}
		}
		cols[c] = v
	}
	return cols
}

// TestRowKeysMatchAppendKey checks the column-at-a-time encoder against the
// row-at-a-time one that state's keys were written with.
func TestRowKeysMatchAppendKey(t *testing.T) {
	cases := [][]types.Type{
		{types.Int},
		{types.Text},
		{types.Double, types.Bool},
		{types.Text, types.Int, types.Timestamp},
		{types.Interval, types.Text},
		{types.Bool, types.Text, types.Text},
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, ts := range cases {
		t.Run(fmt.Sprint(ts), func(t *testing.T) {
			var rk RowKeys
			for _, n := range []int{0, 1, 100, 1000} {
				cols := randomKeyBatch(rng, ts, n, 50)
				rk.Encode(cols, n)
				for i := 0; i < n; i++ {
					want := AppendKey(nil, cols, i)
					if got := rk.Row(i); string(got) != string(want) {
						t.Fatalf("row %d of %d: got %x want %x", i, n, got, want)
					}
					back := make([]*Vec, len(ts))
					for j, typ := range ts {
						back[j] = newVec(typ, 1)
					}
					if err := DecodeKeyInto(want, ts, back, 0); err != nil {
						t.Fatalf("row %d: decode: %v", i, err)
					}
					for j := range ts {
						if g, w := fmt.Sprintf("%#v", back[j].Value(0)), fmt.Sprintf("%#v", cols[j].Value(i)); g != w {
							t.Fatalf("row %d, key column %d: decoded %v, want %v", i, j, g, w)
						}
					}
				}
			}
		})
	}
}

// TestGroupTableAgainstMap feeds random keys over several windows into the
// table and checks slot identity against a plain map: equal (window, key) →
// the same slot, different → different slots, and counts per slot match.
// Windows are closed along the way, so recycled slots are exercised.
func TestGroupTableAgainstMap(t *testing.T) {
	cases := []struct {
		types  []types.Type
		domain int
	}{
		{[]types.Type{types.Int}, 10},
		{[]types.Type{types.Int}, 100000},
		{[]types.Type{types.Text}, 3000},
		{[]types.Type{types.Text, types.Bool, types.Double}, 40},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.types, tc.domain), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.domain)))
			count, err := agg.New(agg.Spec{Name: "COUNT", Star: true})
			if err != nil {
				t.Fatal(err)
			}
			tab := NewGroupTable([]agg.Func{count})
			type wk struct {
				w int64
				k string
			}
			want := map[wk]int64{}
			slotOf := map[wk]uint32{}
			var rk RowKeys
			for round := 0; round < 20; round++ {
				n := 1 + rng.IntN(3000)
				cols := randomKeyBatch(rng, tc.types, n, tc.domain)
				rk.Encode(cols, n)
				slots := make([]uint32, n)
				for i := 0; i < n; i++ {
					w := int64(round/3+rng.IntN(2)) * 1000
					s, _ := tab.Lookup(w, rk.Row(i))
					k := wk{w, string(rk.Row(i))}
					if prev, ok := slotOf[k]; ok && prev != s {
						t.Fatalf("key %x in window %d moved from slot %d to %d", k.k, w, prev, s)
					}
					slotOf[k] = s
					slots[i] = s
					want[k]++
				}
				tab.Update(slots, [][]arrow.Array{nil})
				seen := map[uint32]wk{}
				for k, s := range slotOf {
					if other, dup := seen[s]; dup {
						t.Fatalf("slot %d holds both %v and %v", s, other, k)
					}
					seen[s] = k
					if m := tab.Meta(s); m.Window != k.w || string(tab.Key(s)) != k.k {
						t.Fatalf("slot %d meta %d/%x, want %d/%x", s, m.Window, tab.Key(s), k.w, k.k)
					}
					if got := count.Result(s); got != want[k] {
						t.Fatalf("slot %d count %v want %d", s, got, want[k])
					}
				}
				if tab.Len() != len(slotOf) {
					t.Fatalf("Len %d, want %d", tab.Len(), len(slotOf))
				}
				// Close the oldest windows, as a watermark would.
				for _, w := range tab.DueWindows(int64(round/3)*1000, 1000) {
					if len(tab.WindowSlots(w)) == 0 {
						t.Fatalf("window %d due but empty", w)
					}
					tab.CloseWindow(w)
					for k := range slotOf {
						if k.w == w {
							delete(slotOf, k)
							delete(want, k)
						}
					}
				}
			}
		})
	}
}

// TestProbeIntsMatchEncoding checks the BIGINT fast path prepares the same
// probe keys as encoding the rows, so both paths find the same slots.
func TestProbeIntsMatchEncoding(t *testing.T) {
	v := &Vec{T: types.Int, N: 8, I: []int64{0, 1, -1, 255, 256, math.MaxInt64, math.MinInt64, 42},
		Null: []bool{false, false, false, false, false, false, false, true}}
	var rk RowKeys
	rk.Encode([]*Vec{v}, v.N)
	want := probeRows(nil, &rk, v.N)
	got := probeInts(nil, v, v.N)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d (%d): fast path %+v, encoded %+v", i, v.I[i], got[i], want[i])
		}
		if string(got[i].bytes()) != string(rk.Row(i)) {
			t.Errorf("row %d: inline bytes %x, encoded %x", i, got[i].bytes(), rk.Row(i))
		}
	}
}

// TestProbeShortTextsMatchEncoding is TestProbeIntsMatchEncoding for TEXT.
func TestProbeShortTextsMatchEncoding(t *testing.T) {
	v := &Vec{T: types.Text, N: 6, S: []string{"", "a", "user-12", "exactly14bytes", "é\x00x", "null"},
		Null: []bool{false, false, false, false, false, true}}
	var rk RowKeys
	rk.Encode([]*Vec{v}, v.N)
	want := probeRows(nil, &rk, v.N)
	got, ok := probeShortTexts(nil, v, v.N)
	if !ok {
		t.Fatal("short texts refused")
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d (%q): fast path %+v, encoded %+v", i, v.S[i], got[i], want[i])
		}
	}
	if _, ok := probeShortTexts(nil, &Vec{T: types.Text, N: 1, S: []string{"fifteen-bytes!!"}}, 1); ok {
		t.Error("a 15-byte text is not inline, yet the fast path took it")
	}
}
