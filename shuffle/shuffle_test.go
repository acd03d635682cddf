package shuffle

import "testing"

func TestMarkerRoundTrip(t *testing.T) {
	for _, m := range []Marker{{}, {Source: 7, MaxTime: -5, HasTime: true}, {Source: 959, MaxTime: 1 << 60, HasTime: true, Idle: true}} {
		got, err := DecodeMarker(m.Encode(nil))
		if err != nil || got != m {
			t.Errorf("%+v: decoded %+v, %v", m, got, err)
		}
	}
	if _, err := DecodeMarker([]byte{2, 0}); err == nil {
		t.Error("a bad marker decoded")
	}
}

func TestProgress(t *testing.T) {
	p := NewProgress(2)
	steps := []struct {
		m      Marker
		want   int64
		wantOK bool
	}{
		{Marker{Source: 0, MaxTime: 100, HasTime: true}, 0, false},              // source 1 not heard from
		{Marker{Source: 1}, 0, false},                                           // source 1 has no time yet
		{Marker{Source: 1, MaxTime: 50, HasTime: true}, 50, true},               // min
		{Marker{Source: 1, MaxTime: 200, HasTime: true}, 100, true},             // min moves to source 0
		{Marker{Source: 0, MaxTime: 100, HasTime: true, Idle: true}, 100, true}, // idle counts at its watermark
		{Marker{Source: 0, MaxTime: 180, HasTime: true, Idle: true}, 180, true}, // which idleness advances
		{Marker{Source: 1, MaxTime: 150, HasTime: true}, 180, true},             // a source never moves back
		{Marker{Source: 0, Idle: true}, 180, true},                              // source 0 never moves back either
	}
	for i, s := range steps {
		p.Observe(s.m)
		got, ok := p.Time()
		if got != s.want || ok != s.wantOK {
			t.Fatalf("step %d (%+v): time %d/%v, want %d/%v", i, s.m, got, ok, s.want, s.wantOK)
		}
	}
}

// TestProgressIdleWithoutTimeHolds scripts the markers of issue 38: source
// 1 never had a row and was confirmed idle, then rows were written to both
// sources together and source 0's hop task read its rows first. Its marker
// must not close a window on its own: source 1's first rows may belong to
// it. Source 1 moves the reader only with a time of its own, or the one
// idleness gave it (its peers' watermark, taken before a fresh end offset
// showed nothing to read: window.Partition).
func TestProgressIdleWithoutTimeHolds(t *testing.T) {
	p := NewProgress(2)
	p.Observe(Marker{Source: 1, Idle: true})
	p.Observe(Marker{Source: 0, MaxTime: 90_000, HasTime: true})
	if got, ok := p.Time(); ok {
		t.Fatalf("source 1 idle without a time let the reader reach %d", got)
	}
	p.Observe(Marker{Source: 1, Idle: true}) // confirmed again: still nothing
	if got, ok := p.Time(); ok {
		t.Fatalf("a repeated idle marker without a time let the reader reach %d", got)
	}
	p.Observe(Marker{Source: 1, MaxTime: 30_000, HasTime: true}) // its rows
	if got, ok := p.Time(); !ok || got != 30_000 {
		t.Fatalf("with source 1's rows: %d/%v, want 30000", got, ok)
	}
	p.Observe(Marker{Source: 1, MaxTime: 90_000, HasTime: true, Idle: true}) // idle, caught up with its peer
	if got, ok := p.Time(); !ok || got != 90_000 {
		t.Fatalf("source 1 idle at its peer's watermark: %d/%v, want 90000", got, ok)
	}

	// The same when every source is idle without a time (a FLUSH of an
	// empty input): nothing to close, nothing passed.
	empty := NewProgress(2)
	empty.Observe(Marker{Source: 0, Idle: true})
	empty.Observe(Marker{Source: 1, Idle: true})
	if got, ok := empty.Time(); ok {
		t.Fatalf("no source has a time, yet the reader reached %d", got)
	}
}
