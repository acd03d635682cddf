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
		{Marker{Source: 0, MaxTime: 100, HasTime: true, Idle: true}, 200, true}, // idle: ignored
		{Marker{Source: 1, MaxTime: 150, HasTime: true}, 200, true},             // a source never moves back
	}
	for i, s := range steps {
		p.Observe(s.m)
		got, ok := p.Time()
		if got != s.want || ok != s.wantOK {
			t.Fatalf("step %d (%+v): time %d/%v, want %d/%v", i, s.m, got, ok, s.want, s.wantOK)
		}
	}
	all := NewProgress(1)
	all.Observe(Marker{Source: 0, MaxTime: 9, HasTime: true, Idle: true})
	if got, ok := all.Time(); !ok || got != 9 {
		t.Fatalf("all idle: %d/%v, want the maximum 9", got, ok)
	}
}

func TestRepartitionTopic(t *testing.T) {
	if got := RepartitionTopic("app", "tx", []string{"user_id"}); got != "turbine-app-rep-tx-by-user_id" {
		t.Fatal(got)
	}
}
