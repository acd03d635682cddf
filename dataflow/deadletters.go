package dataflow

import "sync"

// DeadLetters makes each undecodable record of a source go to its
// dead-letter topic once, however many stages read the source (streams, a
// repartition hop, a combine's pre-aggregation): the first stage to reach
// a record writes it, the others only count it. Every stage reading a
// source sees the same undecodable records in the same order per
// partition, so the highest offset claimed per partition is enough. At
// start it is seeded from the dead-letter topic itself (Seen), so a stage
// that replays after a restart does not write a record again.
type DeadLetters struct {
	mu   sync.Mutex
	high map[string]map[int32]int64 // source → partition → highest offset written
}

// NewDeadLetters is an empty registry.
func NewDeadLetters() *DeadLetters { return &DeadLetters{high: map[string]map[int32]int64{}} }

// Seen records that source's partition p has a dead letter at off.
func (d *DeadLetters) Seen(source string, p int32, off int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.see(source, p, off)
}

func (d *DeadLetters) see(source string, p int32, off int64) {
	parts := d.high[source]
	if parts == nil {
		parts = map[int32]int64{}
		d.high[source] = parts
	}
	if old, ok := parts[p]; !ok || off > old {
		parts[p] = off
	}
}

// Claim reports whether the caller writes the dead letter of (source, p,
// off): true for the first stage to reach it.
func (d *DeadLetters) Claim(source string, p int32, off int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.high[source][p]; ok && off <= old {
		return false
	}
	d.see(source, p, off)
	return true
}

// Release gives back the claims of source's partition p from off on: an
// exactly-once stage claimed them in a transaction that aborted, so
// nothing of it reached the dead-letter topic and the next stage to reach
// them must write them. (A later claim by another stage is given back
// too: written again, never lost.)
func (d *DeadLetters) Release(source string, p int32, off int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if high, ok := d.high[source][p]; ok && high >= off {
		d.high[source][p] = off - 1
	}
}
