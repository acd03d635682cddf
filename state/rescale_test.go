package state

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
)

// TestRescaleKeys: every key of a partition's state (an accumulator, a
// group, a group's delta, the position, a task value) parses to its kind,
// partition and key group; moved to another partition (a delta with a new
// id), the keys are accepted by that partition's changelog restore and
// read back there as the same state.
func TestRescaleKeys(t *testing.T) {
	src, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	key := func(i int) []byte { return binary.BigEndian.AppendUint64([]byte{1}, uint64(i)) }
	b := src.NewScopedBatch("s", 2)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.PutAcc(42, key(1), 60_000, []byte("acc")))
	must(b.PutGroup(120_000, 42, key(2), []byte("group")))
	must(b.PutPartition(2, PartitionMeta{Offset: 9, MaxTime: 100, HasTime: true, Closed: 60_000, HasClosed: true}))
	must(b.PutTaskValue(2, "placement", []byte("p")))
	p := src.NewPending(Scope("s", 2))
	defer p.Close()
	must(p.PutDelta(120_000, 42, key(2), DeltaID{Gen: 7, Seq: 3}, []byte("delta")))
	must(p.PutDelta(120_000, NullGroup, key(3), DeltaID{Gen: 7, Seq: 4}, []byte("null delta")))
	must(b.Absorb(p))
	must(b.Commit())

	var got []string
	dst, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	r := dst.NewRestore("s", 6)
	defer r.Close()
	must(src.EachScopeKey("s", 2, func(k, v []byte) error {
		sk, err := ParseStateKey("s", k)
		if err != nil {
			return err
		}
		got = append(got, fmt.Sprintf("%c p%d kg%d delta=%v %s", sk.Kind, sk.Partition, sk.KG, sk.Delta, sk.Name))
		nk := MovedKey("s", k, 6)
		if sk.Delta {
			if string(DeltaGroup(k)) == string(k) {
				t.Errorf("delta key %x has no id to strip", k)
			}
			nk = WithDeltaID(nk, DeltaID{Gen: MovedDeltaGen, Seq: 0})
		}
		return r.Apply(nk, EncodeChange(v))
	}))
	must(r.Write(1))
	slices.Sort(got)
	want := []string{
		"b p2 kg42 delta=false ", "h p2 kg42 delta=false ", "h p2 kg42 delta=true ", "h p2 kg65535 delta=true ",
		"p p2 kg0 delta=false ", "t p2 kg0 delta=false placement",
	}
	if !slices.Equal(got, want) {
		t.Errorf("parsed keys:\n%v\nwant\n%v", got, want)
	}
	if _, err := ParseStateKey("t", MovedKey("s", PartitionKey("s", 2), 6)); err == nil {
		t.Error("a key of stream s parsed as one of stream t")
	}

	// In partition 6's scope on the other disk: the same state.
	scope := Scope("s", 6)
	if v, err := dst.Acc(scope, 42, key(1), 60_000); err != nil || string(v) != "acc" {
		t.Errorf("moved accumulator: %q, %v", v, err)
	}
	if v, err := dst.Group(scope, 120_000, 42, key(2)); err != nil || string(v) != "group" {
		t.Errorf("moved group: %q, %v", v, err)
	}
	metas, err := dst.Partitions("s")
	if err != nil || metas[6].Offset != 9 || metas[6].Closed != 60_000 {
		t.Errorf("moved position: %+v, %v", metas, err)
	}
	dp := dst.NewPending(scope)
	defer dp.Close()
	var deltas []string
	sc := dp.ScanDeltas(120_000, nil)
	for {
		kg, k, v, ok := sc.Next()
		if !ok {
			break
		}
		deltas = append(deltas, fmt.Sprintf("%d/%x=%s", kg, k, v))
	}
	must(sc.Close())
	wantDeltas := []string{fmt.Sprintf("42/%x=delta", key(2)), fmt.Sprintf("%d/%x=null delta", NullGroup, key(3))}
	if !slices.Equal(deltas, wantDeltas) {
		t.Errorf("moved deltas %v, want %v", deltas, wantDeltas)
	}
	// The moved id: MovedDeltaGen, above any input offset.
	n := 0
	must(dst.EachScopeKey("s", 6, func(k, _ []byte) error {
		if sk, _ := ParseStateKey("s", k); sk.Delta {
			if gen := binary.BigEndian.Uint64(k[len(k)-16:]); gen != MovedDeltaGen {
				t.Errorf("moved delta's gen %x", gen)
			}
			n++
		}
		return nil
	}))
	if n != 2 {
		t.Errorf("%d deltas in partition 6, want 2", n)
	}
	if m, err := DecodeMeta(EncodeMeta(PartitionMeta{Offset: 3, Applied: 5, MaxTime: -1, HasTime: true})); err != nil || m.Applied != 5 || m.MaxTime != -1 {
		t.Errorf("meta round trip: %+v, %v", m, err)
	}
}
