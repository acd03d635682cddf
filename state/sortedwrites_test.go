package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestAbsorbSorted: pending groups, a commit's writes (groups and
// partials, windows of both signs, the NULL key's group) and held
// partials (SortedPartials) go into the batch merged in store-key order, a
// key in both the pending and the writes keeps the commit's value, and
// what is stored afterwards is exactly what was written; with runs open,
// the partials of all three are what the window's close reads.
func TestAbsorbSorted(t *testing.T) {
	// 3,000 writes are sorted whole, 40,000 bucketed first (sort).
	for _, n := range []int{3000, 40000} {
		for _, runs := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/runs=%v", n, runs), func(t *testing.T) { testAbsorbSorted(t, n, runs) })
		}
	}
}

// heldSlice gives partials in the order they are in.
type heldSlice struct{ ps []Partial }

func (h *heldSlice) Len() int { return len(h.ps) }

func (h *heldSlice) Next(p *Partial) bool {
	if len(h.ps) == 0 {
		return false
	}
	*p, h.ps = h.ps[0], h.ps[1:]
	return true
}

func testAbsorbSorted(t *testing.T, n int, runs bool) {
	st, err := Open(t.TempDir(), nil, Options{MinRunPartials: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	scope := Scope("s", 0)
	rng := rand.New(rand.NewPCG(3, 4))
	p := st.NewPending(scope)
	if runs {
		p.Close()
		p = runsPending(t, st, scope)
	}
	defer p.Close()
	var held []Partial
	// partials: each window's as its close reads them ("kg/key=val").
	partials := map[int64][]string{}
	partial := func(win int64, kg uint16, k []byte, v string) {
		partials[win] = append(partials[win], fmt.Sprintf("%d/%x=%s", kg, k, v))
	}
	var w GroupWrites
	// A commit's writes are newer than anything evicted before it: of a
	// key in both, the write is what must be stored.
	pend, wrote := map[string]string{}, map[string]string{}
	key := func(i int) []byte { return binary.BigEndian.AppendUint64([]byte{1}, uint64(i)) }
	for i := 0; i < n; i++ {
		win := int64(rng.IntN(3)-1) * 3600_000
		kg := uint16(rng.IntN(4))
		if rng.IntN(10) == 0 {
			kg = NullGroup
		}
		k := key(rng.IntN(n / 6))
		v := fmt.Sprintf("v%d", i)
		switch rng.IntN(5) {
		case 0: // evicted
			if err := p.Put(win, kg, k, []byte(v)); err != nil {
				t.Fatal(err)
			}
			pend[string(GroupKey(scope, win, kg, k))] = v
		case 1: // evicted partial
			id := DeltaID{Gen: 9, Seq: uint64(i)}
			if err := p.PutDelta(win, kg, k, id, []byte(v)); err != nil {
				t.Fatal(err)
			}
			pend[string(appendDeltaKey(nil, scope, win, kg, k, id))] = v
			partial(win, kg, k, v)
		case 2: // changed group (once per commit, as Changes lists it)
			if _, dup := wrote[string(GroupKey(scope, win, kg, k))]; dup {
				continue
			}
			w.Put(win, kg, k, []byte(v))
			wrote[string(GroupKey(scope, win, kg, k))] = v
		case 3: // changed blind group's partial
			id := DeltaID{Gen: 9, Seq: uint64(i)}
			w.PutDelta(win, kg, k, id, []byte(v))
			wrote[string(appendDeltaKey(nil, scope, win, kg, k, id))] = v
			partial(win, kg, k, v)
		default: // a held row's partial
			id := DeltaID{Gen: 9, Seq: uint64(i)}
			held = append(held, Partial{Window: win, KG: kg, Key: k, ID: id, Val: []byte(v)})
			wrote[string(appendDeltaKey(nil, scope, win, kg, k, id))] = v
			partial(win, kg, k, v)
		}
	}
	slices.SortFunc(held, func(x, y Partial) int {
		return bytes.Compare(appendDeltaKey(nil, scope, x.Window, x.KG, x.Key, x.ID), appendDeltaKey(nil, scope, y.Window, y.KG, y.Key, y.ID))
	})
	want := pend
	for k, v := range wrote {
		want[k] = v
	}
	b := st.NewScopedBatch("s", 0)
	if err := b.AbsorbSorted(p, &w, &heldSlice{held}); err != nil {
		t.Fatal(err)
	}
	if runs {
		if b.runs == nil || len(b.runs.paths) != 3 {
			t.Fatal("not a run per window")
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		for win, want := range partials {
			slices.Sort(want) // a group's partials by value, as scanPartials
			slices.SortStableFunc(want, func(x, y string) int {
				return cmpGroupOf(x, y)
			})
			if got := scanPartials(t, st, scope, win); !slices.Equal(got, want) {
				t.Fatalf("window %d: the close reads %d partials, want %d\n got %v\nwant %v", win, len(got), len(want), got, want)
			}
		}
		return
	}
	var prev []byte
	if err := b.EachChange(func(k, _ []byte) error {
		if prev != nil && bytes.Compare(prev, k) > 0 {
			return fmt.Errorf("out of order: %x after %x", k, prev)
		}
		prev = append(prev[:0], k...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if !p.Empty() || w.Len() != 0 {
		t.Fatal("pending or writes not emptied")
	}
	got := map[string]string{}
	if err := st.EachScopeKey("s", 0, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d keys stored, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("key %x: stored %q, want %q", k, got[k], v)
		}
	}
}

// cmpGroupOf orders "kg/key=val" strings by (key group, key), as the
// store orders groups (the NULL key's group last).
func cmpGroupOf(x, y string) int {
	kgOf := func(s string) (int, string) {
		i := strings.IndexByte(s, '/')
		kg, _ := strconv.Atoi(s[:i])
		return kg, s[i+1 : strings.IndexByte(s, '=')]
	}
	xk, xkey := kgOf(x)
	yk, ykey := kgOf(y)
	if xk != yk {
		return xk - yk
	}
	return strings.Compare(xkey, ykey) // hex of keys of one length
}

// TestWritesSortedAfterBucketedCommit: a commit's writes are sorted
// whether or not the commit before was bucketed (one of 40,000 writes was,
// and the next, of 3,000, went out unsorted: its run's table refused its
// keys, and its batch was built out of order).
func TestWritesSortedAfterBucketedCommit(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var w GroupWrites
	for _, n := range []int{40000, 3000, 40000, 100} {
		for i := 0; i < n; i++ {
			win := int64(rng.IntN(2)) * 3600_000
			kg := uint16(rng.IntN(300))
			k := binary.BigEndian.AppendUint64([]byte{1}, rng.Uint64())
			if i%2 == 0 {
				w.PutDelta(win, kg, k, DeltaID{Gen: 1, Seq: uint64(i)}, []byte("v"))
			} else {
				w.Put(win, kg, k, []byte("v"))
			}
		}
		w.sort()
		if len(w.order) != n {
			t.Fatalf("%d writes: %d in order", n, len(w.order))
		}
		for i := 1; i < len(w.order); i++ {
			if w.compare(&w.ents[w.order[i-1].i], &w.ents[w.order[i].i]) >= 0 {
				t.Fatalf("%d writes: write %d out of order", n, i)
			}
		}
		w.reset()
	}
}
