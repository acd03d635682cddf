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
	claimed map[string]map[int32][]int64 // source → partition → offsets, ascending
	// MaxPerPartition bounds the offsets kept per source partition.
	MaxPerPartition int
}

// DeadLettersKept is the default MaxPerPartition: as many as the server
// seeds from the tail of a dead-letter topic at start.
const DeadLettersKept = 100_000

// NewDeadLetters is an empty registry.
func NewDeadLetters() *DeadLetters {
	return &DeadLetters{claimed: map[string]map[int32][]int64{}, MaxPerPartition: DeadLettersKept}
}

// Seen records that source's partition p has a dead letter at off.
func (d *DeadLetters) Seen(source string, p int32, off int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.add(source, p, off)
}

// Claim reports whether the caller writes the dead letter of (source, p,
// off): true for the first stage to reach it.
func (d *DeadLetters) Claim(source string, p int32, off int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.add(source, p, off)
}

// add inserts off, reporting false when it was there already.
func (d *DeadLetters) add(source string, p int32, off int64) bool {
	parts := d.claimed[source]
	if parts == nil {
		parts = map[int32][]int64{}
		d.claimed[source] = parts
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

// Release gives back the claim of source's partition p at off: an
// exactly-once stage claimed it in a transaction that aborted (or an
// at-least-once stage failed before Kafka acknowledged it), so it may not
// be in the dead-letter topic and whoever reads the record next must
// write it.
func (d *DeadLetters) Release(source string, p int32, off int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	offs := d.claimed[source][p]
	if i, found := slices.BinarySearch(offs, off); found {
		d.claimed[source][p] = slices.Delete(offs, i, i+1)
	}
}
