package catalog

import (
	"maps"
	"testing"
)

// TestOffsetsRecordForm: a stream's output start survives its catalog
// record's form; partitions at 0 are left out, "" is nil (a record from
// before starts were recorded reads the whole topic), and a malformed
// form is an error rather than a start of 0.
func TestOffsetsRecordForm(t *testing.T) {
	o := Offsets{0: 12, 1: 0, 3: 40}
	if got := o.String(); got != "0:12,3:40" {
		t.Fatalf("String = %q", got)
	}
	back, err := ParseOffsets(o.String())
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(back, Offsets{0: 12, 3: 40}) || back.At(1) != 0 || back.At(3) != 40 {
		t.Fatalf("parsed %v", back)
	}
	if none, err := ParseOffsets(""); err != nil || none != nil || !none.Zero() {
		t.Fatalf(`ParseOffsets("") = %v, %v`, none, err)
	}
	if (Offsets{0: 0}).String() != "" || !(Offsets{0: 0}).Zero() || o.Zero() {
		t.Fatal("Zero")
	}
	for _, bad := range []string{"x", "0:", ":1", "0:1,0:2", "-1:3", "0:-3", "0:1;1:2"} {
		if _, err := ParseOffsets(bad); err == nil {
			t.Errorf("ParseOffsets(%q) accepted", bad)
		}
	}
}

// TestLedgerKeepsStart: the ledger keeps a stream's start with its entry,
// and a repair restating the stream carries it.
func TestLedgerKeepsStart(t *testing.T) {
	l := NewLedger()
	l.Apply(create(KindSource, "src", "SRC", "", "a", 0))
	r := create(KindStream, "s", "S", "src", "a", 1)
	r.Start = Offsets{0: 7}
	if _, err := l.Apply(r); err != nil {
		t.Fatal(err)
	}
	if e, _ := l.Get(KindStream, "s"); e.Start.At(0) != 7 {
		t.Fatalf("entry start %v", e.Start)
	}
	rep, err := l.Apply(create(KindStream, "s", "S2", "src", "b", 2))
	if err == nil || rep == nil || rep.Start.At(0) != 7 {
		t.Fatalf("repair %+v (%v), want the winner's start", rep, err)
	}
}
