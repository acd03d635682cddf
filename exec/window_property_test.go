package exec

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/types"
	"github.com/turbinesql/turbinesql/window"
)

var windowSeed = flag.Uint64("window.seed", 0, "seed of TestWindowPanesEqualBatchGroupBy (0: from the clock)")

// TestWindowPanesEqualBatchGroupBy streams random events (random keys,
// disorder within and beyond the watermark bound, two partitions read in
// random chunks) through the aggregator, closing windows as the watermark
// moves, and compares the final panes with a plain GROUP BY computed here
// over the rows that were not late: a row counts in each of its windows
// still open when it arrives (a HOP row may miss windows that closed
// already), and nowhere if all had closed (late).
func TestWindowPanesEqualBatchGroupBy(t *testing.T) {
	seed := *windowSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -args -window.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	for iter := 0; iter < 60; iter++ {
		var spec window.Spec
		if rng.IntN(2) == 0 {
			spec = window.Spec{Kind: window.Tumble, Size: 5 + rng.Int64N(30)}
		} else {
			slide := 2 + rng.Int64N(10)
			size := slide * (1 + rng.Int64N(4))
			if rng.IntN(3) == 0 {
				size = slide + rng.Int64N(2*slide)
			}
			spec = window.Spec{Kind: window.Hop, Slide: slide, Size: size}
		}
		delay, lateness := rng.Int64N(15), rng.Int64N(2)*rng.Int64N(20)
		t.Run(fmt.Sprintf("%d-%v-size%d-slide%d-delay%d-late%d", iter, spec.Kind, spec.Size, spec.Slide, delay, lateness), func(t *testing.T) {
			checkWindowRun(t, rng, spec, delay, lateness)
		})
	}
}

type paneKey struct {
	k, w int64
}

type pane struct {
	n, sum, lo int64
}

func checkWindowRun(t *testing.T, rng *rand.Rand, spec window.Spec, delay, lateness int64) {
	specs := []agg.Spec{{Name: "COUNT", Star: true}, {Name: "SUM", ArgTypes: []types.Type{types.Int}}, {Name: "MIN", ArgTypes: []types.Type{types.Int}}}
	v := &ColRef{Idx: 1, Name: "v", T: types.Int}
	a, err := NewAggregator(AggConfig{Keys: []Expr{&ColRef{Idx: 0, Name: "k", T: types.Int}}, PK: -1, TimeIdx: 2,
		Window: &spec, Lateness: lateness, Specs: specs, Args: [][]Expr{nil, {v}, {v}}})
	if err != nil {
		t.Fatal(err)
	}
	// Events: time runs forward with jitter, some of it beyond the bound.
	type event struct{ k, v, ts int64 }
	var parts [2][]event
	n := 50 + rng.IntN(400)
	for i := 0; i < n; i++ {
		jitter := rng.Int64N(2*delay+1) - delay
		if rng.IntN(10) == 0 {
			jitter -= rng.Int64N(60) // beyond the bound
		}
		e := event{k: rng.Int64N(6), v: rng.Int64N(100) - 20, ts: int64(i)*2 + jitter}
		parts[e.k%2] = append(parts[e.k%2], e)
	}
	// Two partitions meeting in one aggregation: the watermark is the
	// smaller of theirs (no idleness within the test's clock).
	clock := time.Unix(0, 0)
	var ins [2]*window.Partition
	for i := range ins {
		ins[i] = window.NewPartition(int32(i), delay, time.Hour, func() time.Time { return clock }, nil, 0, 0, false)
	}
	current := func() (int64, bool) {
		a, okA := ins[0].Effective()
		b, okB := ins[1].Effective()
		return min(a, b), okA && okB
	}
	want := map[paneKey]*pane{}
	got := map[paneKey]pane{}
	var wm, prev int64
	var hasWM, hasPrev bool
	collect := func(batches []*Batch) {
		for _, b := range batches {
			for i := 0; i < b.N; i++ {
				key := paneKey{b.Cols[0].I[i], b.Cols[1].I[i]}
				if _, dup := got[key]; dup {
					t.Fatalf("pane %+v emitted twice", key)
				}
				if b.Cols[2].I[i]-b.Cols[1].I[i] != spec.Size {
					t.Fatalf("pane %+v has end %d", key, b.Cols[2].I[i])
				}
				got[key] = pane{n: b.Cols[3].I[i], sum: b.Cols[4].I[i], lo: b.Cols[5].I[i]}
			}
		}
	}
	closeUpTo := func(to int64) {
		out, _, err := a.CloseDue(prev, hasPrev, to, false)
		if err != nil {
			t.Fatal(err)
		}
		collect(out)
		a.Expire(to)
		prev, hasPrev = to, true
	}
	next := [2]int{}
	for next[0] < len(parts[0]) || next[1] < len(parts[1]) {
		p := rng.IntN(2)
		if next[p] >= len(parts[p]) {
			p = 1 - p
		}
		end := min(len(parts[p]), next[p]+1+rng.IntN(40))
		chunk := parts[p][next[p]:end]
		b := &Batch{N: len(chunk), Cols: []*Vec{newVec(types.Int, len(chunk)), newVec(types.Int, len(chunk)), newVec(types.Timestamp, len(chunk))}}
		var maxT int64 = math.MinInt64
		for i, e := range chunk {
			b.Cols[0].I[i], b.Cols[1].I[i], b.Cols[2].I[i] = e.k, e.v, e.ts
			maxT = max(maxT, e.ts)
		}
		late, err := a.Consume(b, wm, hasWM)
		if err != nil {
			t.Fatal(err)
		}
		isLate := map[int]bool{}
		for _, i := range late {
			isLate[i] = true
		}
		// The reference: the windows of each row still open on arrival.
		for i, e := range chunk {
			var open []int64
			for _, w := range bruteWindows(spec, e.ts) {
				if !hasWM || w+spec.Size+lateness > wm {
					open = append(open, w)
				}
			}
			if (len(open) == 0) != isLate[i] {
				t.Fatalf("row ts %d at watermark %d: late %v, but %d of its windows are open", e.ts, wm, isLate[i], len(open))
			}
			for _, w := range open {
				pk := paneKey{e.k, w}
				if want[pk] == nil {
					want[pk] = &pane{lo: e.v}
				}
				pw := want[pk]
				pw.n++
				pw.sum += e.v
				pw.lo = min(pw.lo, e.v)
			}
		}
		next[p] = end
		ins[p].Read(int64(end), maxT, true)
		if cur, ok := current(); ok && (!hasWM || cur > wm) {
			wm, hasWM = cur, true
			closeUpTo(wm)
		}
	}
	closeUpTo(math.MaxInt64 / 2) // end of input: everything closes
	if a.Table.Len() != 0 {
		t.Fatalf("%d groups left open after the final close", a.Table.Len())
	}
	if len(got) != len(want) {
		t.Fatalf("%d panes, want %d", len(got), len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != *w {
			t.Fatalf("pane %+v: got %+v (present %v), want %+v", k, g, ok, *w)
		}
	}
}

// bruteWindows enumerates the windows containing ts from their definition.
func bruteWindows(spec window.Spec, ts int64) []int64 {
	step := spec.Slide
	if spec.Kind == window.Tumble {
		step = spec.Size
	}
	var out []int64
	for w := window.FloorTo(ts-spec.Size, step); w <= ts; w += step {
		if w <= ts && ts < w+spec.Size {
			out = append(out, w)
		}
	}
	return out
}
