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
	empty := NewProgress(2)
	empty.Observe(Marker{Source: 0, MaxTime: 9, HasTime: true})
	empty.Observe(Marker{Source: 1, Idle: true})
	if got, ok := empty.Time(); !ok || got != 9 {
		t.Fatalf("a source idle without data: %d/%v, want 9 (it does not count)", got, ok)
	}
}

func TestRepartitionTopic(t *testing.T) {
	if got := RepartitionTopic("app", "tx", []string{"user_id"}); got != "turbine-app-rep-tx-by-user_id" {
		t.Fatal(got)
	}
}
