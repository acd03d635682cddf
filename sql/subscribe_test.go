package sql

import (
	"errors"
	"testing"
)

func TestParseSubscribe(t *testing.T) {
	for text, want := range map[string]Statement{
		`SUBSCRIBE TO s`:                      &Subscribe{Name: "s", NamePos: 14, Snapshot: true},
		`SUBSCRIBE s WITH (snapshot = false)`: &Subscribe{Name: "s", NamePos: 11, Snapshot: false},
		`COPY (SUBSCRIBE TO "S") TO STDOUT`:   &CopyOut{Query: &Subscribe{Name: "S", NamePos: 20, Snapshot: true}},
		`copy (subscribe to s with (snapshot = 'on')) to stdout with (format text)`: &CopyOut{Query: &Subscribe{Name: "s", NamePos: 20, Snapshot: true}},
		`DECLARE c CURSOR FOR SUBSCRIBE TO s`:                                       &DeclareCursor{Name: "c", Query: &Subscribe{Name: "s", NamePos: 35, Snapshot: true}},
		`DECLARE c NO SCROLL CURSOR WITHOUT HOLD FOR SUBSCRIBE s`:                   &DeclareCursor{Name: "c", Query: &Subscribe{Name: "s", NamePos: 55, Snapshot: true}},
		`FETCH 10 c`:                             &Fetch{Cursor: "c", Count: 10, TimeoutMs: -1},
		`FETCH ALL FROM c WITH (timeout = '1s')`: &Fetch{Cursor: "c", Count: -1, TimeoutMs: 1000},
		`FETCH c`:                                &Fetch{Cursor: "c", Count: 1, TimeoutMs: -1},
		`FETCH FORWARD 3 IN c WITH (timeout = 0)`: &Fetch{Cursor: "c", Count: 3, TimeoutMs: 0},
		`CLOSE c`:   &CloseCursor{Name: "c"},
		`CLOSE ALL`: &CloseCursor{All: true},
	} {
		got, err := Parse(text)
		if err != nil {
			t.Errorf("%s: %v", text, err)
			continue
		}
		if !equalStatements(got, want) {
			t.Errorf("%s: got %#v, want %#v", text, got, want)
		}
	}
	for text, code := range map[string]string{
		`COPY s TO STDOUT`:                           CodeNotSupported,
		`COPY (SUBSCRIBE s) TO '/tmp/x'`:             CodeNotSupported,
		`SUBSCRIBE s WITH (snapshot = perhaps)`:      CodeInvalidParameter,
		`SUBSCRIBE s WITH (as_of = 3)`:               CodeInvalidParameter,
		`DECLARE c CURSOR FOR SELECT 1`:              CodeNotSupported,
		`DECLARE c CURSOR WITH HOLD FOR SUBSCRIBE s`: CodeNotSupported,
		`FETCH BACKWARD 1 c`:                         CodeNotSupported,
		`FETCH 1 c WITH (timeout = 'soon')`:          CodeInvalidParameter,
	} {
		_, err := Parse(text)
		var e *Error
		if !errors.As(err, &e) || e.Code != code {
			t.Errorf("%s: got %v, want SQLSTATE %s", text, err, code)
		}
	}
}

func equalStatements(a, b Statement) bool {
	switch x := a.(type) {
	case *Subscribe:
		y, ok := b.(*Subscribe)
		return ok && *x == *y
	case *CopyOut:
		y, ok := b.(*CopyOut)
		return ok && *x.Query == *y.Query
	case *DeclareCursor:
		y, ok := b.(*DeclareCursor)
		return ok && x.Name == y.Name && *x.Query == *y.Query
	case *Fetch:
		y, ok := b.(*Fetch)
		return ok && *x == *y
	case *CloseCursor:
		y, ok := b.(*CloseCursor)
		return ok && *x == *y
	}
	return false
}
