package state

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// KeyGroupsKey is the task value that says a partition's state is keyed
// by key groups of 960 (murmur2 mod 960) whatever the partition count:
// written by RekeyScope. Releases before it grouped the state of a count
// that does not divide 960 by hash mod that count instead, so state that
// ran on such a count and lacks it may be keyed the old way.
const KeyGroupsKey = "keygroups"

// keyGroupsVersion is KeyGroupsKey's value.
var keyGroupsVersion = []byte("960")

// HasKeyGroups reports whether partition p's state of stream is known to
// be keyed by key groups of 960 (KeyGroupsKey).
func (s *Store) HasKeyGroups(stream string, p int32) (bool, error) {
	v, err := s.TaskValue(stream, p, KeyGroupsKey)
	return v != nil, err
}

// rekeyChunk is how many entries a RekeyScope batch moves at most.
const rekeyChunk = 100_000

// RekeyScope gives every entry of partition p's scope of stream the key
// group kgOf says its key belongs to, then records KeyGroupsKey: what a
// task runs at open on state that ran on a partition count that does not
// divide 960 under a release that grouped it by hash mod that count
// (after which lookups by murmur2 mod 960 found nothing). An entry whose
// key group is already right stays; a partial stored in a run (runs.go)
// whose group moves becomes a classic partial under its new group, with
// its id (ids are unique among a group's partials wherever they are
// stored). NULL keys keep their group. It is safe to interrupt: batches
// are committed in turn and each entry either moved or not, and the
// marker comes last, so a run after a crash re-keys what is left. It
// returns how many entries it moved.
func (s *Store) RekeyScope(stream string, p int32, kgOf func(key []byte) (uint16, error)) (int, error) {
	scope := Scope(stream, p)
	b := s.NewBatch(stream)
	defer func() { b.Close() }()
	moved, inBatch := 0, 0
	flush := func() error {
		if inBatch == 0 {
			return nil
		}
		if err := b.Commit(); err != nil {
			return fmt.Errorf("re-key state of %s/%d: %w", stream, p, err)
		}
		b, inBatch = s.NewBatch(stream), 0
		return nil
	}
	move := func(from, to, val []byte) error {
		if err := b.b.Set(to, val, nil); err != nil {
			return err
		}
		if err := b.b.Delete(from, nil); err != nil {
			return err
		}
		moved++
		inBatch++
		if inBatch >= rekeyChunk {
			return flush()
		}
		return nil
	}
	// Accumulators: (key group, key, window).
	apre := streamPrefix(prefixAcc, scope)
	if err := s.eachKey(apre, func(k, v []byte) error {
		kg, key, w, err := decodeAccKey(scope, k)
		if err != nil || kg == NullGroup {
			return err
		}
		want, err := kgOf(key)
		if err != nil || want == kg {
			return err
		}
		return move(k, AccKey(scope, want, key, w), v)
	}); err != nil {
		return moved, err
	}
	// Groups, their partials and runs: (window, key group, key).
	gpre := streamPrefix(prefixGroup, scope)
	if err := s.eachKey(gpre, func(k, v []byte) error {
		w, stored, rest, err := decodeGroupKey(k, len(gpre))
		if err != nil || stored == NullGroup || stored == nullDeltaKG {
			return err
		}
		switch {
		case stored == runKG:
			return s.rekeyRunEntry(b, scope, k, v, len(k)-len(rest)+8, kgOf, func(n int) error {
				moved += n
				inBatch += n
				if inBatch >= rekeyChunk {
					return flush()
				}
				return nil
			})
		case isDeltaKG(stored):
			if len(rest) < deltaIDLen {
				return errCorruptKey
			}
			key := rest[:len(rest)-deltaIDLen]
			want, err := kgOf(key)
			if err != nil || want == realKG(stored) {
				return err
			}
			to := appendGroupKey(nil, scope, w, deltaKG(want), key)
			return move(k, append(to, rest[len(rest)-deltaIDLen:]...), v)
		default:
			want, err := kgOf(rest)
			if err != nil || want == stored {
				return err
			}
			return move(k, GroupKey(scope, w, want, rest), v)
		}
	}); err != nil {
		return moved, err
	}
	if err := b.PutTaskValue(p, KeyGroupsKey, keyGroupsVersion); err != nil {
		return moved, err
	}
	inBatch++
	return moved, flush()
}

// rekeyRunEntry re-keys one entry of a run (a partial, or a chunk of a
// group's partials) under prefix length pl: when a partial's group is not
// the one kgOf gives, the entry's partials become classic partials under
// the right groups and the entry goes. added is told how many moved.
func (s *Store) rekeyRunEntry(b *Batch, scope string, k, v []byte, pl int, kgOf func([]byte) (uint16, error), added func(int) error) error {
	if len(k) == pl {
		return nil // the run's marker
	}
	type partial struct {
		kg           uint16
		key, id, val []byte
	}
	var parts []partial
	wrong := false
	if err := eachPartialOf(k, v, pl, func(pk, pv []byte) error {
		if len(pk) < pl+2+deltaIDLen {
			return errCorruptKey
		}
		key := pk[pl+2 : len(pk)-deltaIDLen]
		had := realKG(binary.BigEndian.Uint16(pk[pl:]))
		want := had // the NULL key's stays
		if had != NullGroup {
			var err error
			if want, err = kgOf(key); err != nil {
				return err
			}
		}
		wrong = wrong || want != had
		parts = append(parts, partial{kg: want, key: bytes.Clone(key), id: bytes.Clone(pk[len(pk)-deltaIDLen:]), val: bytes.Clone(pv)})
		return nil
	}); err != nil || !wrong {
		return err
	}
	w, _, _, err := decodeGroupKey(k, len(streamPrefix(prefixGroup, scope)))
	if err != nil {
		return err
	}
	for _, pt := range parts {
		to := append(appendGroupKey(nil, scope, w, deltaKG(pt.kg), pt.key), pt.id...)
		if err := b.b.Set(to, pt.val, nil); err != nil {
			return err
		}
	}
	if chunkAt(k, pl) {
		err = b.deleteChunk(bytes.Clone(k), nil)
	} else {
		err = b.b.Delete(k, nil)
	}
	if err != nil {
		return err
	}
	return added(len(parts))
}

// eachKey calls fn with every stored key and value under pre (valid
// during the call).
func (s *Store) eachKey(pre []byte, fn func(k, v []byte) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: upper(pre)})
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			it.Close()
			return err
		}
	}
	return it.Close()
}
