package exec

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/types"
)

// TestEvictKeepsTableConsistent evicts random slots from a window's key
// table (backward-shift deletion) and re-inserts keys, checking after
// every step that each live key finds its own slot and each evicted key
// finds none.
func TestEvictKeepsTableConsistent(t *testing.T) {
	f, err := agg.New(agg.Spec{Name: "count", Star: true})
	if err != nil {
		t.Fatal(err)
	}
	tab := NewGroupTable([]agg.Func{f})
	rng := rand.New(rand.NewPCG(3, 4))
	live := map[string]uint32{}
	key := func(i int) []byte {
		if i%2 == 0 {
			return AppendKey(nil, []*Vec{{T: types.Int, N: 1, I: []int64{int64(i)}}}, 0) // inline
		}
		return []byte(fmt.Sprintf("a long key that is not inline, long enough to fill the arena soon %d", i))
	}
	for step := 0; step < 60000; step++ {
		i := rng.IntN(3000)
		k := key(i)
		if s, ok := live[string(k)]; ok && rng.IntN(2) == 0 {
			tab.evict(s)
			delete(live, string(k))
		} else if !ok {
			s, isNew := tab.Lookup(7, k)
			if !isNew {
				t.Fatalf("step %d: key %d found though evicted", step, i)
			}
			live[string(k)] = s
		}
		if step%997 == 0 {
			for k, s := range live {
				if got, ok := tab.find(7, []byte(k)); !ok || got != s || string(tab.Key(s)) != k {
					t.Fatalf("step %d: key %q: slot %d ok %v, want %d", step, k, got, ok, s)
				}
			}
			if tab.Len() != len(live) {
				t.Fatalf("step %d: %d live, want %d", step, tab.Len(), len(live))
			}
		}
	}
}

// TestKeyFilter: a key added is always held (a miss on it must read the
// store), and few keys never added are (each costs a read finding nothing).
func TestKeyFilter(t *testing.T) {
	var f keyFilter
	const n = 100_000
	for i := 0; i < n; i++ {
		f.add([]byte(fmt.Sprintf("key %d", i)))
	}
	for i := 0; i < n; i++ {
		if !f.mayHold([]byte(fmt.Sprintf("key %d", i))) {
			t.Fatalf("key %d added but not held", i)
		}
	}
	fp := 0
	for i := n; i < 2*n; i++ {
		if f.mayHold([]byte(fmt.Sprintf("key %d", i))) {
			fp++
		}
	}
	if fp > n/20 {
		t.Fatalf("%d of %d keys never added are held", fp, n)
	}
	t.Logf("%d segments, %d bytes, %.2f%% false positives", len(f.segs), f.bytes(), 100*float64(fp)/n)
}

// TestEvictManyKeepsTableConsistent evicts random shares of two windows'
// slots at once (a window losing a quarter or more rebuilds its key
// table, fewer go one by one), then re-inserts, checking that each live
// key finds its own slot, each evicted one none, and that a later
// eviction one by one (which relies on each slot's position) still works.
func TestEvictManyKeepsTableConsistent(t *testing.T) {
	f, err := agg.New(agg.Spec{Name: "count", Star: true})
	if err != nil {
		t.Fatal(err)
	}
	tab := NewGroupTable([]agg.Func{f})
	rng := rand.New(rand.NewPCG(5, 6))
	type wk struct {
		w int64
		k string
	}
	live := map[wk]uint32{}
	key := func(i int) []byte {
		if i%2 == 0 {
			return AppendKey(nil, []*Vec{{T: types.Int, N: 1, I: []int64{int64(i)}}}, 0)
		}
		return []byte(fmt.Sprintf("a long key that is not inline, long enough to fill the arena soon %d", i))
	}
	check := func(round int) {
		t.Helper()
		for x, s := range live {
			if got, ok := tab.find(x.w, []byte(x.k)); !ok || got != s || string(tab.Key(s)) != x.k {
				t.Fatalf("round %d: key %q of %d: slot %d ok %v, want %d", round, x.k, x.w, got, ok, s)
			}
		}
		if tab.Len() != len(live) {
			t.Fatalf("round %d: %d live, want %d", round, tab.Len(), len(live))
		}
	}
	for round := 0; round < 40; round++ {
		for i := 0; i < 2000; i++ {
			x := wk{int64(rng.IntN(2)), string(key(rng.IntN(5000)))}
			if _, ok := live[x]; ok {
				continue
			}
			s, isNew := tab.Lookup(x.w, []byte(x.k))
			if !isNew {
				t.Fatalf("round %d: key %q found though evicted", round, x.k)
			}
			live[x] = s
		}
		check(round)
		// Window 0 loses a share between none and all, window 1 a few.
		share := []int{0, 10, 50, 100}[round%4]
		var gone []uint32
		for x, s := range live {
			if x.w == 0 && rng.IntN(100) < share || x.w == 1 && rng.IntN(100) < 5 {
				gone = append(gone, s)
				delete(live, x)
			}
		}
		tab.evictMany(gone)
		check(round)
		for x, s := range live { // one by one after
			if rng.IntN(10) == 0 {
				tab.evict(s)
				delete(live, x)
			}
		}
		check(round)
		nk := key(100000 + 2*round) // never added
		s, isNew := tab.Lookup(0, nk)
		if !isNew {
			t.Fatalf("round %d: a key never added found", round)
		}
		live[wk{0, string(nk)}] = s
	}
}
