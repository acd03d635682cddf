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

// TestPartitionIdleness walks partitions through the idleness rule with an
// injected clock: idle only on a fresh end offset, then advancing with
// processing time from the moment it went idle, never past its peers.
func TestPartitionIdleness(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	peers := NewPeers()
	p0 := NewPartition(0, 100, 5*time.Second, clk.now, peers, 0, 0, false)
	p1 := NewPartition(1, 100, 5*time.Second, clk.now, peers, 0, 0, false)
	check := func(name string, p *Partition, want int64, wantOK bool) {
		t.Helper()
		wm, ok := p.Effective()
		if wm != want || ok != wantOK {
			t.Fatalf("%s: watermark %d/%v, want %d/%v", name, wm, ok, want, wantOK)
		}
	}
	check("nothing read", p0, 0, false)
	p0.Read(10, 5000, true)
	p1.Read(3, 2000, true)
	check("p0 own", p0, 4900, true)
	check("p1 own", p1, 1900, true)
	clk.advance(4 * time.Second)
	if p1.Quiet() {
		t.Fatal("quiet before its timeout")
	}
	clk.advance(2 * time.Second) // 6 s since data: went idle 1 s ago
	if !p1.Quiet() {
		t.Fatal("not quiet after its timeout")
	}
	// A fresh end offset shows unread rows: not idle, it holds.
	p1.ConfirmIdle(5, peers.Marks())
	check("p1 has unread rows", p1, 1900, true)
	p1.Read(5, 2100, true)
	check("p1 read them", p1, 2000, true)
	clk.advance(5 * time.Second)
	p1.ConfirmIdle(5, peers.Marks()) // idle since 0 s ago (5 s after its last data)
	check("p1 just idle", p1, 2000, true)
	clk.advance(1500 * time.Millisecond)
	check("p1 advances with processing time", p1, 3500, true)
	clk.advance(time.Hour)
	check("p1 never passes its peers", p1, 4900, true)
	p1.Read(6, 2200, true)
	check("p1 back with data: never back", p1, 4900, true)
	// p0 is the highest: with no peer above it, idleness does not move it.
	clk.advance(10 * time.Second)
	p0.ConfirmIdle(10, peers.Marks())
	check("p0 idle, nothing above", p0, 4900, true)
	// A partition that never had data moves only with a FLUSH.
	p2 := NewPartition(2, 100, 5*time.Second, clk.now, peers, 0, 0, false)
	clk.advance(10 * time.Second)
	p2.ConfirmIdle(0, peers.Marks())
	check("p2 idle without data", p2, 0, false)
	p2.FlushedTo(0)
	check("p2 flushed", p2, 4900, true)
	if !p2.Idle() {
		t.Fatal("a flushed partition at its end is idle")
	}
}

// TestFlushLiftStaysWhereTheFlushSawPeers: a FLUSH that read a partition
// to its end lifts it to its peers' highest watermark as they stood then.
// Rows written after the FLUSH can reach a peer first (here p1 reads its
// rows and a row far ahead before p0's task reads p0's): p0 must not
// follow, or its own rows of the same windows would be late. Idleness
// confirmed later still advances it with processing time.
func TestFlushLiftStaysWhereTheFlushSawPeers(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	peers := NewPeers()
	p0 := NewPartition(0, 0, 5*time.Second, clk.now, peers, 0, 0, false)
	p1 := NewPartition(1, 0, 5*time.Second, clk.now, peers, 0, 0, false)
	check := func(name string, p *Partition, want int64) {
		t.Helper()
		if wm, ok := p.Effective(); wm != want || !ok {
			t.Fatalf("%s: watermark %d/%v, want %d", name, wm, ok, want)
		}
	}
	p0.Read(10, 3000, true)
	p1.Read(10, 3600, true)
	p0.FlushedTo(10)
	p1.FlushedTo(10)
	check("p0 lifted by the FLUSH", p0, 3600)
	check("p1 the highest", p1, 3600)
	// After the FLUSH: p1 reads rows up to 9000 and a row at 100000; p0's
	// rows at 4000..9000 are written but not read yet.
	p1.Read(20, 100000, true)
	check("p0 holds where the FLUSH lifted it", p0, 3600)
	p0.Read(20, 9000, true)
	check("p0 with its rows", p0, 9000)
	// The next FLUSH lifts it again, to what the peers reached by then.
	p0.FlushedTo(20)
	check("p0 lifted by the next FLUSH", p0, 100000)

	// A flushed partition that goes idle on its timeout advances with
	// processing time past the FLUSH's lift, never past its peers.
	p2 := NewPartition(2, 0, 5*time.Second, clk.now, peers, 0, 0, false)
	p2.Read(5, 1000, true)
	p2.FlushedTo(5)
	check("p2 lifted", p2, 100000)
	p3 := NewPartition(3, 0, 5*time.Second, clk.now, NewPeers(), 0, 0, false)
	peers3 := p3.Peers
	p4 := NewPartition(4, 0, 5*time.Second, clk.now, peers3, 0, 0, false)
	p3.Read(5, 1000, true)
	p4.Read(5, 20000, true)
	p3.FlushedTo(5)
	check("p3 lifted", p3, 20000)
	p4.Read(6, 60000, true)
	clk.advance(5 * time.Second)
	if !p3.Quiet() {
		t.Fatal("p3 not quiet after its timeout")
	}
	p3.ConfirmIdle(5, peers3.Marks())
	clk.advance(3 * time.Second)
	check("p3 idle 3 s: 1000+3000 is below the lift", p3, 20000)
	clk.advance(30 * time.Second)
	check("p3 idle 33 s: 1000+33000", p3, 34000)
	clk.advance(time.Hour)
	check("p3 idle: never past its peers", p3, 60000)
}

// TestIdleFollowsOnlyPeersKnownBeforeItsFetch walks issue 38's race: two
// partitions quiet past their timeout, then rows written to both at once,
// and partition 0's task reads its rows first. Partition 1 may advance
// only as far as the peers' watermark it knew before an end offset fetched
// afresh showed it had nothing more to read: not to partition 0's new
// watermark while its own rows of the same window wait in Kafka.
func TestIdleFollowsOnlyPeersKnownBeforeItsFetch(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	peers := NewPeers()
	p0 := NewPartition(0, 0, time.Second, clk.now, peers, 0, 0, false)
	p1 := NewPartition(1, 0, time.Second, clk.now, peers, 0, 0, false)
	check := func(name string, p *Partition, want int64, wantOK bool) {
		t.Helper()
		if wm, ok := p.Effective(); wm != want || ok != wantOK {
			t.Fatalf("%s: watermark %d/%v, want %d/%v", name, wm, ok, want, wantOK)
		}
	}
	p0.Read(10, 59_000, true)
	p1.Read(10, 58_000, true)
	// The quiet spell: 8 s, idle after 1.
	clk.advance(8 * time.Second)
	for _, p := range []*Partition{p0, p1} {
		if !p.Quiet() {
			t.Fatalf("partition %d not quiet", p.ID)
		}
		p.ConfirmIdle(10, peers.Marks())
	}
	check("p1 idle 7 s: 58000+7000, capped by p0", p1, 59_000, true)
	if p1.Following() {
		t.Fatal("p1 follows with nothing new among its peers")
	}
	// Rows for both, written together; p0's task reads its rows first.
	p0.Read(20, 90_000, true)
	check("p1 does not jump to what p0 read after its last fetch", p1, 59_000, true)
	if !p1.Following() {
		t.Fatal("p1 does not ask to follow its peers")
	}
	// p1's next fetch, sent after it knew p0's 90000, finds its own rows.
	marks := peers.Marks()
	p1.ConfirmIdle(20, marks)
	check("p1 with unread rows holds", p1, 59_000, true)
	p1.Read(20, 59_500, true)
	check("p1 with its rows", p1, 59_500, true)
	// Quiet for good from here: idle again, it follows p0 with processing time.
	clk.advance(2 * time.Second)
	if !p1.Quiet() {
		t.Fatal("p1 not quiet again")
	}
	p1.ConfirmIdle(20, peers.Marks())
	check("p1 idle again for 1 s", p1, 60_500, true)
	clk.advance(time.Minute)
	check("p1 quiet for good reaches p0", p1, 90_000, true)

	// Marks taken before a peer moved stay what the partition may reach,
	// however late ConfirmIdle runs.
	p2 := NewPartition(2, 0, time.Second, clk.now, peers, 0, 0, false)
	p2.Read(5, 100_000, true)
	clk.advance(2 * time.Second)
	before := peers.Marks()
	p0.Read(30, 500_000, true)
	p2.ConfirmIdle(5, before)
	clk.advance(time.Hour)
	check("p2 reaches only the marks taken before its fetch", p2, 100_000, true)
	if !p2.Following() {
		t.Fatal("p2 does not ask to follow p0's new watermark")
	}
	p2.ConfirmIdle(5, peers.Marks())
	check("p2 confirmed after p0 moved", p2, 500_000, true)
}

// TestIdleWithoutTimeFeedingMerge: a partition that never had an event
// time keeps none in a local plan, idle or not, so its first rows are never
// late by another partition's progress. One whose watermark a hop sends on
// (FeedsMerge) holds the merge until, idle, it has confirmed its peers'
// watermark on a fresh fetch, then follows them, so it never holds the
// merge for good.
func TestIdleWithoutTimeFeedingMerge(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	peers := NewPeers()
	p0 := NewPartition(0, 0, time.Second, clk.now, peers, 0, 0, false)
	local := NewPartition(1, 0, time.Second, clk.now, peers, 0, 0, false)
	hop := NewPartition(2, 0, time.Second, clk.now, peers, 0, 0, false)
	hop.FeedsMerge = true
	clk.advance(2 * time.Second)
	for _, p := range []*Partition{local, hop} {
		p.ConfirmIdle(0, peers.Marks())
		if wm, ok := p.Effective(); ok {
			t.Fatalf("partition %d idle with no peer time: watermark %d", p.ID, wm)
		}
	}
	p0.Read(10, 70_000, true)
	for _, p := range []*Partition{local, hop} {
		if wm, ok := p.Effective(); ok {
			t.Fatalf("partition %d took a peer's watermark it has not confirmed: %d", p.ID, wm)
		}
		if !p.Following() {
			t.Fatalf("partition %d does not ask to follow", p.ID)
		}
		p.ConfirmIdle(0, peers.Marks())
	}
	if wm, ok := local.Effective(); ok {
		t.Fatalf("local partition without data took watermark %d", wm)
	}
	if wm, ok := hop.Effective(); !ok || wm != 70_000 {
		t.Fatalf("hop partition without data: %d/%v, want its peer's 70000", wm, ok)
	}
	// Its first rows, written later, are behind: late, as the merge passed them.
	hop.Read(5, 10_000, true)
	if wm, ok := hop.Effective(); !ok || wm != 70_000 {
		t.Fatalf("hop partition after its rows: %d/%v, want 70000 (never back)", wm, ok)
	}
}
