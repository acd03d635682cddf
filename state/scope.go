package state

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// A stream's keyed state is scoped by input partition: partition p's task
// keeps its accumulators and groups under Scope(stream, p), and reads only
// that. A partition's state is what it wrote itself, so:
//   - a key that moved to another partition after a partition-count change
//     starts empty there, as Kafka Streams' per-task stores do, and what it
//     left behind stays in the old partition's scope until the start-up
//     cleanup (DropMovedGroups) deletes it;
//   - a producer that places keys by another hash still finds each key's
//     state where its records arrive, whatever key group the key falls in;
//   - the NULL key's group lives on every partition at once, each its own.
//
// Before scopes, every partition shared one range keyed by key group
// (legacyAcc, legacyGroup): MigrateLegacy moves a partition's owned groups
// into its scope the first time it opens, so no data dir loses state.

// NullGroup is the key group of rows whose partition key is NULL: Kafka
// sends them to any partition, so every partition has one, and it is never
// cleaned up. It lies outside every partition count's groups.
const NullGroup uint16 = 0xFFFF

// Scope names partition p's share of stream's state.
func Scope(stream string, p int32) string {
	b := append([]byte(stream), 0)
	return string(binary.BigEndian.AppendUint32(b, uint32(p)))
}

// MigrateLegacy moves the groups in owned that stream kept before scopes
// (one range shared by every partition) into partition p's scope, in one
// batch; it reports how many entries moved. After every partition of the
// stream has opened once, nothing is left in the old layout.
func (s *Store) MigrateLegacy(stream string, p int32, owned []uint16) (int, error) {
	own := make(map[uint16]bool, len(owned))
	for _, g := range owned {
		own[g] = true
	}
	scope := Scope(stream, p)
	b := s.NewBatch(stream)
	defer b.Close()
	n := 0
	for _, kind := range []byte{legacyAcc, legacyGroup} {
		pre := streamPrefix(kind, stream)
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: upper(pre)})
		if err != nil {
			return 0, err
		}
		for it.First(); it.Valid(); it.Next() {
			k := it.Key()
			var nk []byte
			if kind == legacyAcc {
				kg, key, w, err := decodeAccKey(stream, k)
				if err != nil {
					it.Close()
					return 0, err
				}
				if !own[kg] {
					continue
				}
				nk = AccKey(scope, kg, key, w)
			} else {
				w, kg, key, err := decodeGroupKey(k, len(pre))
				if err != nil {
					it.Close()
					return 0, err
				}
				if !own[realKG(kg)] { // a partial (deltas.go) goes with its group
					continue
				}
				nk = GroupKey(scope, w, kg, key)
			}
			if err := b.b.Set(nk, it.Value(), nil); err != nil {
				it.Close()
				return 0, err
			}
			if err := b.b.Delete(k, nil); err != nil {
				it.Close()
				return 0, err
			}
			n++
		}
		if err := it.Close(); err != nil {
			return 0, err
		}
	}
	if n == 0 {
		return 0, nil
	}
	return n, b.Commit()
}

// DropMovedGroups deletes, from partition p's scope of stream, every key
// group p does not own on a count of n, the NULL key's group excepted:
// after a partition-count change these are the keys that moved to another
// partition. Nothing is dropped on a count that does not divide 960. Each run of groups between two owned ones goes with one range
// deletion (per window, for the group layout). It reports how many stored
// entries (key, window) it deleted and of how many key groups.
// maxRangedWindows is the most windows DropMovedGroups deletes a range of
// each key group run of.
const maxRangedWindows = 64

func (s *Store) DropMovedGroups(stream string, p int32, n int) (entries, groups int, err error) {
	if !Divides(n) {
		// On such a count a partition receives keys of every group:
		// "the groups it does not own" would be live state.
		return 0, 0, nil
	}
	scope := Scope(stream, p)
	owned := func(g uint16) bool { return g == NullGroup || (int(g) < KeyGroups && OwnerOf(g, n) == p) }
	seen := map[uint16]bool{}
	// Count first, so the log says what went.
	count := func(kg uint16) {
		if !owned(kg) {
			entries++
			seen[kg] = true
		}
	}
	if err := s.Accs(scope, func(kg uint16, _ []byte, _ int64, _ []byte) error { count(kg); return nil }); err != nil {
		return 0, 0, err
	}
	windows, err := s.GroupWindows(scope)
	if err != nil {
		return 0, 0, err
	}
	gpre := streamPrefix(prefixGroup, scope)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: gpre, UpperBound: upper(gpre)})
	if err != nil {
		return 0, 0, err
	}
	// Runs (runs.go) mix key groups in one range: their moved entries go
	// one by one. So do all moved entries of the group layout when it
	// holds many windows (a SESSION aggregation's index of sessions by
	// end has one per end): a range per window and run would be more
	// deletions than entries.
	var runDels [][]byte
	chunks := map[string]bool{} // run chunks among runDels (Batch.deleteChunk)
	pointDels := len(windows) > maxRangedWindows
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		_, kg, rest, err := decodeGroupKey(k, len(gpre))
		if err != nil {
			it.Close()
			return 0, 0, err
		}
		if kg == runKG {
			if len(rest) == 8 {
				continue // a run's marker
			}
			if len(rest) < 8+2+deltaIDLen {
				it.Close()
				return 0, 0, errCorruptKey
			}
			if g := realKG(binary.BigEndian.Uint16(rest[8:])); !owned(g) {
				runDels = append(runDels, bytes.Clone(k))
				if pl := len(k) - len(rest) + 8; chunkAt(k, pl) {
					chunks[string(k)] = true
					n, err := chunkLen(it.Value())
					if err != nil {
						it.Close()
						return 0, 0, err
					}
					entries += n - 1 // the chunk's partials, counted as entries below
				}
				count(g)
			}
			continue
		}
		count(realKG(kg)) // a delta counts as an entry of its group's key group
		if pointDels && !owned(realKG(kg)) {
			runDels = append(runDels, bytes.Clone(k))
		}
	}
	if err := it.Close(); err != nil {
		return 0, 0, err
	}
	if entries == 0 {
		return 0, 0, nil
	}
	runs := movedRuns(p, n)
	b := s.NewBatch(stream)
	defer b.Close()
	apre := streamPrefix(prefixAcc, scope)
	for _, r := range runs {
		lo := binary.BigEndian.AppendUint16(bytes.Clone(apre), r[0])
		hi := binary.BigEndian.AppendUint16(bytes.Clone(apre), r[1])
		if err := b.b.DeleteRange(lo, hi, nil); err != nil {
			return 0, 0, err
		}
		// The run's groups, then their deltas (deltas.go): the groups'
		// range stops short of the deltas, which the NULL key's group
		// (kept) follows.
		ghi, dhi := r[1], deltaKG(r[1])
		if r[1] == NullGroup {
			// not past the runs, which follow every group's deltas
			ghi, dhi = deltaKGBit, runKG
		}
		for _, w := range windows {
			if pointDels {
				break
			}
			if err := b.b.DeleteRange(GroupKey(scope, w, r[0], nil), GroupKey(scope, w, ghi, nil), nil); err != nil {
				return 0, 0, err
			}
			if err := b.b.DeleteRange(GroupKey(scope, w, deltaKG(r[0]), nil), GroupKey(scope, w, dhi, nil), nil); err != nil {
				return 0, 0, err
			}
		}
	}
	for _, k := range runDels {
		if chunks[string(k)] {
			if err := b.deleteChunk(k, nil); err != nil { // stored: read back when logged
				return 0, 0, err
			}
			continue
		}
		if err := b.b.Delete(k, nil); err != nil {
			return 0, 0, err
		}
	}
	if err := b.Commit(); err != nil {
		return 0, 0, fmt.Errorf("drop moved key groups of %s/%d: %w", stream, p, err)
	}
	return entries, len(seen), nil
}

// movedRuns are the half-open ranges [lo, hi) of key groups partition p
// does not own on n, between 0 and NullGroup (which stays).
func movedRuns(p int32, n int) [][2]uint16 {
	var runs [][2]uint16
	lo := uint16(0)
	for _, g := range OwnedGroups(p, n) {
		if g > lo {
			runs = append(runs, [2]uint16{lo, g})
		}
		lo = g + 1
	}
	if lo < NullGroup {
		runs = append(runs, [2]uint16{lo, NullGroup})
	}
	return runs
}

// ScopedGroup reads one stored group of stream from whichever partition's
// scope holds it, trying partition first (the owner of its key group, where
// a murmur2 producer sends the key), then the others of n.
func (s *Store) ScopedGroup(stream string, first int32, n int, window int64, kg uint16, key []byte) ([]byte, error) {
	for i := 0; i < n; i++ {
		p := (first + int32(i)) % int32(n)
		v, err := s.Group(Scope(stream, p), window, kg, key)
		if err != nil || v != nil {
			return v, err
		}
	}
	return nil, nil
}
