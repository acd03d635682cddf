package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestRunChunks: a run's partials are stored in chunks (runchunk.go), yet
// the changelog carries each partial under its own run key, as before
// chunks. Through a commit, a rescale's deletion of some key groups, a
// later commit over a store whose older run came from the changelog (one
// entry per partial), DropMovedGroups (logged through a watch) and the
// window's close, a store rebuilt from the changelog scans the same
// partials as the one that wrote the chunks, and both scan what was
// written; the writing store's keys as a rebuilt changelog would carry
// them (EachScopeKey) are the rebuilt store's.
func TestRunChunks(t *testing.T) {
	st, err := Open(t.TempDir(), nil, Options{MinRunPartials: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	standby, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	scope := Scope("s", 0)
	// Keys of one length with a long shared prefix (self-delimiting, as
	// exec's keys are): prefix coding has work to do.
	key := func(i int) []byte {
		return binary.BigEndian.AppendUint64(append([]byte{1}, bytes.Repeat([]byte("p"), 24)...), uint64(i))
	}
	type partial struct {
		kg  uint16
		key []byte
		id  DeltaID
		val []byte
	}
	live := map[string]partial{} // what the window holds: RunKey -> partial
	var offset int64
	changes := func(emit func(fn func(k, v []byte) error) error) (sets, dels map[string]bool) {
		t.Helper()
		sets, dels = map[string]bool{}, map[string]bool{}
		r := standby.NewRestore("s", 0)
		defer r.Close()
		if err := emit(func(k, v []byte) error {
			if v == nil {
				dels[string(k)] = true
			} else {
				sets[string(k)] = true
			}
			return r.Apply(k, EncodeChange(v))
		}); err != nil {
			t.Fatal(err)
		}
		offset++
		if err := r.Write(offset); err != nil {
			t.Fatal(err)
		}
		return sets, dels
	}
	// commit writes the partials of keys [from, to) in groups kgs as one
	// run (id run), half of them evicted before the commit, and checks
	// that the changelog holds each under its run key.
	commit := func(run uint64, kgs []uint16, from, to int) {
		t.Helper()
		p := runsPending(t, st, scope)
		defer p.Close()
		var w GroupWrites
		want := map[string]bool{string(RunMarker(scope, 7, run)): true}
		for _, kg := range kgs {
			for i := from; i < to; i++ {
				val := []byte(fmt.Sprintf("v%d/%d", kg, i))
				if i == from+7 {
					val = bytes.Repeat([]byte{'x'}, chunkBytes+100) // a chunk of its own
				}
				id := DeltaID{Gen: uint64(run), Seq: uint64(i)}
				if i%2 == 0 {
					if err := p.PutDelta(7, kg, key(i), id, val); err != nil {
						t.Fatal(err)
					}
				} else {
					w.PutDelta(7, kg, key(i), id, val)
				}
				if i%5 == 0 { // a second partial of the group in the same run
					id2 := DeltaID{Gen: uint64(run), Seq: uint64(i) + 1<<32}
					w.PutDelta(7, kg, key(i), id2, []byte("again"))
					rk := RunKey(scope, 7, run, kg, key(i), id2)
					live[string(rk)], want[string(rk)] = partial{kg, key(i), id2, []byte("again")}, true
				}
				rk := RunKey(scope, 7, run, kg, key(i), id)
				live[string(rk)], want[string(rk)] = partial{kg, key(i), id, val}, true
			}
		}
		b := st.NewScopedBatch("s", 0)
		defer b.Close()
		if err := b.AbsorbSorted(p, &w, nil); err != nil {
			t.Fatal(err)
		}
		sets, _ := changes(b.EachChange)
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for k := range sets {
			if bytes.HasPrefix([]byte(k), RunMarker(scope, 7, run)) {
				got = append(got, k)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("run %d: the changelog holds %d of its keys, want %d (one per partial, and the marker)", run, len(got), len(want))
		}
		for _, k := range got {
			if !want[k] {
				t.Fatalf("run %d: the changelog holds %x, no partial's run key", run, k)
			}
		}
	}
	// scan is the window's partials as the close reads them.
	scan := func(st *Store) []string { return scanPartials(t, st, scope, 7) }
	// check compares both stores' scans with live, in (kg, key) order.
	check := func(when string) {
		t.Helper()
		ps := slices.Collect(func(yield func(partial) bool) {
			for _, p := range live {
				if !yield(p) {
					return
				}
			}
		})
		slices.SortFunc(ps, func(a, b partial) int {
			if a.kg != b.kg {
				return int(a.kg) - int(b.kg)
			}
			return bytes.Compare(a.key, b.key)
		})
		var want []string
		for _, p := range ps {
			want = append(want, fmt.Sprintf("%d/%x=%s", p.kg, p.key, p.val))
		}
		want = byGroup(want) // a group's partials in any order
		if got := scan(st); !slices.Equal(got, want) {
			t.Fatalf("%s: the writing store scans %d partials, want %d:\n got %.300q\nwant %.300q", when, len(got), len(want), got, want)
		}
		if got := scan(standby); !slices.Equal(got, want) {
			t.Fatalf("%s: the store rebuilt from the changelog scans %d partials, want %d", when, len(got), len(want))
		}
		// What a changelog rebuilt from the disk would hold (EachScopeKey)
		// is the standby's state, key for key.
		if a, b := scopeDump(t, st, "s", 0), scopeDump(t, standby, "s", 0); a != b {
			t.Fatalf("%s: the writing store's keys as logged differ from the standby's:\n%.400s\nvs\n%.400s", when, a, b)
		}
	}
	runEntries := func() int {
		t.Helper()
		lo, hi := runsOf(scope, 7)
		it, err := st.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for it.First(); it.Valid(); it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		return n
	}

	kgs := []uint16{3, 5, 6, 700, NullGroup}
	commit(0, kgs, 0, 1500)
	check("after the first commit")
	// 5 groups x 1,800 partials of ~50 bytes: a few chunks of each group,
	// and the large value's own.
	if n, partials := runEntries(), len(live)+1; n >= partials/50 || n < 2*len(kgs) {
		t.Fatalf("the run is %d table entries for %d partials (and its marker): not chunked", n, partials)
	}

	// A rescale hands key groups 5 and NULL's away: their partials go,
	// each logged.
	b := st.NewScopedBatch("s", 0)
	if err := b.DeleteWindowGroups(7, []uint16{5, NullGroup}); err != nil {
		t.Fatal(err)
	}
	_, dels := changes(b.EachChange)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	for k, p := range live {
		if p.kg == 5 || p.kg == NullGroup {
			if !dels[k] {
				t.Fatalf("the deletion of key group %d logs no tombstone of %x", p.kg, k)
			}
			delete(live, k)
		}
	}
	check("after key groups 5 and NULL's left")

	// A second run. The standby's first run is an entry per partial (as a
	// store of the previous release holds runs): both kinds are read
	// together.
	commit(1, []uint16{3, 6, 9}, 1000, 2000)
	check("after the second commit")

	// A count of 2 leaves partition 0 the even groups: 3 and 9 go, logged
	// through a watch as the task logs them.
	stop := st.Watch("s", 0)
	entries, _, err := st.DropMovedGroups("s", 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for k, p := range live {
		if p.kg%2 == 1 {
			moved++
			delete(live, k)
		}
	}
	if entries != moved {
		t.Fatalf("DropMovedGroups reports %d entries, want %d partials", entries, moved)
	}
	logged := stop()
	_, dels = changes(func(fn func(k, v []byte) error) error {
		for _, c := range logged {
			if err := fn(c.Key, c.Value); err != nil {
				return err
			}
		}
		return nil
	})
	if len(dels) != moved {
		t.Fatalf("DropMovedGroups logged %d tombstones, want %d", len(dels), moved)
	}
	check("after DropMovedGroups")

	// The window closes: one range deletion, a tombstone per partial.
	b = st.NewScopedBatch("s", 0)
	if err := b.DeleteWindowGroups(7, nil); err != nil {
		t.Fatal(err)
	}
	_, dels = changes(b.EachChange)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	for k := range live {
		if !dels[k] {
			t.Fatalf("the close logs no tombstone of %x", k)
		}
	}
	clear(live)
	check("after the close")
	if d := scopeDump(t, standby, "s", 0); bytes.Contains([]byte(d), []byte(fmt.Sprintf("%x", RunMarker(scope, 7, 0)))) {
		t.Fatalf("the standby keeps the closed window's runs:\n%.500s", d)
	}
}

// TestChunkCoding: a chunk gives back each partial's key, id and value as
// written, whatever the ids do from one partial to the next (the same
// Gen, Seqs up, down, far apart or wrapping; a new Gen), and a chunk of
// version 1 (ids whole, as the previous release wrote them) still reads.
func TestChunkCoding(t *testing.T) {
	type part struct {
		key []byte
		id  DeltaID
		val []byte
	}
	ids := []DeltaID{{7, 0}, {7, 1}, {7, 2}, {7, 1}, {7, 1 << 40}, {7, 3}, {7, ^uint64(0)}, {7, 0},
		{7, 1 << 63}, {7, 0}, {8, 5}, {8, 6}, {0, 0}, {^uint64(0), ^uint64(0) - 1}, {^uint64(0), 1}}
	var parts []part
	for i, id := range ids {
		k := binary.BigEndian.AppendUint64([]byte{1, 'k'}, uint64(i/3)) // three partials a key
		parts = append(parts, part{k, id, []byte(fmt.Sprintf("val%d", i))})
	}
	idBytes := func(id DeltaID) []byte { return appendDeltaKeyID(nil, id) }
	pre := []byte("prefix")
	read := func(version string, k, v []byte) {
		t.Helper()
		var got []part
		if err := expandChunk(k, v, func(key, val []byte) error {
			if !bytes.HasPrefix(key, binary.BigEndian.AppendUint16(bytes.Clone(pre), deltaKG(5))) {
				t.Fatalf("%s: partial key %x outside its run and key group", version, key)
			}
			rest := key[len(pre)+2:]
			id := DeltaID{binary.BigEndian.Uint64(rest[len(rest)-16:]), binary.BigEndian.Uint64(rest[len(rest)-8:])}
			got = append(got, part{bytes.Clone(rest[:len(rest)-16]), id, bytes.Clone(val)})
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", version, err)
		}
		if len(got) != len(parts) {
			t.Fatalf("%s: %d partials, want %d", version, len(got), len(parts))
		}
		for i := range parts {
			if !bytes.Equal(got[i].key, parts[i].key) || got[i].id != parts[i].id || !bytes.Equal(got[i].val, parts[i].val) {
				t.Fatalf("%s: partial %d is (%x, %v, %q), want (%x, %v, %q)", version, i,
					got[i].key, got[i].id, got[i].val, parts[i].key, parts[i].id, parts[i].val)
			}
		}
	}
	var chunks [][2][]byte
	w := chunkWriter{flush: func(k, v []byte) error {
		chunks = append(chunks, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
		return nil
	}}
	for _, p := range parts {
		if err := w.add(pre, 5, p.key, idBytes(p.id), p.val); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 1 || chunks[0][1][0] != chunkVersion {
		t.Fatalf("%d chunks, want one of version %d", len(chunks), chunkVersion)
	}
	read("version 2", chunks[0][0], chunks[0][1])
	v1 := []byte{chunkVersion1}
	var prev []byte
	for _, p := range parts {
		shared := 0
		for shared < len(p.key) && shared < len(prev) && p.key[shared] == prev[shared] {
			shared++
		}
		v1 = binary.AppendUvarint(binary.AppendUvarint(v1, uint64(shared)), uint64(len(p.key)-shared))
		v1 = append(append(v1, p.key[shared:]...), idBytes(p.id)...)
		v1 = append(binary.AppendUvarint(v1, uint64(len(p.val))), p.val...)
		prev = p.key
	}
	read("version 1", chunks[0][0], v1)
	// A Seq near the last one of the same Gen takes a byte or two where
	// the id took 16 (most of these do).
	if len(chunks[0][1]) > len(v1)-100 {
		t.Fatalf("a version 2 chunk takes %d bytes, version 1 %d: ids not coded", len(chunks[0][1]), len(v1))
	}
	if err := expandChunk(chunks[0][0], append([]byte{chunkVersion}, 0, 1, 'x', 3), func(_, _ []byte) error { return nil }); err == nil {
		t.Fatal("an id with an unknown tag read without error")
	}
}
