package window

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestWindowsOf(t *testing.T) {
	cases := []struct {
		spec Spec
		ts   int64
		want []int64
	}{
		{Spec{Kind: Tumble, Size: 10}, 0, []int64{0}},
		{Spec{Kind: Tumble, Size: 10}, 9, []int64{0}},
		{Spec{Kind: Tumble, Size: 10}, 10, []int64{10}},
		{Spec{Kind: Tumble, Size: 10}, -1, []int64{-10}},
		{Spec{Kind: Hop, Size: 10, Slide: 5}, 7, []int64{0, 5}},
		{Spec{Kind: Hop, Size: 10, Slide: 5}, 10, []int64{5, 10}},
		{Spec{Kind: Hop, Size: 10, Slide: 10}, 3, []int64{0}},
		{Spec{Kind: Hop, Size: 10, Slide: 4}, 9, []int64{0, 4, 8}},
		{Spec{Kind: Hop, Size: 10, Slide: 4}, -1, []int64{-8, -4}},
	}
	for _, c := range cases {
		if got := c.spec.WindowsOf(c.ts); !slices.Equal(got, c.want) {
			t.Errorf("%v.WindowsOf(%d) = %v, want %v", c.spec, c.ts, got, c.want)
		}
	}
}

// TestSlicesAgainstBruteForce checks, for random hop shapes and times, that
// the slice of a row lies in exactly the windows that contain the row, that
// a window is the union of its slices, and that the slice's first and last
// window ends and WindowsEndingIn agree with enumerating windows.
func TestSlicesAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		slide := 1 + rng.Int64N(20)
		size := slide * (1 + rng.Int64N(5))
		if rng.IntN(3) == 0 {
			size = slide + rng.Int64N(3*slide) // not a multiple: slices are the gcd
		}
		s := Spec{Kind: Hop, Size: size, Slide: slide}
		if rng.IntN(4) == 0 {
			s = Spec{Kind: Tumble, Size: size}
			slide = size
		}
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		ts := rng.Int64N(400) - 200
		var want []int64
		for w := floorTo(ts-size, slide); w <= ts; w += slide {
			if w <= ts && ts < w+size {
				want = append(want, w)
			}
		}
		if got := s.WindowsOf(ts); !slices.Equal(got, want) {
			t.Fatalf("%+v WindowsOf(%d) = %v, want %v", s, ts, got, want)
		}
		sl := s.SliceOf(ts)
		for _, w := range want {
			if !slices.Contains(s.SlicesOfWindow(w), sl) {
				t.Fatalf("%+v: window %d lacks slice %d of ts %d", s, w, sl, ts)
			}
		}
		if got := s.LastWindowEnd(sl); got != want[len(want)-1]+size {
			t.Fatalf("%+v: LastWindowEnd(%d) = %d, want %d", s, sl, got, want[len(want)-1]+size)
		}
		if got := s.FirstWindowEnd(sl); got != want[0]+size {
			t.Fatalf("%+v: FirstWindowEnd(%d) = %d, want %d", s, sl, got, want[0]+size)
		}
		after := rng.Int64N(400) - 200
		upTo := after + rng.Int64N(50)
		var ends []int64
		for w := floorTo(after-size, slide); w+size <= upTo; w += slide {
			if w+size > after {
				ends = append(ends, w)
			}
		}
		if got := s.WindowsEndingIn(after, upTo); !slices.Equal(got, ends) {
			t.Fatalf("%+v WindowsEndingIn(%d, %d) = %v, want %v", s, after, upTo, got, ends)
		}
	}
}

func TestValidate(t *testing.T) {
	bad := []Spec{{Kind: Tumble}, {Kind: Hop, Size: 5, Slide: 10}, {Kind: Hop, Size: 10}, {Kind: Session}, {}}
	for _, s := range bad {
		if s.Validate() == nil {
			t.Errorf("%+v accepted", s)
		}
	}
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestWatermarkIdleness walks two partitions through the cases of the
// idleness rule with an injected clock.
func TestWatermarkIdleness(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	w := NewWatermarks(100, 5*time.Second, clk.now)
	w.Add(0, 0, 10, 0, false)
	w.Add(1, 0, 0, 0, false)
	step := func(name string, wantWM int64, wantOK bool) {
		t.Helper()
		wm, ok := w.Current()
		if wm != wantWM || ok != wantOK {
			t.Fatalf("%s: watermark %d/%v, want %d/%v", name, wm, ok, wantWM, wantOK)
		}
	}
	// Partition 0 has data to read but no time yet: nothing is known.
	step("start", 0, false)
	w.Read(0, 10, 5000, true)
	// Partition 1 is empty but not yet idle: it holds the watermark.
	step("p1 quiet, within timeout", 0, false)
	clk.advance(5 * time.Second)
	// Both are now quiet for 5s: both idle, the maximum stands.
	step("both idle", 4900, true)
	w.SawEnd(1, 3)
	// p1 has data again: it holds the watermark (no time yet), which stays.
	step("p1 has data, no time", 4900, true)
	w.Read(1, 3, 2000, true)
	w.SawEnd(0, 20)
	// p0 has data to read: active; p1 active (just read): min = 1900, but
	// the watermark never goes back.
	step("never back", 4900, true)
	w.Read(0, 20, 9000, true)
	step("p1 active holds at its time", 4900, true)
	clk.advance(5 * time.Second)
	step("all idle again", 8900, true)
	// A FLUSH makes a partition at its end idle at once.
	w.Read(0, 20, 12000, true)
	w.Read(1, 3, 10000, true)
	step("both just read", 9900, true)
	w.FlushedTo(1, 3)
	step("p1 flushed", 11900, true)
	if n := w.IdleCount(); n != 1 {
		t.Fatalf("idle count %d, want 1", n)
	}
}
