package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Rescaling (turbinesql rescale) moves whole key groups of a stream's
// partition state from one partition's scope to another's, in the
// changelog. Every key of a partition's state (scopePrefixes) is
//
//	kind, stream, 0, partition (4 bytes), ...
//
// so a key moves to partition q by rewriting those 4 bytes. What follows
// them says which key group an accumulator or a group belongs to; a
// partition's position and task values belong to no key group.

// KeyKind is what a key of a partition's state holds.
type KeyKind byte

const (
	KindAcc   KeyKind = prefixAcc   // an accumulator: (key group, key, window)
	KindGroup KeyKind = prefixGroup // a group or a group's delta: (window, key group, key)
	KindPart  KeyKind = prefixPart  // the partition's position (PartitionMeta)
	KindTask  KeyKind = prefixTask  // a task value (Name)
)

// StateKey is a key of a partition's state, parsed.
type StateKey struct {
	Kind      KeyKind
	Partition int32
	// KG is the key group an accumulator or group belongs to (a delta's
	// group's, NullGroup for the NULL key); Delta marks a group's delta.
	KG    uint16
	Delta bool
	// Run marks a delta stored in a run (state's runs.go): RunEntryAsDelta
	// is its key as a classic delta's. RunMarker is a run's marker: it
	// belongs to no key group (KG is NullGroup) and stays with the
	// partition.
	Run, RunMarker bool
	Name           string // a task value's name
}

// ParseStateKey parses a changelog key of stream's partition state.
func ParseStateKey(stream string, key []byte) (StateKey, error) {
	pl := len(stream) + 2 // kind, stream, 0
	if len(key) < pl+4 || key[pl-1] != 0 || !bytes.Equal(key[1:pl-1], []byte(stream)) {
		return StateKey{}, fmt.Errorf("%w: %q is not a key of stream %s", errCorruptKey, key, stream)
	}
	k := StateKey{Kind: KeyKind(key[0]), Partition: int32(binary.BigEndian.Uint32(key[pl:]))}
	rest := key[pl+4:]
	switch k.Kind {
	case KindPart:
		if len(rest) != 0 {
			return StateKey{}, errCorruptKey
		}
	case KindTask:
		k.Name = string(rest)
	case KindAcc:
		if len(rest) < 3 || rest[0] != 0 {
			return StateKey{}, errCorruptKey
		}
		k.KG = binary.BigEndian.Uint16(rest[1:])
	case KindGroup:
		if len(rest) < 11 || rest[0] != 0 {
			return StateKey{}, errCorruptKey
		}
		stored := binary.BigEndian.Uint16(rest[9:])
		k.KG, k.Delta = realKG(stored), stored == nullDeltaKG || isDeltaKG(stored)
		if stored == runKG { // a run's entry or marker (runs.go)
			switch {
			case len(rest) == 11+8: // the marker: no key group's, never moved
				k.KG, k.Delta, k.RunMarker = NullGroup, false, true
			case len(rest) >= 11+8+2+deltaIDLen:
				k.KG, k.Run = realKG(binary.BigEndian.Uint16(rest[19:])), true
			default:
				return StateKey{}, errCorruptKey
			}
		}
	default:
		return StateKey{}, fmt.Errorf("%w: %q is not a key of a partition's state", errCorruptKey, key)
	}
	return k, nil
}

// MovedKey is key (of stream's partition state) in partition q's scope.
func MovedKey(stream string, key []byte, q int32) []byte {
	out := bytes.Clone(key)
	binary.BigEndian.PutUint32(out[len(stream)+2:], uint32(q))
	return out
}

// MovedDeltaGen is the Gen of a delta a rescale moved: a task numbers its
// own deltas from its input offsets (below 2^63), so a moved delta never
// shares an id with one its new partition writes. A rescale numbers a
// group's moved deltas 0, 1, ... in key order, the same on every run.
const MovedDeltaGen = 1 << 63

// WithDeltaID is the key of a group's delta (a KindGroup key with Delta
// set) with its id replaced.
func WithDeltaID(key []byte, id DeltaID) []byte {
	out := bytes.Clone(key[:len(key)-deltaIDLen])
	return appendDeltaKeyID(out, id)
}

// DeltaGroup is the key of the group a delta key belongs to (its id
// stripped, its key group's delta bit kept): deltas of one group share it.
func DeltaGroup(key []byte) []byte { return key[:len(key)-deltaIDLen] }

// PartitionKey is the key of partition p's position of stream.
func PartitionKey(stream string, p int32) []byte { return partKey(stream, p) }

// TaskKey is the key of a task value of partition p of stream.
func TaskKey(stream string, p int32, name string) []byte { return taskKey(stream, p, name) }

// EncodeMeta is how PutPartition stores m.
func EncodeMeta(m PartitionMeta) []byte { return encodeMeta(m) }

// DecodeMeta reads what EncodeMeta wrote.
func DecodeMeta(v []byte) (PartitionMeta, error) { return decodeMeta(v) }
