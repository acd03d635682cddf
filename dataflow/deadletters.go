package dataflow

import (
	"slices"
	"sync"
)

// DeadLetters makes each record of a source that goes to its dead-letter
// topic go there once, however many stages read the source (streams, a
// repartition hop, a combine's pre-aggregation): the first stage to reach
// a record writes it, the others only count it.
//
// It remembers each record claimed by its offset. A high-water mark per
// partition is not enough: the stages of one source do not agree on which
// records are bad (a row without an event time is dead-lettered by a
// windowed stream, used by a stateless one and passed on by a repartition
// hop), so one stage can claim offset 9 before another reaches offset 3.
//
// At start it is seeded from the dead-letter topic itself (Seen), so a
// stage that replays after a restart does not write a record again.
//
// Memory is bounded: at most MaxPerPartition offsets are kept per source
// partition; past that the lowest are forgotten. A stage that reaches a
// forgotten one later (a replay from far back, a stage lagging that far
// behind) writes it again: a duplicate in the topic, never a loss.
type DeadLetters struct {
	mu      sync.Mutex
	claimed map[Letters]map[int32][]int64 // partition → offsets, ascending
	// MaxPerPartition bounds the offsets kept per source partition.
	MaxPerPartition int
}

// Letters names where a source's dead letters go: the source and its
// dead-letter topic. A record is written once to each (a source re-created
// with another dead-letter topic writes there what it finds bad).
type Letters struct{ Source, Topic string }

// DeadLettersKept is the default MaxPerPartition: as many as the server
// seeds from the tail of a dead-letter topic at start.
const DeadLettersKept = 100_000

// NewDeadLetters is an empty registry.
func NewDeadLetters() *DeadLetters {
	return &DeadLetters{claimed: map[Letters]map[int32][]int64{}, MaxPerPartition: DeadLettersKept}
}

// Seen records that the dead-letter topic of l holds the record of l's
// source at partition p, offset off.
func (d *DeadLetters) Seen(l Letters, p int32, off int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.add(l, p, off)
}

// Claim reports whether the caller writes the dead letter of the record
// of l's source at (p, off): true for the first stage to reach it.
func (d *DeadLetters) Claim(l Letters, p int32, off int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.add(l, p, off)
}

// add inserts off, reporting false when it was there already.
func (d *DeadLetters) add(l Letters, p int32, off int64) bool {
	parts := d.claimed[l]
	if parts == nil {
		parts = map[int32][]int64{}
		d.claimed[l] = parts
	}
	offs := parts[p]
	// Offsets mostly arrive in order: appending is the common case.
	if n := len(offs); n == 0 || offs[n-1] < off {
		offs = append(offs, off)
	} else {
		i, found := slices.BinarySearch(offs, off)
		if found {
			return false
		}
		offs = slices.Insert(offs, i, off)
	}
	if max := d.MaxPerPartition; max > 0 && len(offs) > max {
		// Forget the lowest quarter at once, so that trimming is not a
		// copy on every claim once full.
		offs = slices.Delete(offs, 0, len(offs)-max+max/4)
	}
	parts[p] = offs
	return true
}

// Release gives back the claim of the record of l's source at (p, off): an
// exactly-once stage claimed it in a transaction that aborted (or an
// at-least-once stage failed before Kafka acknowledged it), so it may not
// be in the dead-letter topic and whoever reads the record next must
// write it.
func (d *DeadLetters) Release(l Letters, p int32, off int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	offs := d.claimed[l][p]
	if i, found := slices.BinarySearch(offs, off); found {
		d.claimed[l][p] = slices.Delete(offs, i, i+1)
	}
}
