package catalog

import (
	"errors"
	"testing"
)

func create(kind Kind, name, sql, reads, node string, off int64) Record {
	return Record{Change: Change{Kind: kind, Name: name, SQL: sql, Op: OpCreate, Reads: reads}, Node: node, Stmt: node + sql, Offset: off}
}

func drop(kind Kind, name, node string, off int64) Record {
	return Record{Change: Change{Kind: kind, Name: name, Op: OpDrop}, Node: node, Offset: off}
}

// TestLedgerCreateRace: of two CREATEs of one name the first in the log
// stands; the second loses with ErrExists naming the winner, and its
// repair restates the winner, so the key's last record is the winner's.
func TestLedgerCreateRace(t *testing.T) {
	l := NewLedger()
	if _, err := l.Apply(create(KindSource, "x", "A", "", "a", 0)); err != nil {
		t.Fatal(err)
	}
	rep, err := l.Apply(create(KindSource, "x", "B", "", "b", 1))
	var lost *ErrLostRace
	var exists *ErrExists
	if !errors.As(err, &lost) || !errors.As(err, &exists) || lost.Winner != "a" {
		t.Fatalf("second create: %v", err)
	}
	if rep == nil || rep.SQL != "A" || rep.Op != OpRepair {
		t.Fatalf("repair %+v, want a restatement of A", rep)
	}
	if e, _ := l.Get(KindSource, "x"); e.SQL != "A" {
		t.Fatalf("x is %q", e.SQL)
	}
	// The repair itself stands and changes nothing.
	if _, err := l.Apply(Record{Change: *rep, Node: "b", Offset: 2}); err != nil {
		t.Fatal(err)
	}
	if e, _ := l.Get(KindSource, "x"); e.SQL != "A" {
		t.Fatalf("after repair x is %q", e.SQL)
	}
	// A stream cannot take a source's name either.
	if _, err := l.Apply(create(KindStream, "x", "S", "x", "b", 3)); !errors.As(err, &exists) {
		t.Fatalf("stream named like a source: %v", err)
	}
}

// TestLedgerDropRace: DROP SOURCE against CREATE STREAM reading it, in
// both orders. Drop first: the stream's create loses (ErrNotFound) and is
// repaired by a tombstone. Create first: the drop loses (ErrInUse) and is
// repaired by restating the source.
func TestLedgerDropRace(t *testing.T) {
	l := NewLedger()
	l.Apply(create(KindSource, "src", "SRC", "", "a", 0))
	if _, err := l.Apply(drop(KindSource, "src", "a", 1)); err != nil {
		t.Fatal(err)
	}
	rep, err := l.Apply(create(KindStream, "t", "T", "src", "b", 2))
	var nf *ErrNotFound
	var lost *ErrLostRace
	if !errors.As(err, &nf) || nf.Name != "src" || !errors.As(err, &lost) || lost.Winner != "a" {
		t.Fatalf("create after drop: %v", err)
	}
	if rep == nil || rep.SQL != "" || rep.Kind != KindStream || rep.Name != "t" {
		t.Fatalf("repair %+v, want a tombstone of t", rep)
	}
	if _, ok := l.Get(KindStream, "t"); ok {
		t.Fatal("t stands")
	}

	l = NewLedger()
	l.Apply(create(KindSource, "src", "SRC", "", "a", 0))
	if _, err := l.Apply(create(KindStream, "t", "T", "src", "b", 1)); err != nil {
		t.Fatal(err)
	}
	rep, err = l.Apply(drop(KindSource, "src", "a", 2))
	var inUse *ErrInUse
	if !errors.As(err, &inUse) || len(inUse.Readers) != 1 || inUse.Readers[0] != "t" {
		t.Fatalf("drop under a reader: %v", err)
	}
	if rep == nil || rep.SQL != "SRC" {
		t.Fatalf("repair %+v, want SRC restated", rep)
	}
	if _, ok := l.Get(KindSource, "src"); !ok {
		t.Fatal("src gone")
	}
	// A second drop of something gone loses, and needs no repair: the
	// tombstone is the truth.
	l.Apply(drop(KindStream, "t", "a", 3))
	rep, err = l.Apply(drop(KindStream, "t", "b", 4))
	if !errors.As(err, &nf) || rep != nil {
		t.Fatalf("double drop: %v, repair %+v", err, rep)
	}
}

// TestLedgerOldRecordsStand: records without an op (written before ops
// were recorded) and users are applied as they come, as a replay did.
func TestLedgerOldRecordsStand(t *testing.T) {
	l := NewLedger()
	for _, r := range []Record{
		{Change: Change{Kind: KindSource, Name: "s", SQL: "1"}},
		{Change: Change{Kind: KindSource, Name: "s", SQL: "2"}},
		{Change: Change{Kind: KindUser, Name: "u", SQL: "U", Op: OpPut}},
		{Change: Change{Kind: KindUser, Name: "u", SQL: "U2", Op: OpPut}},
	} {
		if _, err := l.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	if e, _ := l.Get(KindSource, "s"); e.SQL != "2" {
		t.Fatalf("s is %q", e.SQL)
	}
	if e, _ := l.Get(KindUser, "u"); e.SQL != "U2" {
		t.Fatalf("u is %q", e.SQL)
	}
}

// TestLedgerUndoLeavesTheWinner: a node whose CREATE lost a race and whose
// stream then failed to start takes its record back with a drop that
// undoes it. That drop must not drop the winner's object.
func TestLedgerUndoLeavesTheWinner(t *testing.T) {
	l := NewLedger()
	l.Apply(create(KindStream, "s", "A", "", "a", 0))
	loser := create(KindStream, "s", "B", "", "b", 1)
	if _, err := l.Apply(loser); err == nil {
		t.Fatal("second create stood")
	}
	undo := Record{Change: Change{Kind: KindStream, Name: "s", Op: OpDrop}, Node: "b", Undoes: loser.Stmt, Offset: 2}
	rep, err := l.Apply(undo)
	if err == nil {
		t.Fatal("the undo of a lost create dropped the winner")
	}
	if e, ok := l.Get(KindStream, "s"); !ok || e.SQL != "A" || rep == nil || rep.SQL != "A" {
		t.Fatalf("s %+v, repair %+v: want A standing and restated", e, rep)
	}
	// The undo of a create that stood drops it.
	won := create(KindStream, "u", "U", "", "b", 3)
	l.Apply(won)
	if _, err := l.Apply(Record{Change: Change{Kind: KindStream, Name: "u", Op: OpDrop}, Node: "b", Undoes: won.Stmt, Offset: 4}); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Get(KindStream, "u"); ok {
		t.Fatal("u still stands")
	}
}

// TestLedgerHopSeal: a CREATE naming a hop generation stands before the
// generation's seal and loses after it (its repair removes the stream);
// a CREATE naming the next generation stands; a second seal changes
// nothing; a seed of a hop record seals.
func TestLedgerHopSeal(t *testing.T) {
	l := NewLedger()
	streamOn := func(name, hop string, off int64) Record {
		r := create(KindStream, name, "S "+name, "src", "a", off)
		r.Hop = hop
		return r
	}
	seal := func(topic string, off int64) Record {
		return Record{Change: Change{Kind: KindHop, Name: topic, SQL: topic, Op: OpSeal}, Node: "a", Offset: off}
	}
	if _, err := l.Apply(create(KindSource, "src", "SRC", "", "a", 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Apply(streamOn("s1", "g1", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Apply(seal("g1", 2)); err != nil {
		t.Fatal(err)
	}
	rep, err := l.Apply(streamOn("s2", "g1", 3))
	var sealed *ErrHopSealed
	if !errors.As(err, &sealed) || sealed.Topic != "g1" {
		t.Fatalf("create on a sealed generation: %v", err)
	}
	if rep == nil || rep.SQL != "" {
		t.Fatalf("repair %+v, want a tombstone", rep)
	}
	if _, ok := l.Get(KindStream, "s2"); ok {
		t.Fatal("s2 stands")
	}
	if _, err := l.Apply(streamOn("s2", "g2", 4)); err != nil {
		t.Fatalf("create on the next generation: %v", err)
	}
	if _, err := l.Apply(seal("g1", 5)); err != nil {
		t.Fatal(err)
	}
	if off, ok := l.Sealed("g1"); !ok || off != 2 {
		t.Fatalf("g1 sealed at %d (%v), want 2", off, ok)
	}
	if _, ok := l.Sealed("g2"); ok {
		t.Fatal("g2 sealed")
	}
	if e, _ := l.Get(KindStream, "s1"); e.Hop != "g1" {
		t.Fatalf("s1 reads %q", e.Hop)
	}
	l2 := NewLedger()
	l2.Seed(Entry{Kind: KindHop, Name: "g1", Offset: 7})
	if _, ok := l2.Sealed("g1"); !ok {
		t.Fatal("seed of a hop record does not seal")
	}
	if len(l2.Streams()) != 0 {
		t.Fatal("a hop record became an object")
	}
}

// TestLedgerRun: the last STOP or START of a stream stands, seeded or
// applied; a STOP left by a dropped stream does not stop a new stream of
// the same name, nor does a STOP of a stream that does not exist.
func TestLedgerRun(t *testing.T) {
	run := func(name, value string, off int64) Record {
		op := OpStop
		if value == RunStarted {
			op = OpStart
		}
		return Record{Change: Change{Kind: KindRun, Name: name, SQL: value, Op: op}, Node: "a", Offset: off}
	}
	l := NewLedger()
	l.Apply(create(KindSource, "src", "SRC", "", "a", 0))
	if stopped, epoch := l.Run("s"); stopped || epoch != 0 {
		t.Fatalf("no stream: stopped %v at %d", stopped, epoch)
	}
	l.Apply(run("s", RunStopped, 1)) // before the stream exists
	l.Apply(create(KindStream, "s", "S", "src", "a", 2))
	if stopped, epoch := l.Run("s"); stopped || epoch != 0 {
		t.Fatalf("a stop older than the stream counts: stopped %v at %d", stopped, epoch)
	}
	l.Apply(run("s", RunStopped, 3))
	if stopped, epoch := l.Run("s"); !stopped || epoch != 3 {
		t.Fatalf("after STOP: stopped %v at %d, want stopped at 3", stopped, epoch)
	}
	l.Apply(run("s", RunStarted, 4))
	if stopped, epoch := l.Run("s"); stopped || epoch != 4 {
		t.Fatalf("after START: stopped %v at %d, want running under 4", stopped, epoch)
	}
	l.Apply(run("s", RunStopped, 5))
	l.Apply(drop(KindStream, "s", "a", 6))
	l.Apply(create(KindStream, "s", "S2", "src", "b", 7))
	if stopped, _ := l.Run("s"); stopped {
		t.Fatal("the dropped stream's STOP stops the new one")
	}
	// The same through Seed (a node's start), and a DROP's tombstone.
	seeded := NewLedger()
	seeded.Seed(Entry{Kind: KindStream, Name: "s", SQL: "S", Reads: "src", Offset: 2})
	seeded.Seed(Entry{Kind: KindRun, Name: "s", SQL: RunStopped, Offset: 3})
	if stopped, epoch := seeded.Run("s"); !stopped || epoch != 3 {
		t.Fatalf("seeded: stopped %v at %d", stopped, epoch)
	}
	seeded.Apply(Record{Change: Change{Kind: KindRun, Name: "s", Op: OpDrop}, Offset: 8})
	if stopped, epoch := seeded.Run("s"); stopped || epoch != 0 {
		t.Fatalf("after the tombstone: stopped %v at %d", stopped, epoch)
	}
}
