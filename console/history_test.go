package console

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func rateOf(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}

// TestHistoryRing: a stream's history holds its last span/every samples,
// oldest first, with the rates over each interval; it wraps around without
// losing order, forgets a stream that is gone, and starts over for a
// stream created again under the same name.
func TestHistoryRing(t *testing.T) {
	h := NewHistory(20*time.Second, 5*time.Second) // 4 samples
	t0 := time.Unix(1_000, 0)
	a1, a2 := new(int), new(int) // two incarnations of stream a
	for i := 0; i < 7; i++ {
		h.Record(t0.Add(time.Duration(i)*5*time.Second), []Figures{
			{Stream: "a", Of: a1, RecordsIn: int64(100 * i), RecordsOut: int64(10 * i), Lag: int64(i), LateRows: int64(i / 2), DeadLettered: 3},
			{Stream: "b", Of: "b", RecordsIn: 7},
		})
	}
	got := h.Points("a")
	if len(got) != 4 {
		t.Fatalf("%d points, want the last 4: %+v", len(got), got)
	}
	for j, p := range got {
		i := j + 3 // samples 3..6 are the ones kept
		if p.At != t0.Add(time.Duration(i)*5*time.Second).UnixMilli() || p.Lag != int64(i) || p.LateRows != int64(i/2) || p.DeadLettered != 3 {
			t.Errorf("point %d: %+v, want sample %d", j, p, i)
		}
		want := 20.0 // 100 records in per 5 s
		if j == 0 {
			// The oldest kept sample had one before it, but it is gone:
			// no interval to measure.
			want = -1
		}
		if rateOf(p.InPerSec) != want || (want > 0 && rateOf(p.OutPerSec) != 2) {
			t.Errorf("point %d: in %v/s out %v/s, want %v and 2", j, rateOf(p.InPerSec), rateOf(p.OutPerSec), want)
		}
	}
	if b := h.Points("b"); len(b) != 4 || rateOf(b[1].InPerSec) != 0 {
		t.Errorf("b: %+v", b)
	}

	// A counter that goes down (a restart that lost count) has no rate
	// for that interval, then rates again from the new count.
	t1 := t0.Add(time.Minute)
	h.Record(t1, []Figures{{Stream: "a", Of: a1, RecordsIn: 50}})
	h.Record(t1.Add(2*time.Second), []Figures{{Stream: "a", Of: a1, RecordsIn: 60}})
	got = h.Points("a")
	if n := len(got); rateOf(got[n-2].InPerSec) != -1 || rateOf(got[n-1].InPerSec) != 5 {
		t.Errorf("after a reset: %v then %v, want none then 5/s", rateOf(got[n-2].InPerSec), rateOf(got[n-1].InPerSec))
	}
	// b was not in the last samples: forgotten.
	if b := h.Points("b"); b != nil {
		t.Errorf("a stream that is gone keeps a history: %+v", b)
	}
	// a dropped and created again: a new history, without the old one's.
	h.Record(t1.Add(4*time.Second), []Figures{{Stream: "a", Of: a2, RecordsIn: 1_000_000}})
	if got = h.Points("a"); len(got) != 1 || got[0].InPerSec != nil {
		t.Errorf("a re-created stream carries the old one's history: %+v", got)
	}
	if h.Points("nope") != nil {
		t.Error("history of a stream never seen")
	}
}

// TestHistoryBounded: however long it runs, a history holds span/every
// samples per stream.
func TestHistoryBounded(t *testing.T) {
	h := NewHistory(DefaultHistorySpan, DefaultHistoryEvery)
	t0 := time.Unix(0, 0)
	for i := 0; i < 1000; i++ {
		h.Record(t0.Add(time.Duration(i)*DefaultHistoryEvery), []Figures{{Stream: "s", Of: 1, RecordsIn: int64(i)}})
	}
	if n, want := len(h.Points("s")), int(DefaultHistorySpan/DefaultHistoryEvery); n != want {
		t.Fatalf("%d samples kept, want %d", n, want)
	}
	if n := len(h.rings["s"].buf); n != 180 {
		t.Fatalf("ring of %d slots, want 180 (15 minutes at 5 s)", n)
	}
}

// TestHistoryRun samples at once, then every interval, until its context
// ends.
func TestHistoryRun(t *testing.T) {
	h := NewHistory(time.Minute, 10*time.Millisecond)
	var calls atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Run(ctx, func() []Figures {
			n := calls.Add(1)
			return []Figures{{Stream: "s", Of: 1, RecordsIn: n * 10}}
		})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(h.Points("s")) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d samples after 5 s at 10 ms", len(h.Points("s")))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	n := calls.Load()
	time.Sleep(50 * time.Millisecond)
	if calls.Load() != n {
		t.Error("sampling went on after its context ended")
	}
	for _, p := range h.Points("s")[1:] {
		if p.InPerSec == nil || *p.InPerSec <= 0 {
			t.Errorf("rate %v", rateOf(p.InPerSec))
		}
	}
}
